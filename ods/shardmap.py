"""Where each sample of a dataset kept in shards lives: :class:`ShardMap` (its shard and place
there) and :func:`shard_names` (each shard's name, so also its hash slot), declared once for
``ods.shards`` and everything that reads a dataset's shards.

Shards are not ranges of indices but a fixed pseudo-random scatter of them
(:meth:`ShardMap.place`: an affine permutation, a multiplier near N times the golden ratio), so
a run of neighbouring indices (a class of an ImageFolder) spreads evenly over the shards, and
each shard is a uniform share of the dataset.
"""

from __future__ import annotations

import math
from binascii import crc_hqx
from collections.abc import Sequence

import numpy as np

from ods.keys import SHARD_MARK
from seneca_base.errors import ConfigError

__all__ = ["ShardMap", "shard_names", "split_units"]

#: the largest dataset whose bitmaps ShardMap.places maps with 64-bit products (2^33 samples)
_VECTOR_LIMIT = 1 << 33
#: a Redis Cluster's hash slots, and the most shards whose names are chosen to spread over them
_SLOTS = 16384
_SPREAD_SHARDS = 64
#: bytes of a dataset's bitmap ShardMap.split_bitmap reads at a time (2^25 samples)
_BITMAP_STEP = 1 << 22

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

    def split_bitmap(self, bitmap: bytes, step: int = _BITMAP_STEP) -> list[bytes]:
        """A Redis-order bitmap of the dataset's samples as each shard's (of its own
        indices). Read ``step`` bytes at a time: beside the shards' bitmaps, memory stays
        bounded however large the dataset."""
        out = [np.zeros((size + 7) // 8, dtype=np.uint8) for size in self.sizes()]
        raw = np.frombuffer(bitmap, dtype=np.uint8)
        for first in range(0, len(raw), step):
            found = np.flatnonzero(np.unpackbits(raw[first : first + step])) + first * 8
            shard, local = self.places(found[found < self.samples].astype(np.int64))
            order = np.argsort(shard, kind="stable")
            shard, local = shard[order], local[order]
            edges = np.searchsorted(shard, np.arange(self.count + 1))
            for k in np.flatnonzero(np.diff(edges)):
                mine = local[edges[k] : edges[k + 1]]
                np.bitwise_or.at(out[k], mine >> 3, (0x80 >> (mine & 7)).astype(np.uint8))
        return [bits.tobytes() for bits in out]

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
    names = [f"{dataset}{SHARD_MARK}{k}" for k in range(count)]
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
