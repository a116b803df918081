"""Shards: a large dataset's ODS metadata as sub-datasets of at most a fixed size, so that no call
grows with the dataset.

Every ODS call works on one hash slot (``{<dataset>}``), and `decide` runs a few operations over
whole bitmaps of N bits: at 14.2M samples its fixed part is about 2 ms, and one server thread
serves every call of the dataset. :class:`ShardMap` splits the N samples into shards of at most
``size`` samples, and :class:`ShardedStore` keeps each shard as a dataset of its own
(``<dataset>#<k>.<j>``: its own hash slot, chosen so that shards spread evenly over a cluster's
nodes: :func:`shard_names`), with its own
bitmaps, jobs, pins and a share of every tier's budget in proportion to its samples. A job
joins every shard and starts every epoch in each; each batch is decided in one shard, drawn
with probability proportional to the samples the job still has there this epoch (another
shard only where the first runs out), so a call touches one shard and works on at most
``size`` samples, however large N is.

Why the order is as random as with one shard: drawing a shard in proportion to what the job
has left in it, then samples uniformly among those, draws each sample with the probability a
uniform draw over all the job's unserved samples gives it; each shard's epoch serves its
samples exactly once, so their union serves every sample exactly once. A batch's samples come
from one shard; shards are not ranges of indices but a fixed pseudo-random scatter of them
(:meth:`ShardMap.place`: an affine permutation, a multiplier near N times the golden ratio),
so a run of neighbouring indices (a class of an ImageFolder) spreads evenly over the shards,
and a batch drawn from one shard is a uniform draw from a random subset of the dataset.

A dataset of at most ``size`` samples is one shard: the store is the :class:`OdsStore` itself,
with the same keys and calls as without shards (:func:`open_store`).
"""

from __future__ import annotations

import math
import random
from binascii import crc_hqx
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ods import defaults
from ods.decision import Decision
from ods.defaults import DECIDE_CHUNK_SAMPLES
from ods.keys import glob_escape
from ods.store import OdsStore
from seneca_base.errors import ConfigError

__all__ = [
    "ShardMap",
    "ShardedDecision",
    "ShardedStore",
    "Unposted",
    "open_store",
    "shard_names",
    "split_units",
]

#: the largest dataset whose bitmaps ShardMap.places maps with 64-bit products (2^33 samples)
_VECTOR_LIMIT = 1 << 33
#: a Redis Cluster's hash slots, and the most shards whose names are chosen to spread over them
_SLOTS = 16384
_SPREAD_SHARDS = 64

_GOLDEN = (math.sqrt(5) - 1) / 2


def _multiplier(n: int) -> int:
    """A multiplier coprime to ``n`` near ``n`` times the golden ratio's fraction: consecutive
    indices land far apart, and every run of them spreads over the whole range."""
    m = max(1, round(n * _GOLDEN)) | 1
    while math.gcd(m, n) != 1:
        m += 2
    return m


class ShardMap:
    """Which shard holds each of ``samples`` samples, and at which place (its index within the
    shard). The shards are as many as shards of at most ``size`` samples need, and as equal as
    can be (the first ``samples mod count`` hold one more), so each shard's bitmaps are the same
    size; shard k holds the samples whose position ``index * m mod samples`` falls in its range
    of positions. One shard: every sample at its own index."""

    def __init__(self, samples: int, size: int) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise ConfigError(f"shard size: expected a positive integer, got {size!r}")
        self.samples = samples
        self.count = -(-samples // size)
        self.size, self._big = divmod(samples, self.count)  # _big shards hold size + 1
        self._split = self._big * (self.size + 1)  # the positions of the larger shards
        self._mul = 1 if self.count == 1 else _multiplier(samples)
        self._inv = pow(self._mul, -1, samples) if samples > 1 else 1

    def sizes(self) -> list[int]:
        """Each shard's samples."""
        return [self.size + (k < self._big) for k in range(self.count)]

    def place(self, index: int) -> tuple[int, int]:
        """(shard, index within the shard) of sample ``index``."""
        p = index * self._mul % self.samples
        if p < self._split:
            return divmod(p, self.size + 1)
        k, local = divmod(p - self._split, self.size)
        return self._big + k, local

    def index(self, shard: int, local: int) -> int:
        """The sample at ``local`` in ``shard``."""
        if shard < self._big:
            p = shard * (self.size + 1) + local
        else:
            p = self._split + (shard - self._big) * self.size + local
        return p * self._inv % self.samples

    def places(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`place` of each of ``indices`` (int64): their shards and local indices."""
        if self.samples > _VECTOR_LIMIT:
            raise ConfigError(f"samples: at most {_VECTOR_LIMIT} in shards, got {self.samples}")
        n, mul = self.samples, self._mul
        hi = (indices * (mul >> 16)) % n  # the products stay below 2^50
        p = ((hi << 16) % n + indices * (mul & 0xFFFF)) % n
        big = p < self._split
        rest = np.where(big, 0, p - self._split)
        shard = np.where(big, p // (self.size + 1), self._big + rest // self.size)
        local = np.where(big, p % (self.size + 1), rest % self.size)
        return shard, local

    def split_bitmap(self, bitmap: bytes) -> list[bytes]:
        """A Redis-order bitmap of the dataset's samples as each shard's (of its own
        indices)."""
        bits = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8))[: self.samples]
        shard, local = self.places(np.flatnonzero(bits).astype(np.int64))
        out = []
        for k, size in enumerate(self.sizes()):
            mine = np.zeros(size, dtype=np.uint8)
            mine[local[shard == k]] = 1
            out.append(np.packbits(mine).tobytes())
        return out

    def split(self, indices: Sequence[int]) -> dict[int, list[tuple[int, int]]]:
        """Per shard, (position in ``indices``, index within the shard) of its samples."""
        out: dict[int, list[tuple[int, int]]] = {}
        for pos, i in enumerate(indices):
            k, local = self.place(int(i))
            out.setdefault(k, []).append((pos, local))
        return out


def shard_names(dataset: str, count: int) -> list[str]:
    """The shards' dataset names: ``<dataset>#<k>``, with a suffix ``.<j>`` (the first that
    does it) that puts shard k's hash slot near the middle of the k-th of ``count`` equal
    ranges of a Redis Cluster's slots, so that a cluster whose primaries hold equal ranges of
    slots holds the shards as evenly as their count allows. Past ``_SPREAD_SHARDS`` shards,
    hashing alone spreads them."""
    names = [f"{dataset}#{k}" for k in range(count)]
    if count > _SPREAD_SHARDS:
        return names
    width = _SLOTS / count
    for k, name in enumerate(names):
        middle, near = (k + 0.5) * width, width / 8
        j = 0
        while abs(crc_hqx(f"{name}.{j}".encode(), 0) % _SLOTS - middle) > near:
            j += 1
        names[k] = f"{name}.{j}"
    return names


def split_units(total: int, sizes: Sequence[int]) -> list[int]:
    """``total`` units shared in proportion to ``sizes``; the rounding's rest one each to the
    first shards, so that the shares sum to ``total``."""
    n = sum(sizes)
    shares = [total * s // n for s in sizes]
    for k in range(total - sum(shares)):
        shares[k % len(shares)] += 1
    return shares


class Unposted:
    """A decision :meth:`ShardedStore.decide_later` did not post: nothing was sent, so
    cancelling it leaves nothing pinned."""

    def cancel(self) -> bool:
        return True


class _Outboxes:
    """The shards' outboxes (``ods.outbox``), settled and flushed together."""

    def __init__(self, shards: Sequence[OdsStore]) -> None:
        self._shards = shards

    def flush(self) -> None:
        for shard in self._shards:
            shard.outbox.flush()

    def settle(self) -> None:
        for shard in self._shards:
            shard.outbox.settle()


@dataclass(frozen=True)
class ShardedDecision(Decision):
    """A batch decided in shards: ``parts`` are each shard's decision (its own indices), the
    rest as :class:`Decision`, in the dataset's indices."""

    parts: tuple[tuple[int, Decision], ...] = ()


class ShardedStore:
    """The cache engine of one dataset kept in shards of at most ``shard_size`` samples: an
    :class:`OdsStore` per shard, named by :func:`shard_names`. Takes :class:`OdsStore`'s arguments;
    ``capacity`` is the whole dataset's, shared in proportion to the shards' samples.

    The job's calls as with one store: join, start_epoch, decide, release, admit, leave.
    ``lazy``: a job joins a shard and starts its epoch there only when it first draws it (for
    ``ods simulate``: a stretch of an epoch then allocates only the shards it touches; a job
    resumed mid-epoch, or other jobs' demand in shards a job has not reached, need them eager).
    """

    def __init__(
        self,
        client: Any,
        dataset: str,
        samples: int,
        *,
        shard_size: int = defaults.SHARD_SIZE,
        capacity: Mapping[str, int] | None = None,
        seed: int | None = None,
        lazy: bool = False,
        **kwargs: Any,
    ) -> None:
        self.map = ShardMap(samples, shard_size)
        self.lazy = lazy
        self.samples = samples
        self.sizes = self.map.sizes()
        capacity = dict(capacity or {})
        parts = {t: split_units(int(units), self.sizes) for t, units in capacity.items()}
        names = shard_names(dataset, len(self.sizes))
        self.shards = [
            OdsStore(
                client,
                names[k],
                size,
                capacity={t: parts[t][k] for t in parts},
                seed=None if seed is None else seed * 7919 + k,
                decide_chunk=max(defaults.SHARD_DECIDE_CHUNK, size // DECIDE_CHUNK_SAMPLES),
                **kwargs,
            )
            for k, size in enumerate(self.sizes)
        ]
        self.dataset = dataset
        #: the shards' outboxes, as one (``OdsStore.outbox``)
        self.outbox = _Outboxes(self.shards)
        self._left: dict[str, list[int]] = {}  # per job: its samples left per shard this epoch
        self._epoch: dict[str, int] = {}  # per job: its latest epoch
        self._changed: set[int] = set()  # shards a decision, release or admission called
        self._joined: dict[str, set[int]] = {}  # per job: the shards it joined
        self._started: dict[str, set[int]] = {}  # lazy: per job, the shards of its epoch
        prefix, data = glob_escape(kwargs.get("prefix", defaults.KEY_PREFIX)), glob_escape(dataset)
        self._patterns = [f"{prefix}:{{{data}#*", f"{prefix}:v:{{{data}#*"]  # metadata, values

    @property
    def commands(self) -> Counter[str]:
        """Engine calls made, by function (every shard's)."""
        return sum((s.commands for s in self.shards), Counter())

    def _track(self, job: str, replies: list[tuple[int, int]]) -> tuple[int, int]:
        """Note each shard's (epoch, served) for ``job``; returns the epoch and the samples
        served over all shards."""
        pairs = zip(self.sizes, replies, strict=True)
        self._left[job] = [size - served for size, (_, served) in pairs]
        self._epoch[job] = replies[0][0]
        return replies[0][0], sum(served for _, served in replies)

    def join(self, job: str, indices: Sequence[int] | None = None) -> tuple[int, int]:
        """Register ``job`` in every shard (lazy: in none yet); (epoch, served) as
        :meth:`OdsStore.join`."""
        if indices is not None:
            raise ConfigError("indices: a subset of a dataset kept in shards is not supported")
        if self.lazy:
            self._joined.setdefault(job, set())
            return self._track(job, [(self._epoch.get(job, -1), 0)] * len(self.shards))
        self._joined[job] = set(range(len(self.shards)))
        return self._track(job, [s.join(job) for s in self.shards])

    def start_epoch(self, job: str, epoch: int) -> tuple[int, int]:
        """Start ``epoch`` for ``job`` in every shard (lazy: in each when first drawn);
        (epoch, served) as now stored."""
        if self.lazy:
            self._started[job] = set()
            return self._track(job, [(epoch, 0)] * len(self.shards))
        return self._track(job, [s.start_epoch(job, epoch) for s in self.shards])

    def _reach(self, job: str, k: int) -> None:
        """Lazy: ``job`` joins shard ``k`` and starts its epoch there, if not yet."""
        if not self.lazy:
            return
        started = self._started.setdefault(job, set())
        if k in started:
            return
        joined = self._joined.setdefault(job, set())
        if k not in joined:
            self.shards[k].join(job)
            joined.add(k)
        self.shards[k].start_epoch(job, self._epoch.get(job, 0))
        started.add(k)

    def leave(self, job: str) -> None:
        for k in sorted(self._joined.pop(job, set())):
            self.shards[k].leave(job)
        self._left.pop(job, None)
        self._started.pop(job, None)

    def renew(self, job: str) -> bool:
        """Renew ``job``'s lease in every shard it joined; whether it is registered (as
        :meth:`OdsStore.renew`)."""
        if job not in self._joined:
            return False
        return all([self.shards[k].renew(job) for k in sorted(self._joined[job])])

    def decide(
        self, job: str, batch: int, substitute: bool = True, epoch: int | None = None
    ) -> ShardedDecision:
        """The next batch of ``job``, as :meth:`OdsStore.decide` decides it, in one shard drawn
        in proportion to the samples the job has left in each (more shards only where the
        first runs out). Empty once every shard's epoch is served. The samples left are this
        store's count for the job's latest epoch: ``epoch`` names that one (or None)."""
        left = self._left.setdefault(job, list(self.sizes))
        parts: list[tuple[int, Decision]] = []
        want, last = batch, None
        while want > 0 and any(left):
            k = self._shard_for(job, left)
            self._reach(job, k)
            d = self.shards[k].decide(job, want, substitute, epoch)
            self._changed.add(k)
            left[k] = 0 if not d.indices else self.sizes[k] - d.served
            last = d
            if d.indices:
                parts.append((k, d))
                want -= len(d.indices)
        index = self.map.index
        indices = [index(k, i) for k, d in parts for i in d.indices]
        return ShardedDecision(
            epoch=(last.epoch if last is not None else (-1 if epoch is None else epoch)),
            served=sum(self.sizes) - sum(left),
            substitutions=sum(d.substitutions for _, d in parts),
            indices=indices,
            tiers=[t for _, d in parts for t in d.tiers],
            pin_bucket=parts[0][1].pin_bucket if parts else 0,
            promised=frozenset(index(k, i) for k, d in parts for i in d.promised),
            parts=tuple(parts),
        )

    def decide_later(
        self, job: str, batch: int, substitute: bool = True, epoch: int | None = None
    ) -> Unposted:
        """Not posted: a decision in shards is made when it is needed (its shard is drawn
        from what the job has left then), so :meth:`collect` says to :meth:`decide`."""
        return Unposted()

    def collect(self, call: Unposted) -> None:
        """See :meth:`decide_later`: None, decide now."""
        return None

    @property
    def decide_chunk(self) -> int:
        """The samples one call of a shard decides at most."""
        return min(s.decide_chunk for s in self.shards)

    def reseed(self, seed: int) -> None:
        """Each shard's random choices from ``seed`` on (as :meth:`OdsStore.reseed`)."""
        for k, shard in enumerate(self.shards):
            shard.reseed(seed * 7919 + k)

    def restore(self, job: str, epoch: int, consumed: bytes) -> int:
        """Continue ``epoch`` in every shard with each sample not set in ``consumed`` (a
        Redis-order bitmap of the dataset's samples), as :meth:`OdsStore.restore`; returns
        the samples counted as served."""
        parts = self.map.split_bitmap(consumed)
        served = [s.restore(job, epoch, bits) for s, bits in zip(self.shards, parts, strict=True)]
        self._changed.update(range(len(self.shards)))
        return self._track(job, [(int(epoch), n) for n in served])[1]

    def release_hits(self, job: str, bucket: int, hits: Sequence[int]) -> list[int]:
        """Unpin ``hits`` (decided in pin bucket ``bucket``) in their shards; returns the
        samples evicted now."""
        index, out = self.map.index, []
        for k, places in self.map.split(hits).items():
            self._changed.add(k)
            gone = self.shards[k].release_hits(job, bucket, [local for _, local in places])
            out += [index(k, i) for i in gone]
        return out

    def _shard_for(self, job: str, left: list[int]) -> int:
        """A shard drawn with probability proportional to ``left``, by a number every job of
        the dataset draws alike at the same point of the same epoch (its samples served so
        far): each job's draws are as random as independent ones, and jobs in step draw the
        same shard, so each finds there the copies the others just made."""
        point = f"{self.dataset}:{self._epoch.get(job, 0)}:{sum(self.sizes) - sum(left)}"
        target = random.Random(point).random() * sum(left)
        for k, w in enumerate(left):
            target -= w
            if target < 0:
                return k
        return max(k for k, w in enumerate(left) if w)

    def release(self, job: str, decision: ShardedDecision) -> list[int]:
        """Unpin the hits of ``decision``; returns the samples evicted now."""
        index = self.map.index
        self._changed.update(k for k, _ in decision.parts)
        return [index(k, i) for k, d in decision.parts for i in self.shards[k].release(job, d)]

    def admit(
        self,
        job: str,
        items: Sequence[tuple[int, str, int, bytes]],
        wait: bool = True,
        made: Sequence[int] = (),
        later: Collection[int] = (),
    ) -> list[int]:
        """:meth:`OdsStore.admit` of each shard's items (``later``: positions in ``items``);
        the results in the order of ``items``."""
        out = [0] * len(items)
        made_in = self.map.split(made)
        later = set(later)
        for k, places in self.map.split([it[0] for it in items]).items():
            self._changed.add(k)
            mine = [(local, *items[pos][1:]) for pos, local in places]
            late = [n for n, (pos, _) in enumerate(places) if pos in later]
            made_k = [local for _, local in made_in.pop(k, [])]
            got = self.shards[k].admit(job, mine, wait, made_k, late)
            for (pos, _), r in zip(places, got, strict=True):
                out[pos] = r
        for k, places in made_in.items():  # made and not offered, in shards nothing went to
            self.shards[k].admit(job, [], wait, [local for _, local in places])
        return out

    def cached(self, tier: str, indices: Sequence[int]) -> list[bool]:
        """Whether each of ``indices`` is cached in ``tier``."""
        out = [False] * len(indices)
        for k, places in self.map.split(indices).items():
            got = self.shards[k].cached(tier, [local for _, local in places])
            for (pos, _), c in zip(places, got, strict=True):
                out[pos] = c
        return out

    def changed(self) -> set[int]:
        """The shards called to decide, release or admit since this was last asked."""
        out, self._changed = self._changed, set()
        return out

    def _keys(self, pattern: str) -> list[bytes]:
        return list(self.shards[0].client.scan_iter(match=pattern, count=1000))

    def memory(self) -> int:
        """Bytes Redis uses for the dataset's metadata, every shard's (one scan)."""
        client = self.shards[0].client
        keys = self._keys(self._patterns[0])
        return sum(int(client.memory_usage(k, samples=0) or 0) for k in keys)

    def clear(self) -> int:
        """Delete every key of every shard (metadata, values, staged values); returns how many."""
        pipe = self.shards[0].client.pipeline(transaction=False)
        for pattern in self._patterns:
            for key in self._keys(pattern):
                pipe.unlink(key)
        return sum(pipe.execute())


def open_store(
    client: Any,
    dataset: str,
    samples: int,
    shard_size: int = defaults.SHARD_SIZE,
    lazy: bool = False,
    **kwargs: Any,
) -> OdsStore | ShardedStore:
    """The store of a dataset: one :class:`OdsStore` when it fits one shard, else a
    :class:`ShardedStore` (``lazy``: see there)."""
    if samples <= shard_size:
        return OdsStore(client, dataset, samples, **kwargs)
    return ShardedStore(client, dataset, samples, shard_size=shard_size, lazy=lazy, **kwargs)
