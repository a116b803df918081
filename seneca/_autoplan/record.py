"""The plan a dataset's loaders share: one record next to the dataset's metadata in the cache
(``ods.keys.Keys.plan``), a JSON document (no pickle) that says the split, the inputs it was
planned from, its predicted throughput and who made it when."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from seneca_base.split import Split
from seneca_base.tiers import SPLIT_ORDER

__all__ = ["PlanRecord"]


@dataclass(frozen=True)
class PlanRecord:
    """One shared plan.

    ``split``: the split (stored as whole percentages, E-D-A); ``version``: 1 for the first
    plan of the dataset, one more per change; ``source``: ``"defaults"`` (planned before
    anything was measured) or ``"measured"``; ``inputs``: the spec values (``section.key``)
    it was planned from; ``throughput``: the model's prediction for the split (samples/s);
    ``gain``: the predicted gain over the split it replaced (0 for the first); ``by``: the
    job that made it; ``at_ms``: when (the server's clock); ``measured``: the inputs measured
    (the rest are defaults or the user's spec); ``previous``: the split it replaced (None for
    the first), ``gain`` is over it, both predicted from this record's inputs; ``evidence``:
    the samples measured behind its inputs (``inputs.evidence``; 0 for a plan from defaults).
    """

    split: Split
    version: int
    source: str
    throughput: float
    gain: float = 0.0
    by: str = ""
    at_ms: int = 0
    inputs: dict[str, Any] = field(default_factory=dict)
    measured: tuple[str, ...] = ()
    previous: Split | None = None
    evidence: int = 0

    def describe(self) -> str:
        """The plan in one line, as the loaders log it and ``seneca cache status`` shows it:
        ``split 61-34-5 (version 2, measured, 2 jobs): predicted 1,679 samples/s, +59% over
        66-34-0``."""
        jobs = self.inputs.get("cluster.jobs")
        about = f"version {self.version}, {self.source}"
        if jobs is not None:
            about += f", {int(jobs)} job{'s' if int(jobs) != 1 else ''}"
        text = f"split {self.split_text()} ({about}): predicted {self.throughput:,.0f} samples/s"
        if self.previous is not None:
            text += f", {self.gain:+.0%} over {self.previous.text()}"
        return text

    def as_split(self) -> Split:
        """The plan's split."""
        return self.split

    def split_text(self) -> str:
        """``E-D-A``."""
        return self.split.text()

    def to_json(self) -> bytes:
        data = {k: getattr(self, k) for k in self.__dataclass_fields__}
        data["split"], data["measured"] = list(self.split.percent), list(self.measured)
        data["previous"] = list(self.previous.percent) if self.previous is not None else None
        return json.dumps(data, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes | str | None) -> PlanRecord | None:
        """The record in ``raw`` (None when there is none, or it is not a record: a foreign or
        damaged value is replaced by the next plan)."""
        if raw is None:
            return None
        try:
            data = json.loads(raw)
            split = _split_or_none(data["split"])
            if split is None:
                return None
            return cls(
                split=split,
                version=int(data["version"]),
                source=str(data["source"]),
                throughput=float(data["throughput"]),
                gain=float(data.get("gain", 0.0)),
                by=str(data.get("by", "")),
                at_ms=int(data.get("at_ms", 0)),
                inputs=dict(data.get("inputs", {})),
                measured=tuple(str(v) for v in data.get("measured", ())),
                previous=_split_or_none(data.get("previous")),
                evidence=int(data.get("evidence", 0)),
            )
        except (ValueError, TypeError, KeyError, AttributeError):
            return None


def _split_or_none(raw: Any) -> Split | None:
    """The split of whole percentages ``raw`` (one per tier, summing to 100); None when it is
    none or not one."""
    if raw is None:
        return None
    percent = [int(v) for v in raw]
    if len(percent) != len(SPLIT_ORDER) or sum(percent) != 100 or min(percent) < 0:
        return None
    return Split.from_percent(percent)
