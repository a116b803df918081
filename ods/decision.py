"""Decision: one batch ODS decided for one job, and the parse of the script's reply."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from ods.functions import error_of
from seneca_base.tiers import tier_of_letter

__all__ = ["Decision", "merge_decisions", "parse_decision"]


@dataclass(frozen=True)
class Decision:
    """One batch for one job: sample indices and, per index, the tier to read (None: storage).

    ``served`` is the job's count of samples served this epoch after this batch; ``epoch`` the
    epoch the batch belongs to; ``substitutions`` how many misses were replaced by hits.
    """

    epoch: int
    served: int
    substitutions: int
    indices: list[int]
    tiers: list[str | None]
    pin_bucket: int = 0

    @property
    def hits(self) -> int:
        return sum(t is not None for t in self.tiers)


def parse_decision(reply: object) -> Decision:
    """The :class:`Decision` of a ``decide`` reply; an error reply (an exception) is raised."""
    if isinstance(reply, Exception):
        raise error_of(reply)
    return _decision(reply)


def _decision(reply: object) -> Decision:
    epoch, served, subs, picked, tiers, bucket = reply  # type: ignore[misc]
    return Decision(
        epoch=int(epoch),
        served=int(served),
        substitutions=int(subs),
        indices=[int(i) for i in picked],
        tiers=[tier_of_letter(t) for t in tiers],
        pin_bucket=int(bucket),
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
    )
