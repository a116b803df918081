"""Decision: one batch ODS decided for one job, and the parse of the script's reply."""

from __future__ import annotations

from dataclasses import dataclass

from ods.functions import error_of
from seneca_base.tiers import tier_of_letter

__all__ = ["Decision", "parse_decision"]


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
