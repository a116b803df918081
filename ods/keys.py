"""The key schema of one dataset's cache: metadata under one hash tag, values spread.

A dataset's metadata lives under the hash tag ``{<dataset>}``, so a Redis Cluster keeps it in
one slot and the engine's functions (``ods.functions``) can touch it atomically. Each value
has a hash tag of its own, so a cluster spreads values over every node::

    seneca:{<dataset>}:t:<letter>        bitmap: samples cached in the tier
    seneca:{<dataset>}:sz:<letter>       u32 per sample: bytes charged for its value
    seneca:{<dataset>}:used              hash: units used per tier, entries n<letter>
    seneca:{<dataset>}:jobs              zset: live jobs -> lease expiry (ms)
    seneca:{<dataset>}:ref, :doom        'paper' policy: hits per sample, samples to evict
    seneca:{<dataset>}:x:c, :x:g         scratch bitmaps of one call
    seneca:{<dataset>}:gc                zset: evicted entries -> when their value is collected
    seneca:{<dataset>}:j:<job>           hash: samples of the job, latest epoch, served per epoch
    seneca:{<dataset>}:r:<job>, :p:<job> bitmaps: unserved in its latest / previous epoch
    seneca:{<dataset>}:g:<job>           bitmap: the job used the current augmented copy
    seneca:{<dataset>}:m:<job>           bitmap: samples the job trains on (absent: all)
    seneca:{<dataset>}:pin:<b>, pinc:<b> pins of fetches decided in pin-lease bucket b
    seneca:v:{<dataset>:<letter>:<i>}    sample i's value in a tier
    seneca:v:{<dataset>:<letter>:<i>}:s:<token>  a value staged for admission (expires)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ods import defaults
from seneca_base.tiers import LETTER, TIERS

__all__ = ["Keys", "glob_escape"]


def glob_escape(text: str) -> str:
    """``text`` with SCAN glob characters escaped."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


@dataclass(frozen=True)
class Keys:
    """Key names of one dataset."""

    dataset: str
    prefix: str = defaults.KEY_PREFIX

    @property
    def meta(self) -> str:
        """The prefix of every metadata key (ends with ``:``)."""
        return f"{self.prefix}:{{{self.dataset}}}:"

    def tier(self, tier: str) -> str:
        return f"{self.meta}t:{LETTER[tier]}"

    def sizes(self, tier: str) -> str:
        return f"{self.meta}sz:{LETTER[tier]}"

    @property
    def used(self) -> str:
        return f"{self.meta}used"

    @property
    def jobs(self) -> str:
        return f"{self.meta}jobs"

    def job(self, name: str) -> list[str]:
        """The job's keys: j, r, p, g, m."""
        return [f"{self.meta}{k}:{name}" for k in ("j", "r", "p", "g", "m")]

    def members(self, name: str) -> str:
        return f"{self.meta}m:{name}"

    def pins(self, bucket: int) -> list[str]:
        """pin and pinc of ``bucket`` and of the bucket before."""
        b = int(bucket)
        return [f"{self.meta}{k}:{x}" for x in (b, b - 1) for k in ("pin", "pinc")]

    def declared(self, job: str, bucket: int, jobs: Sequence[str]) -> list[str]:
        """Every key a function call may touch, in the order ``ods/functions/lib.lua`` reads
        them: the dataset's, the caller's job's, its pins', then r, g, m of each of ``jobs``."""
        out = [self.tier(t) for t in TIERS] + [self.sizes(t) for t in TIERS]
        out += [self.used, self.jobs]
        out += [self.meta + k for k in ("ref", "doom", "x:c", "x:g", "gc")]
        out += self.job(job) + self.pins(bucket)
        for name in jobs:
            out += [f"{self.meta}{k}:{name}" for k in ("r", "g", "m")]
        return out

    def value(self, tier: str, index: int) -> str:
        """The key of sample ``index``'s value in ``tier``."""
        return f"{self.prefix}:v:{{{self.dataset}:{LETTER[tier]}:{int(index)}}}"

    def staged(self, tier: str, index: int, token: str) -> str:
        """Where a value is staged before its admission (same slot as its key)."""
        return f"{self.value(tier, index)}:s:{token}"

    def patterns(self) -> list[str]:
        """SCAN patterns matching every key of this dataset (metadata, values, staged)."""
        data = glob_escape(self.dataset)
        return [glob_escape(self.meta) + "*", f"{glob_escape(self.prefix)}:v:{{{data}:*"]
