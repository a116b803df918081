"""SenecaLoader: torch's DataLoader over a shared Redis cache of encoded, decoded and augmented
samples."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader

from ods.sampler import OdsBatchSampler
from ods.store import OdsStore
from seneca.loader._malloc import tune_malloc
from seneca.loader.dataset import CachedDataset
from seneca.loader.options import resolve_batch_tail, resolve_job, resolve_ods
from seneca.loader.rows import collate_rows
from seneca.loader.setup import cache_options, cache_store, connect, ods_sampler
from seneca.loader.stats import Counters
from seneca_base.errors import ConfigError
from seneca_base.tiers import TIERS

__all__ = ["SenecaLoader"]


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
            see ``seneca.pipeline.transforms``). Default: on with the default ``collate_fn`` and
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
        options = cache_options(cache, cache_size, split, plan)
        job_name = resolve_job(job)
        use_ods = resolve_ods(ods, shuffle, sampler, batch_sampler, batch_size)
        workers = num_workers if isinstance(num_workers, int) else 0
        self._counters = Counters(rows=max(0, workers) + 1)
        defer_tail = resolve_batch_tail(batch_tail, collate_fn, batch_size, batch_sampler)
        wrapped = CachedDataset(dataset, self._counters, defer_tail=defer_tail)
        self._batch_tail = wrapped.transform.batch_tail if defer_tail else None
        if defer_tail and collate_fn is None:
            collate_fn = collate_rows  # default_collate, minus the copy of rows read in place
        setup = connect(options)
        store = cache_store(setup, *wrapped.cache_ids(), len(wrapped))
        self.cache_url, self.cache_size, self.split = setup.client.redacted, setup.size, setup.split
        self.job = job_name
        self._ods_sampler: OdsBatchSampler | None = None
        batching: dict[str, Any] = dict(
            batch_size=batch_size, shuffle=shuffle, sampler=sampler, drop_last=drop_last
        )
        if use_ods and setup.reachable:
            self._ods_sampler = ods_sampler(store, job_name, batch_size, drop_last)
            batching = dict(batch_size=1, shuffle=None, sampler=None, drop_last=False)
            batch_sampler = self._ods_sampler
        # an unreachable cache has warned already: one warning, not one more per worker
        wrapped.attach(store, job_name, self.cache_url, warned=not setup.reachable)
        super().__init__(
            wrapped,
            **batching,
            batch_sampler=batch_sampler,
            num_workers=num_workers,
            collate_fn=collate_fn,
            pin_memory=pin_memory,
            timeout=timeout,
            worker_init_fn=worker_init_fn,
            multiprocessing_context=multiprocessing_context,
            generator=generator,
            prefetch_factor=prefetch_factor,
            persistent_workers=persistent_workers,
            pin_memory_device=pin_memory_device,
            in_order=in_order,
        )
        if self._ods_sampler is not None:  # look like the DataLoader the user asked for
            object.__setattr__(self, "batch_size", batch_size)
            object.__setattr__(self, "drop_last", drop_last)

    def __iter__(self) -> Any:
        if self._ods_sampler is None:
            it = super().__iter__()
            return it if self._batch_tail is None else self._finished(it)
        self._progress = (self._ods_sampler.next_epoch(), 0)
        self._iteration = object()
        it = super().__iter__()
        it = it if self._batch_tail is None else self._finished(it)
        return self._tracked(it, self._iteration)

    def _finished(self, it: Any) -> Any:
        """Run the batch tail on the images of each default-collated ``[images, targets]``."""
        pin = self.pin_memory and torch.cuda.is_available()
        for batch in it:
            if isinstance(batch, list) and batch and isinstance(batch[0], torch.Tensor):
                batch[0] = self._batch_tail(batch[0])
                if pin:
                    batch[0] = batch[0].pin_memory()
            yield batch

    def _tracked(self, it: Any, token: object) -> Any:
        """Yield the batches of ``it``, counting them for :meth:`state_dict` while it is the
        latest iteration (``token``): an abandoned one counts no more."""
        epoch = None
        for batch in it:
            if epoch is None:  # the sampler has taken the iteration's epoch by now
                epoch = self._ods_sampler.current
            if self._iteration is token:
                self._progress = (epoch, self._progress[1] + 1)
            yield batch
        if self._iteration is token and epoch is not None:
            self._progress = (epoch + 1, 0)

    def state_dict(self) -> dict[str, Any]:
        """Where this loader is in its epoch (torchdata StatefulDataLoader's convention):
        the epoch, the batches consumed in it, and a bitmap of their samples. Needs ODS."""
        sampler = self._require_ods("state_dict")
        epoch, batches = getattr(self, "_progress", (sampler.next_epoch(), 0))
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
        sampler.resume(epoch)
        self._progress = (epoch, 0)
        if not consumed:
            return
        mine = sum(bin(b).count("1") for b in consumed)
        union = _union_over_ranks(consumed) if sampler.num_replicas > 1 else consumed
        sampler.join()
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
    def store(self) -> OdsStore:
        """The cache this loader reads and fills (its tiers, budgets and jobs; shared with
        every loader over the same files and transform): ``usage()``, ``state()``,
        ``clear()``."""
        return self.dataset.store

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
