"""Decision: one batch ODS decided for one job, and the parse of the script's reply; Pick: one
sample of a decided batch as the fetch sees it."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from ods.functions import error_of
from seneca_base.tiers import tier_of_letter

__all__ = ["Decision", "Pick", "hits_by_bucket", "merge_decisions", "parse_decision"]


@dataclass(frozen=True)
class Decision:
    """One batch for one job: sample indices and, per index, the tier to read (None: storage).

    ``served`` is the job's count of samples served this epoch after this batch; ``epoch`` the
    epoch the batch belongs to; ``substitutions`` how many misses were replaced by hits;
    ``promised`` the misses another job was making when the batch was decided (their copies
    may be claimed once cached: ``OdsStore.claim``). Its hits are pinned in ``pin_bucket``,
    or, where its parts were decided at different times (a dataset in shards), the k-th in
    ``buckets[k]``.
    """

    epoch: int
    served: int
    substitutions: int
    indices: list[int]
    tiers: list[str | None]
    pin_bucket: int = 0
    promised: frozenset[int] = frozenset()
    buckets: tuple[int, ...] = ()

    @property
    def hits(self) -> int:
        return sum(t is not None for t in self.tiers)

    def picks(self) -> list[Pick]:
        """Its samples as the fetch takes them: each with its tier, pin bucket and promise."""
        buckets = self.buckets or [self.pin_bucket] * len(self.indices)
        return [
            Pick(i, t, b, i in self.promised)
            for i, t, b in zip(self.indices, self.tiers, buckets, strict=True)
        ]


def parse_decision(reply: object) -> Decision:
    """The :class:`Decision` of a ``decide`` reply; an error reply (an exception) is raised."""
    if isinstance(reply, Exception):
        raise error_of(reply)
    return _decision(reply)


def _decision(reply: object) -> Decision:
    epoch, served, subs, picked, tiers, bucket = reply  # type: ignore[misc]
    indices = [int(i) for i in picked]
    return Decision(
        epoch=int(epoch),
        served=int(served),
        substitutions=int(subs),
        indices=indices,
        tiers=[tier_of_letter(t) for t in tiers],
        pin_bucket=int(bucket),
        promised=frozenset(i for i, t in zip(indices, tiers, strict=True) if t in (b"p", "p")),
    )


def merge_decisions(parts: Sequence[Decision], rng: random.Random) -> Decision:
    """One decision of ``parts``, the calls one batch was decided in (one after another, made
    at one server time: one pin bucket), their samples shuffled together: the first parts
    drew the cached samples first, and a batch's hits are not bunched at its front."""
    pairs = [(i, t) for d in parts for i, t in zip(d.indices, d.tiers, strict=True)]
    rng.shuffle(pairs)
    return Decision(
        epoch=parts[-1].epoch,
        served=parts[-1].served,
        substitutions=sum(d.substitutions for d in parts),
        indices=[i for i, _ in pairs],
        tiers=[t for _, t in pairs],
        pin_bucket=parts[0].pin_bucket,
        promised=frozenset().union(*(d.promised for d in parts)),
    )


@dataclass(frozen=True)
class Pick:
    """One sample of a decided batch: read ``tier`` (None: storage); ``bucket`` is the pin
    bucket its release names; ``promised``: a miss another job was making when it was decided,
    whose copy may be claimed once that job has cached it (``OdsStore.claim``)."""

    index: int
    tier: str | None
    bucket: int
    promised: bool = False

    def __index__(self) -> int:
        return self.index


def hits_by_bucket(picks: Sequence[Pick]) -> dict[int, list[int]]:
    """The hits among ``picks`` (samples, in order) by the pin bucket their release names: one
    bucket, unless the batch holds picks decided on both sides of a pin-lease boundary."""
    buckets: dict[int, list[int]] = {}
    for p in picks:
        if p.tier is not None:
            buckets.setdefault(p.bucket, []).append(p.index)
    return buckets
