"""Redis key names.

Every key of one dataset shard carries the same hash tag ``{<dataset>.<shard>}``, so a Redis
Cluster keeps the shard in one slot and the per-batch Lua scripts stay single-slot::

    seneca:{<dataset>.<shard>}:e:<index>            encoded tier (string)
    seneca:{<dataset>.<shard>}:d:<index>            decoded tier (string)
    seneca:{<dataset>.<shard>}:a.<transform>:<index> augmented tier (string)
    seneca:{<dataset>.<shard>}:a.<transform>:<index>:m  its uses (hash: n, j:<job>)
    seneca:{<dataset>.<shard>}:s:<token>:<k>        a value staged for admission (expires)
    seneca:{<dataset>.<shard>}:t:<token>:<k>        a used-up augmented copy, read once (expires)
    seneca:{<dataset>.<shard>}:used                 bytes used per tier in this shard (hash)
    seneca:{<dataset>.<shard>}:jobs                 live jobs and their lease expiry (zset)
"""

from __future__ import annotations

from dataclasses import dataclass

from ods import defaults as ods_defaults
from seneca import defaults
from seneca_base.tiers import LETTER

__all__ = ["KeySpace"]


@dataclass(frozen=True)
class KeySpace:
    """Key names of one dataset (and one transform, for the augmented tier)."""

    dataset: str
    transform: str = "none"
    shards: int = defaults.KEY_SHARDS
    prefix: str = ods_defaults.KEY_PREFIX

    def shard_of(self, index: int) -> int:
        return index % self.shards

    def base(self, shard: int) -> str:
        return f"{self.prefix}:{{{self.dataset}.{shard}}}"

    def sample(self, tier: str, index: int) -> str:
        base = self.base(self.shard_of(index))
        if tier == "augmented":
            return f"{base}:a.{self.transform}:{index}"
        return f"{base}:{LETTER[tier]}:{index}"

    def augmented_meta(self, index: int) -> str:
        """The hash of an augmented copy's uses."""
        return self.sample("augmented", index) + ":m"

    def staged(self, shard: int, token: str) -> str:
        """Prefix of the staging keys of one admission (append the item's number)."""
        return f"{self.base(shard)}:s:{token}:"

    def taken(self, shard: int, token: str) -> str:
        """Prefix of the keys a lookup moves used-up augmented copies to (append the number)."""
        return f"{self.base(shard)}:t:{token}:"

    def used(self, shard: int) -> str:
        return f"{self.base(shard)}:used"

    def jobs(self, shard: int) -> str:
        return f"{self.base(shard)}:jobs"

    def pattern(self) -> str:
        """A SCAN pattern matching every key of this dataset."""
        return f"{self.prefix}:{{{self.dataset}.*}}:*"
