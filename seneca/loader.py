"""SenecaLoader: torch's DataLoader over a shared Redis cache of encoded, decoded and augmented
samples."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import redis
import torch
from torch.utils.data import DataLoader

from ods.sampler import OdsBatchSampler
from ods.store import OdsStore
from seneca import defaults
from seneca._malloc import tune_malloc
from seneca._options import (
    load_plan,
    parse_split,
    resolve_batch_tail,
    resolve_job,
    resolve_ods,
)
from seneca._rows import collate_rows
from seneca._units import parse_size
from seneca.connection import CacheClient
from seneca.dataset import CachedDataset
from seneca.embedded import acquire_embedded
from seneca.errors import CacheUnavailableError, ConfigError
from seneca.keys import TIERS, KeySpace
from seneca.stats import Counters
from seneca.tiers import CacheTiers

__all__ = ["SenecaLoader"]


def _data_parallel() -> tuple[int, int]:
    """(world size, rank) of an initialised torch.distributed group, else (1, 0)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


def _server_maxmemory(client: CacheClient) -> int | None:
    try:
        value = int(client.redis.config_get("maxmemory").get("maxmemory", 0))
    except (redis.RedisError, ValueError):
        return None
    return value or None


def _union_over_ranks(bitmap: bytes) -> bytes:
    """The bitwise OR of every rank's ``bitmap`` (equal lengths; a gloo/NCCL collective)."""
    import numpy as np
    import torch.distributed as dist

    bits = torch.from_numpy(np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8)).copy())
    dist.all_reduce(bits, op=dist.ReduceOp.MAX)
    return np.packbits(bits.numpy()).tobytes()


class SenecaLoader(DataLoader):
    """A drop-in replacement for :class:`torch.utils.data.DataLoader` that caches samples.

    Positional and keyword arguments are DataLoader's (same names, defaults and validation
    errors). ``dataset`` must expose ``samples`` as ``torchvision.datasets.ImageFolder`` does.
    Seneca's own options are keyword-only:

    Args:
        cache: ``redis://[:password@]host:port``, ``rediss://...`` or ``unix:///path.sock``;
            None (default) starts or joins the embedded cache shared by this machine's jobs.
        cache_size: bytes the tiers may fill ("2GB", "512MiB" or an int). Default: the
            server's ``maxmemory`` for a URL, ``defaults.CACHE_SIZE`` for the embedded cache.
        split: fractions of ``cache_size`` for the encoded, decoded and augmented tiers, as a
            mapping or an (e, d, a) tuple summing to 1. Default ``defaults.SPLIT``.
        plan: a plan from ``mdp plan SPEC --out plan.json`` (its path, or the loaded JSON):
            its split, and its cache size when ``cache_size`` is not given. Not with ``split``.
        job: name of the training job; loaders with the same name count as one job (ranks of
            one data-parallel job use the same name and together see each sample once).
        ods: batches come from the opportunistic sampler (ODS, ``docs/ods.md``): random,
            every sample once per epoch, misses replaced by cached samples this job has not
            seen. Default: on when ``shuffle=True`` without a ``sampler``/``batch_sampler``.
        batch_tail: run the transform's trailing ``ToDtype``/``ConvertImageDtype``/``Normalize``
            steps once per collated batch in this process (same numbers; workers collate uint8,
            see ``seneca.transforms``). Default: on with the default ``collate_fn`` and
            batching; True without them is an error.
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int = 0,
        collate_fn: Any = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Any = None,
        multiprocessing_context: Any = None,
        generator: Any = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        cache: str | None = None,
        cache_size: int | str | None = None,
        split: Mapping[str, float] | Sequence[float] | None = None,
        plan: str | os.PathLike | Mapping[str, Any] | None = None,
        job: str | None = None,
        ods: bool | None = None,
        batch_tail: bool | None = None,
    ) -> None:
        tune_malloc()
        size = parse_size(cache_size, "cache_size") if cache_size is not None else None
        if plan is not None:
            if split is not None:
                raise ConfigError("give either plan= or split=, not both")
            chosen = load_plan(plan)
            fractions = chosen.split
            planned_size = chosen.cache_bytes
        else:
            fractions = parse_split(split)
            planned_size = None
        job_name = resolve_job(job)
        use_ods = resolve_ods(ods, shuffle, sampler, batch_sampler, batch_size)
        client = CacheClient(cache) if cache is not None else None
        counters = Counters(
            rows=max(0, int(num_workers)) + 1 if isinstance(num_workers, int) else 1
        )
        wrapped = CachedDataset(dataset, None, counters)
        wrapped.defer_tail = resolve_batch_tail(batch_tail, collate_fn, batch_size, batch_sampler)
        self._batch_tail = wrapped.transform.batch_tail if wrapped.defer_tail else None
        if wrapped.defer_tail and collate_fn is None:
            collate_fn = collate_rows  # default_collate, minus the copy of rows read in place
        size = size or planned_size
        if client is None:
            size = size or defaults.CACHE_SIZE
            client = CacheClient(acquire_embedded(size))
        try:
            client.ping()
        except CacheUnavailableError as err:
            warnings.warn(f"{err}; training reads from storage", RuntimeWarning, stacklevel=2)
            wrapped._warned = True  # one warning, not one more per worker
            size = size or defaults.CACHE_SIZE
            use_ods = False
        else:
            maxmemory = _server_maxmemory(client)
            if size and maxmemory and size > maxmemory:
                warnings.warn(
                    f"cache_size {size:,} B is larger than the maxmemory {maxmemory:,} B of "
                    f"{client.redacted}; admissions stop when the server is full",
                    RuntimeWarning,
                    stacklevel=2,
                )
            size = size or maxmemory or defaults.CACHE_SIZE
        budgets = {t: int(fractions[t] * size) for t in TIERS}
        keys = KeySpace(wrapped.storage.fingerprint(), wrapped.transform.fingerprint)
        tiers = CacheTiers(client, keys, budgets, job_name)
        wrapped.tiers = tiers
        self.cache_url = client.redacted
        self.cache_size = size
        self.split = fractions
        self.job = job_name
        self._counters = counters
        self._ods_sampler: OdsBatchSampler | None = None
        user_batch_size, user_drop_last = batch_size, drop_last
        if use_ods:
            store = OdsStore(
                client,
                f"{keys.dataset}.{keys.transform}",
                len(wrapped),
                policy=defaults.ODS_POLICY,
                capacity=budgets,
                values=True,
                overhead=tiers.overhead,
                lease=defaults.JOB_LEASE,
                prefix=defaults.KEY_PREFIX,
            )
            wrapped.ods, wrapped.job = store, job_name
            replicas, rank = _data_parallel()
            self._ods_sampler = OdsBatchSampler(
                store, job_name, batch_size, drop_last, num_replicas=replicas, rank=rank
            )
            batch_size, shuffle, sampler, drop_last = 1, None, None, False
            batch_sampler = self._ods_sampler
        super().__init__(
            wrapped,
            batch_size,
            shuffle,
            sampler,
            batch_sampler,
            num_workers,
            collate_fn,
            pin_memory,
            drop_last,
            timeout,
            worker_init_fn,
            multiprocessing_context,
            generator,
            prefetch_factor=prefetch_factor,
            persistent_workers=persistent_workers,
            pin_memory_device=pin_memory_device,
            in_order=in_order,
        )
        if use_ods:  # look like the DataLoader the user asked for
            object.__setattr__(self, "batch_size", user_batch_size)
            object.__setattr__(self, "drop_last", user_drop_last)

    def __iter__(self) -> Any:
        if self._ods_sampler is None:
            it = super().__iter__()
            return it if self._batch_tail is None else self._finished(it)
        epoch = self._ods_sampler.epoch  # before DataLoader's prefetch runs the sampler
        it = super().__iter__()
        return self._tracked(it if self._batch_tail is None else self._finished(it), epoch)

    def _finished(self, it: Any) -> Any:
        """Run the batch tail on the images of each default-collated ``[images, targets]``."""
        pin = self.pin_memory and torch.cuda.is_available()
        for batch in it:
            if isinstance(batch, list) and batch and isinstance(batch[0], torch.Tensor):
                batch[0] = self._batch_tail(batch[0])
                if pin:
                    batch[0] = batch[0].pin_memory()
            yield batch

    def _tracked(self, it: Any, epoch: int) -> Any:
        """Yield the batches of ``it``, counting them for :meth:`state_dict`."""
        self._progress = (epoch, 0)
        for batch in it:
            self._progress = (epoch, self._progress[1] + 1)
            yield batch
        self._progress = (epoch + 1, 0)

    def state_dict(self) -> dict[str, Any]:
        """Where this loader is in its epoch (torchdata StatefulDataLoader's convention):
        the epoch, the batches consumed in it, and a bitmap of their samples. Needs ODS."""
        sampler = self._require_ods("state_dict")
        epoch, batches = getattr(self, "_progress", (sampler.epoch, 0))
        consumed = sampler.consumed_bitmap(epoch, batches)
        restored = getattr(self, "_restored", None)
        if restored is not None and restored[0] == epoch:
            consumed = bytes(a | b for a, b in zip(consumed, restored[1], strict=True))
        return {"epoch": epoch, "batches": batches, "consumed": consumed}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from :meth:`state_dict` (in this or a new process, same job name): the next
        iteration continues that epoch with every sample not yet consumed, exactly once.

        Under torch.distributed every rank loads its own state (a collective call): the ranks'
        consumed samples are united, and each rank's share of the epoch shrinks by what it
        consumed, as DistributedSampler's would."""
        sampler = self._require_ods("load_state_dict")
        try:
            epoch, consumed = int(state["epoch"]), bytes(state["consumed"])
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"load_state_dict: not a SenecaLoader state: {e}") from None
        if len(consumed) not in (0, (sampler.store.samples + 7) // 8):
            raise ConfigError("load_state_dict: the state is of a dataset of another size")
        sampler.set_epoch(epoch)
        self._progress = (epoch, 0)
        if not consumed:
            return
        mine = sum(bin(b).count("1") for b in consumed)
        union = _union_over_ranks(consumed) if sampler.num_replicas > 1 else consumed
        sampler._join()
        if sampler.rank == 0:
            sampler.store.restore(sampler.job, epoch, union)
        if sampler.num_replicas > 1:
            import torch.distributed as dist

            dist.barrier()  # no rank decides before the epoch is restored
            sampler.resumed = (epoch, mine)
        self._restored = (epoch, consumed)

    def _require_ods(self, what: str) -> OdsBatchSampler:
        if self._ods_sampler is None:
            raise ConfigError(f"{what}: resumable state needs batches from ODS (ods=True)")
        return self._ods_sampler

    @property
    def ods(self) -> bool:
        """Whether batches come from ODS."""
        return self._ods_sampler is not None

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration runs (as ``DistributedSampler.set_epoch``); without it
        each iteration runs the next epoch."""
        if self._ods_sampler is not None:
            self._ods_sampler.set_epoch(epoch)

    @property
    def tiers(self) -> CacheTiers:
        """The cache tiers this loader reads and fills."""
        return self.dataset.tiers

    def stats(self) -> dict[str, Any]:
        """This job's counters, summed over the loader process and its workers.

        Returns ``samples``; per tier (``augmented``, ``decoded``, ``encoded``) its ``hits``,
        ``misses``, ``hit_rate`` and ``admitted``; ``storage_reads``, ``decodes``,
        ``transforms``, ``bytes_storage``, ``bytes_cache`` and ``cache_errors``; with ODS
        ``substitutions`` (misses replaced by hits) and ``ods_gone`` (decided hits found
        evicted, read from the next tier or storage).
        """
        c = self._counters.snapshot()
        out: dict[str, Any] = {"samples": c["samples"]}
        for t in TIERS:
            hits, misses = c[f"hits_{t}"], c[f"misses_{t}"]
            out[t] = {
                "hits": hits,
                "misses": misses,
                "hit_rate": hits / (hits + misses) if hits + misses else 0.0,
                "admitted": c[f"admitted_{t}"],
                "full": c[f"full_{t}"],
            }
        for name in ("storage_reads", "decodes", "transforms", "bytes_storage", "bytes_cache"):
            out[name] = c[name]
        out["cache_errors"] = c["cache_errors"]
        out["substitutions"] = self._ods_sampler.substitutions if self._ods_sampler else 0
        out["ods_gone"] = c["ods_gone"]
        return out

    def reset_stats(self) -> None:
        """Set every counter of :meth:`stats` back to zero."""
        self._counters.reset()
