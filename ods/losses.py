"""Where the storage loads of an ``ods simulate`` run come from: every load is filed under one
cause, so that a policy's loads above the ceiling (``ods.ceiling``) show what it lost.

The trace sees what each job is served and loads, and the cache's bitmap after each call (its
admissions and evictions, as they happened). A load of sample i by job k is:

* ``first``: i was never loaded before in the run (every sample is, once);
* ``dropped_needed``: i's last copy left the cache (evicted, or refused when it was loaded)
  while job k, in the epoch it is in now, still needed it: a hit the policy gave up (for a
  sample more jobs needed, or by mistake);
* ``not_needed``: i's last copy left while job k did not need it (k had been served i in an
  earlier epoch, or had not joined yet): only a cache that holds i longer keeps it;
* ``prefetch``: loaded without a miss (the 'paper' policy refills its room from storage).

Also counted: ``evicted_needed``, the evictions of copies some live job still needed (each
needing job counts once; a copy a job then met as a miss is one of the ``dropped_needed``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from ods.bitmaps import clear_bit, set_bit, test_bit
from ods.shardmap import ShardMap

__all__ = ["CAUSES", "LossTrace", "ShardedTrace"]


@dataclass
class _Job:
    epoch: int
    served: bytearray  # a bit per sample: set once served in the current epoch


#: The causes a load is filed under (see the module docstring).
CAUSES = ("first", "dropped_needed", "not_needed", "prefetch")


class LossTrace:
    """The loads of one run of ``samples`` samples by cause (see the module docstring):
    ``counts`` maps each of ``CAUSES``, and ``evicted_needed``, to a count."""

    def __init__(self, samples: int) -> None:
        self.samples = samples
        self.counts: dict[str, int] = dict.fromkeys((*CAUSES, "evicted_needed"), 0)
        self._jobs: dict[int, _Job] = {}
        self._loaded = bytearray((samples + 7) // 8)  # a bit per sample: set once loaded
        #: per sample whose last copy left: the (job, epoch) pairs that still needed it then
        self._needers: dict[int, frozenset[tuple[int, int]]] = {}
        self._cached = 0  # the cache's bitmap after the last call, as an integer

    @property
    def loads(self) -> int:
        """Storage loads of the run so far."""
        return sum(self.counts[c] for c in CAUSES)

    def start(self, job: int, epoch: int) -> None:
        """Job ``job`` starts ``epoch`` (its first: it joins)."""
        self._jobs[job] = _Job(epoch, bytearray((self.samples + 7) // 8))

    def leave(self, job: int) -> None:
        self._jobs.pop(job, None)

    def served(self, job: int, indices: Iterable[int]) -> None:
        marks = self._jobs[job].served
        for i in indices:
            set_bit(marks, i)

    def unserved(self, job: int, indices: Iterable[int]) -> None:
        """``job``'s ``indices`` go back among its unserved samples (swapped late)."""
        marks = self._jobs[job].served
        for i in indices:
            clear_bit(marks, i)

    def loaded(self, job: int | None, indices: Iterable[int]) -> None:
        """``job`` loaded ``indices`` from storage after a miss (``None``: a prefetch)."""
        me = None if job is None else (job, self._jobs[job].epoch)
        for i in indices:
            if not test_bit(self._loaded, i):
                cause = "first"
            elif me is None:
                cause = "prefetch"
            elif me in self._needers.get(i, ()):
                cause = "dropped_needed"
            else:
                cause = "not_needed"
            set_bit(self._loaded, i)
            self.counts[cause] += 1
            self._needers.pop(i, None)

    def cache_is(self, bitmap: bytes, loaded: Iterable[int]) -> None:
        """The cache's bitmap after a call that loaded ``loaded``: the copies that left since
        the last call, and the loads it did not admit, are noted with who still needed them."""
        bitmap = bitmap.ljust((self.samples + 7) // 8, b"\0")  # (a missing key: empty)
        now = int.from_bytes(bitmap, "big")
        width = 8 * len(bitmap)
        gone = self._cached & ~now
        while gone:
            low = gone & -gone
            self._left(width - low.bit_length(), evicted=True)
            gone ^= low
        for i in loaded:
            if not bitmap[i >> 3] >> (7 - (i & 7)) & 1:
                self._left(i, evicted=False)
        self._cached = now

    def _left(self, i: int, evicted: bool) -> None:
        needers = frozenset(
            (k, j.epoch) for k, j in self._jobs.items() if not test_bit(j.served, i)
        )
        self._needers[i] = needers
        if evicted:
            self.counts["evicted_needed"] += len(needers)


class ShardedTrace:
    """The loads of a run whose metadata is kept in shards (``ods.shards``): a
    :class:`LossTrace` per shard, each in its shard's indices, made when a call first touches
    the shard (a stretch of a large run allocates only the shards it touched); the calls and
    ``counts`` as one trace's, ``cache_is`` given the bitmaps of the shards that changed."""

    def __init__(self, shards: ShardMap) -> None:
        self.map = shards
        self.traces: dict[int, LossTrace] = {}
        self._epochs: dict[int, int] = {}  # per job: the epoch it is in

    @property
    def counts(self) -> dict[str, int]:
        out = dict.fromkeys((*CAUSES, "evicted_needed"), 0)
        for t in self.traces.values():
            for cause, n in t.counts.items():
                out[cause] += n
        return out

    @property
    def loads(self) -> int:
        return sum(t.loads for t in self.traces.values())

    def _trace(self, k: int) -> LossTrace:
        t = self.traces.get(k)
        if t is None:
            t = self.traces[k] = LossTrace(self.map.sizes()[k])
            for job, epoch in self._epochs.items():
                t.start(job, epoch)
        return t

    def start(self, job: int, epoch: int) -> None:
        self._epochs[job] = epoch
        for t in self.traces.values():
            t.start(job, epoch)

    def leave(self, job: int) -> None:
        self._epochs.pop(job, None)
        for t in self.traces.values():
            t.leave(job)

    def _each(self, indices: Iterable[int]) -> Iterator[tuple[LossTrace, list[int]]]:
        for k, places in self.map.split(list(indices)).items():
            yield self._trace(k), [local for _, local in places]

    def served(self, job: int, indices: Iterable[int]) -> None:
        for t, local in self._each(indices):
            t.served(job, local)

    def unserved(self, job: int, indices: Iterable[int]) -> None:
        for t, local in self._each(indices):
            t.unserved(job, local)

    def loaded(self, job: int | None, indices: Iterable[int]) -> None:
        for t, local in self._each(indices):
            t.loaded(job, local)

    def cache_is(self, bitmaps: Mapping[int, bytes], loaded: Iterable[int]) -> None:
        """Each shard's tier bitmap in ``bitmaps`` (those of every shard a call changed since
        the last, and of every shard ``loaded`` is in) after a call that loaded ``loaded``."""
        local = {k: [i for _, i in places] for k, places in self.map.split(list(loaded)).items()}
        for k, bitmap in bitmaps.items():
            self._trace(k).cache_is(bitmap, local.get(k, []))
