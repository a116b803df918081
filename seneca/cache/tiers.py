"""The three cache tiers (encoded, decoded, augmented) of one dataset in one Redis.

A batch's lookup takes two round trips (a Lua script per key shard decides which keys to read,
then one MGET reads them) and a batch's admission one (the values are SET under staging keys
and a script per shard renames the admitted ones), so budgets hold under any number of
concurrent admitters and values never pass through Lua.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import ClassVar

import redis

from ods import defaults as ods_defaults
from seneca import defaults
from seneca.cache.client import CacheClient
from seneca.cache.keys import KeySpace
from seneca.cache.resp import execute
from seneca_base.tiers import LETTER, TIERS, tier_of_letter, with_lua_tiers

__all__ = ["AdmitResult", "CacheTiers", "Lookup"]


def _script(name: str) -> str:
    return with_lua_tiers(resources.files("seneca.cache").joinpath("lua", name).read_text())


@dataclass
class Lookup:
    """Result of a batch lookup: per sample the tier it came from (None: storage) and value."""

    tiers: list[str | None]
    values: list[bytes | bytearray | None]
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
        lease: float = ods_defaults.JOB_LEASE,
        overhead: int = defaults.ENTRY_OVERHEAD,
    ) -> None:
        self.client = client
        self.keys = keys
        self.budgets = dict(budgets)
        self.job = job
        self.lease_ms = int(lease * 1000)
        self.overhead = overhead
        self._sha: dict[str, str] = {}

    def _scripts(self, r: redis.Redis, calls: list[tuple[str, list[str], list]]) -> list[tuple]:
        if not self._sha:
            self._sha = {n: r.script_load(src) for n, src in self._sources.items()}
        return [("EVALSHA", self._sha[name], len(keys), *keys, *args) for name, keys, args in calls]

    def _execute(self, before: list[tuple], calls: list[tuple[str, list[str], list]]) -> list:
        """Run ``before`` (plain commands), then the (script, keys, args) calls, in one round
        trip; returns the scripts' replies (loading the scripts when the server lacks them)."""
        r = self.client.redis
        for attempt in (0, 1):
            if attempt:
                self._sha = {}
            replies = execute(r, before + self._scripts(r, calls), raise_on_error=False)
            out = replies[len(before) :]
            if any(isinstance(x, redis.exceptions.NoScriptError) for x in out) and not attempt:
                continue
            for x in out:
                if isinstance(x, redis.ResponseError):
                    raise x
            return out
        raise AssertionError("unreachable")

    def _by_shard(self, indices: Sequence[int]) -> dict[int, list[int]]:
        groups: dict[int, list[int]] = defaultdict(list)
        for pos, index in enumerate(indices):
            groups[self.keys.shard_of(index)].append(pos)
        return groups

    def lookup(self, indices: Sequence[int]) -> Lookup:
        """Find each sample in the first tier that holds it (augmented, decoded, encoded): one
        script call per shard names the keys, one MGET reads them (values never pass through
        Lua). A value gone in between (another job used up an augmented copy) is a miss."""
        groups = self._by_shard(indices)
        token = os.urandom(6).hex()
        calls = []
        for shard, positions in groups.items():
            keys = []
            for p in positions:
                i = indices[p]
                keys += [self.keys.sample("augmented", i), self.keys.augmented_meta(i)]
                keys += [self.keys.sample("decoded", i), self.keys.sample("encoded", i)]
            keys += [self.keys.used(shard), self.keys.jobs(shard)]
            args = [len(positions), self.job, self.lease_ms, self.overhead]
            taken = self.keys.taken(shard, token)
            calls.append(("lookup", keys, [*args, taken, ods_defaults.STAGED_VALUE_TTL_MS]))
        tiers: list[str | None] = [None] * len(indices)
        values: list[bytes | bytearray | None] = [None] * len(indices)
        used = dict.fromkeys(TIERS, 0)
        live = 0
        reads: list[tuple[int, bytes]] = []
        for (_, positions), reply in zip(groups.items(), self._execute([], calls), strict=True):
            for k, name in enumerate(TIERS):
                used[name] += int(reply[k])
            live = max(live, int(reply[3]))
            for j, p in enumerate(positions):
                tiers[p] = tier_of_letter(reply[4 + 2 * j])
                if tiers[p] is not None:
                    reads.append((p, bytes(reply[5 + 2 * j])))
        if reads:
            commands: list[tuple] = [("MGET", *(key for _, key in reads))]
            prefixes = tuple(self.keys.taken(s, token).encode() for s in groups)
            taken = [key for _, key in reads if key.startswith(prefixes)]
            commands += [("UNLINK", *taken)] if taken else []
            got = execute(self.client.redis, commands)[0]
            for (p, _), value in zip(reads, got, strict=True):
                values[p] = value
                if value is None:
                    tiers[p] = None
        return Lookup(tiers, values, used, live)

    def admit(self, items: Sequence[tuple[int, str, bytes]]) -> AdmitResult:
        """Admit ``(index, tier, value)`` items; a tier that is full takes nothing more. The
        values are staged with SET in the same round trip as the script that admits them."""
        result = AdmitResult(dict.fromkeys(TIERS, 0), dict.fromkeys(TIERS, 0))
        if not items:
            return result
        groups = self._by_shard([i for i, _, _ in items])
        share = self.keys.shards
        limits = [self.budgets[t] // share for t in TIERS]
        token = os.urandom(6).hex()
        staging: list[tuple] = []
        calls = []
        for shard, positions in groups.items():
            keys: list[str] = []
            args: list = [len(positions), self.job, self.overhead, *limits]
            for k, p in enumerate(positions):
                index, tier, value = items[p]
                key, staged = self.keys.sample(tier, index), f"{self.keys.staged(shard, token)}{k}"
                meta = self.keys.augmented_meta(index) if tier == "augmented" else key
                staging.append(("SET", staged, value, "PX", ods_defaults.STAGED_VALUE_TTL_MS))
                keys += [key, staged, meta]
                args.append(LETTER[tier])
            keys += [self.keys.used(shard), self.keys.jobs(shard)]
            calls.append(("admit", keys, args))
        replies = self._execute(staging, calls)
        for (_, positions), reply in zip(groups.items(), replies, strict=True):
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
            values = r.hmget(self.keys.used(shard), *(LETTER[t] for t in TIERS))
            for name, value in zip(TIERS, values, strict=True):
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
