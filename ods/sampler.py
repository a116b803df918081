"""OdsBatchSampler: ODS decisions as a batch sampler (torch-free; DataLoader accepts it).

Each batch is a list of :class:`Pick` (sample index, decided tier, pin bucket), so the fetch,
in the loader process or a worker, knows where to read each sample and what to release.
Iterating starts the sampler's epoch in Redis (idempotent, so ranks of one job that share the
job name share the epoch) and asks for batches until the job's epoch is served.

If Redis stops answering, the epoch does not stop: the sampler warns once and serves, from
storage and in random order, the samples it has not yielded this epoch (it keeps a local bitmap
of them; ranks of one job then no longer coordinate, so they may repeat each other's samples).
"""

from __future__ import annotations

import math
import random
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from ods.store import OdsStore
from seneca.errors import ConfigError

__all__ = ["OdsBatchSampler", "Pick"]


@dataclass(frozen=True)
class Pick:
    """One sample of a decided batch: read ``tier`` (None: storage); ``bucket`` is the pin
    bucket its release names."""

    index: int
    tier: str | None
    bucket: int

    def __index__(self) -> int:
        return self.index


class OdsBatchSampler:
    """Batches of :class:`Pick` for ``job`` from ``store``; see the module docstring.

    Args:
        store: the dataset's :class:`OdsStore`.
        job: job name; ranks of one data-parallel job use the same name.
        batch_size: samples per batch (the last batch of an epoch may be smaller).
        drop_last: skip a last batch smaller than ``batch_size`` (its samples count as served).
        indices: the samples this job trains on (default: all).
        substitute: replace misses by cached samples (ODS); False keeps the random order.
    """

    def __init__(
        self,
        store: OdsStore,
        job: str,
        batch_size: int,
        drop_last: bool = False,
        indices: Sequence[int] | None = None,
        substitute: bool = True,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ConfigError(f"batch_size: expected a positive integer, got {batch_size!r}")
        self.store = store
        self.job = job
        self.batch_size = batch_size
        self.drop_last = bool(drop_last)
        self.indices = None if indices is None else sorted({int(i) for i in indices})
        self.substitute = substitute
        self.epoch = 0
        self.substitutions = 0
        self._joined = False
        self._warned = False

    def _join(self) -> None:
        if not self._joined:
            self.store.join(self.job, self.indices)
            self._joined = True

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration runs (DistributedSampler's contract)."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        n = self.store.samples if self.indices is None else len(self.indices)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def _members(self) -> Sequence[int]:
        return range(self.store.samples) if self.indices is None else self.indices

    def _fallback(self, yielded: bytearray, err: Exception) -> Iterator[list[Pick]]:
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"ODS cache unreachable ({type(err).__name__}: {str(err)[:120]}); finishing the "
                "epoch from storage in random order",
                RuntimeWarning,
                stacklevel=3,
            )
        rest = [i for i in self._members() if not yielded[i >> 3] & (1 << (i & 7))]
        random.shuffle(rest)
        for k in range(0, len(rest), self.batch_size):
            batch = rest[k : k + self.batch_size]
            if self.drop_last and len(batch) < self.batch_size:
                break
            yield [Pick(i, None, 0) for i in batch]

    def __iter__(self) -> Iterator[list[Pick]]:
        epoch = self.epoch
        yielded = bytearray((self.store.samples + 7) // 8)
        try:
            self._join()
            self.store.start_epoch(self.job, epoch)
            while True:
                try:
                    d = self.store.decide(self.job, self.batch_size, self.substitute)
                except redis.ResponseError as err:  # the lease lapsed (a long pause): rejoin
                    if "ODS_NOJOB" not in str(err):
                        raise
                    self._joined = False
                    self._join()
                    continue
                if not d.indices or d.epoch != epoch:
                    break
                self.substitutions += d.substitutions
                if self.drop_last and len(d.indices) < self.batch_size:
                    self.store.release(self.job, d)
                    break
                for i in d.indices:
                    yielded[i >> 3] |= 1 << (i & 7)
                yield [Pick(i, t, d.pin_bucket) for i, t in zip(d.indices, d.tiers, strict=True)]
        except (redis.ConnectionError, redis.TimeoutError, OSError) as err:
            self._joined = False
            yield from self._fallback(yielded, err)
        self.epoch = epoch + 1

    def state_dict(self) -> dict[str, Any]:
        """The epoch to resume; what the epoch has served lives in Redis with the job."""
        return {"epoch": self.epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: the next iteration continues ``state['epoch']`` where the job left it."""
        self.epoch = int(state["epoch"])
