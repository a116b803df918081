"""CachedDataset: an ImageFolder-like dataset read through the Redis cache tiers.

Per batch (``__getitems__``, called in the loader process or a DataLoader worker): the tier to
read each sample from comes with the batch when ODS decided it, else from one ``lookup`` call
(the loader's own order); ``seneca.loader.fetch`` then reads the values, reads misses from
storage, runs only the remaining work (decode, transform head), offers new values to the cache
and runs the transform tail. An unreachable cache never stops training: a call that failed or
was abandoned at its deadline makes the whole job read from storage until a retry finds the
cache answering again (``seneca_base.backoff``: one warning per outage).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import redis
import torch.utils.data
from PIL import Image
from torchvision.transforms.functional import pil_to_tensor

from ods.decision import Pick
from ods.store import OdsStore
from seneca import defaults
from seneca.autoplan.record import PlanRecord
from seneca.loader.bypass import Tag, Tagged
from seneca.loader.fetch import ReadsAhead, fetch_decided
from seneca.loader.malloc import tune_malloc
from seneca.loader.part_buffers import part_buffers
from seneca.loader.rows import BatchRows
from seneca.loader.source import Resolved
from seneca.loader.stats import Counters, process_row
from seneca.loader.worker_exit import guard_exit
from seneca.pipeline import codec
from seneca.pipeline.transforms import split_transform
from seneca_base.backoff import Backoff
from seneca_base.errors import CacheError, CodecError
from seneca_base.tiers import TIERS, budgets

log = logging.getLogger("seneca")

__all__ = ["CachedDataset"]


def _image_bytes(image: Any) -> int:
    """Bytes of a decoded image as the decoded tier stores it (0 when it is no PIL image)."""
    if isinstance(image, Image.Image):
        return image.width * image.height * len(image.getbands())
    return 0


class CachedDataset(torch.utils.data.Dataset):
    """The user's dataset read through the cache (``seneca.loader.source`` says which datasets
    can be): item ``i`` is the user's item ``i``.

    Attribute reads and writes that this wrapper does not define (``classes``, a setting a
    ``worker_init_fn`` changes, ...) go to the user's dataset; setting ``transform`` or
    ``target_transform`` sets the dataset's and is used from then on.
    """

    _OWN = frozenset(
        {"dataset", "resolved", "source", "positions", "transform", "target_transform"}
        | {"counters", "defer_tail", "store", "job", "cache_name", "plan_size", "part_buffers"}
        | {"backoff", "strict", "upcoming", "reads_ahead"}
    )

    def __init__(
        self, dataset: Any, resolved: Resolved, counters: Counters, defer_tail: bool = False
    ) -> None:
        own = object.__setattr__
        own(self, "dataset", dataset)
        own(self, "resolved", resolved)
        own(self, "source", resolved.source)
        #: the source's index of each of the user's samples (None: the same)
        own(self, "positions", resolved.positions)
        own(self, "transform", split_transform(getattr(resolved.base, "transform", None)))
        own(self, "target_transform", getattr(resolved.base, "target_transform", None))
        self.counters = counters
        #: The loader runs ``transform.batch_tail`` on collated batches (default collate only,
        #: which copies): samples then end after ``transform.sample_tail``.
        self.defer_tail = defer_tail
        #: The dataset's cache (None: no cache) and the job this loader reads it as.
        self.store: OdsStore | None = None
        self.job: str | None = None
        self.cache_name = ""
        #: with ``split="auto"``: the cache size the shared plan's split applies to (each
        #: fetch reads the plan and sets the store's budgets; None: a fixed split)
        self.plan_size: int | None = None
        self._plan_raw: Any = None
        #: the job's back-off of the cache (see ``attach``; None: no cache)
        self.backoff: Backoff | None = None
        #: a cache failure is raised (CacheError) instead of read around
        self.strict = False
        #: in the loader process without workers: the sampler's next batch when it is decided
        #: (``OdsBatchSampler.upcoming``), and the reads of it sent ahead (``loader.fetch``)
        self.upcoming: Callable[[], Sequence[Pick] | None] | None = None
        self.reads_ahead = ReadsAhead()
        #: in a worker with the bypass: how many shared buffers its parts' rows may reuse
        #: (``seneca.loader.part_buffers``; 0: none)
        self.part_buffers = 0

    def cache_ids(self) -> tuple[str, str]:
        """(dataset, view) as the cache names them: the dataset is the source's samples and how
        they decode (its encoded and decoded values are the same for every transform); the
        view is the transform's cached head (its augmented copies are its own)."""
        return self.source.id, self.transform.fingerprint

    def attach(self, store: OdsStore, job: str, name: str, unreachable: bool = False) -> None:
        """Read and fill the cache ``store`` as ``job``; ``name``: the cache's URL as logs show
        it; ``unreachable``: it did not answer when the loader was made (reported then: the
        job starts backing off without another warning)."""
        self.store, self.job = store, job
        self.cache_name = name
        #: shared with the sampler and the workers: the job backs off the cache as one
        self.backoff = Backoff(name, defaults.CACHE_RETRY_FIRST, defaults.CACHE_RETRY_CAP)
        if unreachable:
            self.backoff.failed(said=True)

    def adopt_plan(self, raw: Any) -> None:
        """Budget the tiers by the shared plan ``raw`` (a ``seneca.autoplan`` record, as read
        from the cache; anything else leaves the budgets as they are)."""
        if not isinstance(raw, bytes | bytearray) or raw == self._plan_raw or not self.plan_size:
            return
        self._plan_raw = bytes(raw)
        record = PlanRecord.from_json(self._plan_raw)
        if record is not None and self.store is not None:
            self.store.capacity = budgets(record.fractions, self.plan_size)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in self._OWN:
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("transform", "target_transform"):
            setattr(self.resolved.base, name, value)
            object.__setattr__(self, name, split_transform(value) if name == "transform" else value)
        elif name.startswith("_") or name in self._OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self.dataset, name, value)

    def __len__(self) -> int:
        return len(self.source) if self.positions is None else len(self.positions)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        return self.__getitems__([index])[0]

    # -- cache access with fallback -------------------------------------------------------------

    def _cache_failed(self, err: Exception, count: Counter) -> None:
        if self.strict:
            raise CacheError(
                f"cache {self.cache_name} failed ({type(err).__name__}: {err})"
            ) from err
        count["cache_errors"] += 1
        if self.backoff is not None:
            self.backoff.failed(err)  # warns once per outage, for the whole job

    def cache_answered(self) -> None:
        """A call to the cache succeeded: any outage of the job ends (logged once)."""
        if self.backoff is not None:
            self.backoff.succeeded()

    def cache_refused(self, used: dict[str, int], values: int) -> None:
        """The server refused to store ``values`` values the tiers' budgets had room for: its
        memory filled before them (other data, reply buffers). This process's budgets shrink
        by a tenth below what the tiers hold (``used``), or below the budgets when the tiers
        hold less than half of them; the job warns once."""
        store = self.store
        if store is None:
            return
        total, held = sum(store.capacity.values()), sum(used.values())
        fit = defaults.REFUSED_SHRINK * (min(total, held) if 2 * held > total else total)
        scale = fit / total if total else 1.0
        store.capacity = {t: int(c * scale) for t, c in store.capacity.items()}
        if self.plan_size:
            self.plan_size = int(self.plan_size * scale)
        if self.counters.once("cache-refused"):
            log.warning(
                "cache %s refused to store %d values (its memory is full below the tiers' "
                "budgets); counted as cache errors, the budgets shrink to %s bytes",
                self.cache_name,
                values,
                f"{int(fit):,}",
            )

    def cache_down(self) -> bool:
        """Whether the job backs off the cache now (see ``seneca_base.backoff``), or there is
        none: read from storage without trying it."""
        return self.store is None or self.backoff is None or self.backoff.down()

    def _lookup(self, indices: list[int]) -> list[Pick]:
        """Where to read each sample of a batch in the loader's own order."""
        if not self.cache_down():
            try:
                d = self.store.lookup(self.job, indices)
            except (redis.RedisError, OSError, CacheError) as err:
                count: Counter = Counter()
                self._cache_failed(err, count)
                self.counters.add(process_row(), count)
            else:
                self.cache_answered()
                return [Pick(i, t, d.pin_bucket) for i, t in zip(indices, d.tiers, strict=True)]
        return [Pick(i, None, 0) for i in indices]

    # -- per-sample work ------------------------------------------------------------------------

    def _cached_value(self, value: bytes, tier: str, count: Counter) -> Any | None:
        try:
            return codec.decode(value, image_tensor=tier == "augmented" and self.tensor_hits)
        except CodecError as err:
            count["cache_errors"] += 1
            log.warning("ignoring a bad cached %s value: %s", tier, err)
            return None

    @property
    def tensor_hits(self) -> bool:
        """Augmented hits are handed on as uint8 tensors (views of the cached bytes): the batch
        tail is deferred and the sample tail starts with ``PILToTensor``."""
        return self.defer_tail and self.transform.tensor_first

    @staticmethod
    def _tensor_value(img: Image.Image) -> bytes | None:
        """``PILToTensor(img)`` as a cache value (C x H x W, contiguous): both what the
        augmented tier stores and, decoded, what the rest of the tail gets. None for images
        whose tensor the codec cannot store (uint16 modes)."""
        value = codec.encode_image_chw(img)
        if value is None:  # other modes: torchvision's own conversion
            try:
                value = codec.encode(pil_to_tensor(img).contiguous())
            except CodecError:
                return None
        return value

    def _offerer(
        self, room: dict[str, int], admit: list[tuple[int, str, bytes]], always: str | None = None
    ) -> Callable[[int, str, Any], bool]:
        """``offer(index, tier, value, encoded=False)``: queue a value (``encoded``: already a
        cache value) for admission while ``room`` (bytes per tier, updated) allows; ``always``
        names a tier offered even when full (ODS decides)."""
        store = self.store
        charge = store.charge if store is not None else len
        least = charge(0)

        def offer(index: int, tier: str, value: Any, encoded: bool = False) -> bool:
            if room.get(tier, 0) <= least and tier != always:
                return False
            try:
                data = value if encoded else codec.encode(value)
            except CodecError:  # a type, dtype or image mode the codec keeps no faithful copy of
                return False
            cost = charge(len(data))
            if room.get(tier, 0) < cost and tier != always:
                room[tier] = 0  # full for this batch: don't encode more values just to drop them
                return False
            room[tier] = room.get(tier, 0) - cost
            admit.append((index, tier, data))
            return True

        return offer

    def _finish(
        self,
        index: int,
        tier: str | None,
        obj: Any,
        count: Counter,
        offer: Callable[[int, str, Any], bool],
        aug_ok: bool,
    ) -> tuple[Any, Any]:
        """The remaining work for a sample found in ``tier`` as ``obj`` (None: storage)."""
        # whether obj is PILToTensor's result (a view of a cache value's bytes)
        as_tensor = tier == "augmented" and isinstance(obj, torch.Tensor)
        if tier != "augmented":
            if tier == "decoded":
                image = obj
            else:
                raw = obj
                if tier is None:
                    start = time.perf_counter_ns()
                    raw = self.source.read(index)
                    count["ns_storage"] += time.perf_counter_ns() - start
                    count["storage_reads"] += 1
                    got = len(raw) if raw is not None else self.source.size(index)
                    count["bytes_storage"] += got
                    count["bytes_encoded"] += got
                elif raw is not None:
                    count["bytes_encoded"] += len(raw)
                start = time.perf_counter_ns()
                image = self.source.decode(index, raw)
                count["ns_decode"] += time.perf_counter_ns() - start
                count["decodes"] += 1
                count["bytes_decoded"] += _image_bytes(image)
                if tier is None and not offer(index, "decoded", image) and raw is not None:
                    offer(index, "encoded", raw)
            obj = image
            start = time.perf_counter_ns()
            if self.transform.head is not None:
                obj = self.transform.head(obj)
                count["transforms"] += 1
            # the tail starts with PILToTensor: run it here, as the value the tier would store
            to_tensor = self.transform.tensor_first and isinstance(obj, Image.Image)
            value = self._tensor_value(obj) if to_tensor else None
            if value is not None:
                obj, as_tensor = codec.decode(value), True
                count["bytes_augmented"] += len(value)
                count["augmented_made"] += 1
            if self.transform.head is not None:
                count["ns_transform"] += time.perf_counter_ns() - start
            if aug_ok and self.transform.head is not None:
                if value is not None:
                    offer(index, "augmented", value, encoded=True)
                elif not to_tensor:  # an image the codec cannot store as a tensor: not cached
                    offer(index, "augmented", obj)
        tail = self.transform.sample_tail if self.defer_tail else self.transform.tail
        if as_tensor and self.transform.tensor_first:
            if self.defer_tail:
                tail = self.transform.after_tensor
            else:  # the user's collate_fn may write into it: hand over a copy
                obj, tail = obj.clone(), self.transform.after_tensor_all
        if tail is not None:
            obj = tail(obj)
        target = self.source.target(index)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return obj, target

    def __getitems__(self, indices: Sequence[Any]) -> list[tuple[Any, Any]]:
        tune_malloc()  # once per process (this may be a DataLoader worker)
        if torch.utils.data.get_worker_info() is not None:
            guard_exit()  # once per worker: its exit waits for the results it is sending
        if indices and isinstance(indices[0], Tag):  # a worker's part of a batch (bypass)
            return self._part(indices[0], indices[1:])
        if indices and isinstance(indices[0], Pick):  # decided by ODS
            return fetch_decided(self, indices, evict=True)
        where = self.positions
        wanted = [int(i) for i in indices] if where is None else [where[int(i)] for i in indices]
        return fetch_decided(self, self._lookup(wanted), evict=False)

    def _part(self, tag: Tag, picks: Sequence[Pick]) -> Tagged:
        """A worker's part of batch ``tag``: its ``picks`` made here, their images in rows of a
        reused shared buffer where they can be (``seneca.loader.part_buffers``)."""
        part = Tagged()
        part.tag = tag.batch
        if not picks:
            return part
        if self.part_buffers and torch.utils.data.get_worker_info() is not None:
            buffers = part_buffers(self.part_buffers)
            buffers.begin(tag.iteration)
            part.rows = BatchRows(len(picks), buffers, tag.size)
        part.extend(fetch_decided(self, picks, evict=True, rows=part.rows))
        return part

    @staticmethod
    def _count_lookup(tier: str | None, count: Counter) -> None:
        for name in TIERS:
            if tier == name:
                count[f"hits_{name}"] += 1
                return
            count[f"misses_{name}"] += 1
