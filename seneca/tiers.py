"""The three cache tiers (encoded, decoded, augmented) of one dataset in one Redis.

A batch's lookups and a batch's admissions each take one round trip per key shard (one in all
with the default single shard), done by Lua scripts so that budgets hold under any number of
concurrent admitters.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import ClassVar

import redis

from seneca import defaults
from seneca.connection import CacheClient
from seneca.keys import TIERS, KeySpace

__all__ = ["TIER_CODE", "AdmitResult", "CacheTiers", "Lookup"]

#: Order of the per-tier usage fields and limits in the Lua scripts (e, d, a).
_SCRIPT_ORDER = ("encoded", "decoded", "augmented")
#: Codes the scripts use: 0 means storage.
TIER_CODE = {"encoded": 1, "decoded": 2, "augmented": 3}
_CODE_TIER = {v: k for k, v in TIER_CODE.items()}


def _script(name: str) -> str:
    return resources.files("seneca").joinpath("lua", name).read_text()


@dataclass
class Lookup:
    """Result of a batch lookup: per sample the tier it came from (None: storage) and value."""

    tiers: list[str | None]
    values: list[bytes | None]
    used: dict[str, int]
    live_jobs: int


@dataclass
class AdmitResult:
    admitted: dict[str, int]
    full: dict[str, int]


class CacheTiers:
    """Lookups and budgeted admissions for one dataset's tiers.

    ``budgets`` maps tier name to bytes for the whole dataset; each key shard gets an equal part.
    """

    _sources: ClassVar[dict[str, str]] = {
        "lookup": _script("lookup.lua"),
        "admit": _script("admit.lua"),
    }

    def __init__(
        self,
        client: CacheClient,
        keys: KeySpace,
        budgets: dict[str, int],
        job: str,
        lease: float = defaults.JOB_LEASE,
        overhead: int = defaults.ENTRY_OVERHEAD,
    ) -> None:
        self.client = client
        self.keys = keys
        self.budgets = dict(budgets)
        self.job = job
        self.lease_ms = int(lease * 1000)
        self.overhead = overhead
        self._sha: dict[str, str] = {}

    def _run(self, calls: list[tuple[str, list[str], list]]) -> list:
        """Run (script, keys, args) calls in one pipeline, loading scripts the server lacks."""
        r = self.client.redis
        for attempt in (0, 1):
            if not self._sha or attempt:
                self._sha = {n: r.script_load(src) for n, src in self._sources.items()}
            pipe = r.pipeline(transaction=False)
            for name, keys, args in calls:
                pipe.evalsha(self._sha[name], len(keys), *keys, *args)
            try:
                return pipe.execute()
            except redis.exceptions.NoScriptError:
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def _by_shard(self, indices: Sequence[int]) -> dict[int, list[int]]:
        groups: dict[int, list[int]] = defaultdict(list)
        for pos, index in enumerate(indices):
            groups[self.keys.shard_of(index)].append(pos)
        return groups

    def lookup(self, indices: Sequence[int]) -> Lookup:
        """Find each sample in the first tier that holds it (augmented, decoded, encoded)."""
        groups = self._by_shard(indices)
        calls = []
        for shard, positions in groups.items():
            keys = [self.keys.sample(t, indices[p]) for p in positions for t in TIERS]
            keys += [self.keys.used(shard), self.keys.jobs(shard)]
            calls.append(("lookup", keys, [len(positions), self.job, self.lease_ms, self.overhead]))
        tiers: list[str | None] = [None] * len(indices)
        values: list[bytes | None] = [None] * len(indices)
        used = dict.fromkeys(_SCRIPT_ORDER, 0)
        live = 0
        for (_, positions), reply in zip(groups.items(), self._run(calls), strict=True):
            for k, name in enumerate(_SCRIPT_ORDER):
                used[name] += int(reply[k])
            live = max(live, int(reply[3]))
            for j, p in enumerate(positions):
                tiers[p] = _CODE_TIER.get(int(reply[4 + 2 * j]))
                values[p] = reply[5 + 2 * j]
        return Lookup(tiers, values, used, live)

    def admit(self, items: Sequence[tuple[int, str, bytes]]) -> AdmitResult:
        """Admit ``(index, tier, value)`` items; a tier that is full takes nothing more."""
        result = AdmitResult(dict.fromkeys(TIERS, 0), dict.fromkeys(TIERS, 0))
        if not items:
            return result
        groups = self._by_shard([i for i, _, _ in items])
        share = self.keys.shards
        limits = [self.budgets[t] // share for t in _SCRIPT_ORDER]
        calls = []
        for shard, positions in groups.items():
            keys = [self.keys.sample(items[p][1], items[p][0]) for p in positions]
            keys += [self.keys.used(shard), self.keys.jobs(shard)]
            args: list = [len(positions), self.job, self.overhead, *limits]
            for p in positions:
                args += [TIER_CODE[items[p][1]], items[p][2]]
            calls.append(("admit", keys, args))
        for (_, positions), reply in zip(groups.items(), self._run(calls), strict=True):
            for p, r in zip(positions, reply, strict=True):
                tier = items[p][1]
                if r == 1:
                    result.admitted[tier] += 1
                elif r == -1:
                    result.full[tier] += 1
        return result

    def usage(self) -> dict[str, int]:
        """Bytes charged to each tier, summed over shards."""
        r = self.client.redis
        total = dict.fromkeys(TIERS, 0)
        for shard in range(self.keys.shards):
            values = r.hmget(self.keys.used(shard), "e", "d", "a")
            for name, value in zip(_SCRIPT_ORDER, values, strict=True):
                total[name] += int(value or 0)
        return total

    def clear(self) -> int:
        """Delete every key of this dataset (all tiers, usage, jobs); returns how many."""
        r = self.client.redis
        n = 0
        batch: list[bytes] = []
        for key in r.scan_iter(match=self.keys.pattern(), count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                n += r.unlink(*batch)
                batch.clear()
        if batch:
            n += r.unlink(*batch)
        return n
