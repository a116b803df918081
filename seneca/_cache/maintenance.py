"""What operators remove from a cache (``seneca cache clear`` and ``gc``).

``clear`` deletes datasets whole. ``gc`` deletes only what no job can use any more:

* the metadata of jobs whose lease ran out (a job that was only paused joins again and goes on
  with its epoch from its own record of what it has served);
* metadata keys of jobs the dataset no longer lists;
* the augmented tiers of views (transforms) no live job uses: copies made for jobs that are
  gone, which no later job can count on;
* values whose entry is gone (an eviction whose deleter crashed).

Keys are found with SCAN (never KEYS), on every primary of a cluster; a dry run reports what
would go. Races with running jobs are harmless: a job that loses its metadata rejoins, and a
value deleted under a reader is a counted miss.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import redis

from ods import defaults as ods_defaults
from ods.keys import Keys
from ods.shards import part_names
from seneca._cache.client import server_ms, text_of
from seneca._cache.shares import NodeShares
from seneca._cache.status import find_datasets
from seneca_base.errors import ConfigError

__all__ = ["GcReport", "clear_datasets", "collect_garbage"]

_BATCH = 500


@dataclass
class GcReport:
    """What :func:`collect_garbage` removed (or would remove, when not ``applied``)."""

    applied: bool
    expired_jobs: list[tuple[str, str]] = field(default_factory=list)  # (dataset, job)
    job_keys: int = 0
    views: list[tuple[str, str, int, int]] = field(default_factory=list)  # dataset, view, n, B
    orphan_values: int = 0
    orphan_bytes: int = 0


def _scan(client: Any, pattern: str) -> Iterator[str]:
    for key in client.scan_iter(match=pattern, count=1000):
        yield text_of(key)


def _unlink(client: Any, keys: list[str]) -> int:
    """Delete ``keys`` (any slots: one UNLINK each, pipelined)."""
    n = 0
    for first in range(0, len(keys), _BATCH):
        pipe = client.pipeline(transaction=False)
        for key in keys[first : first + _BATCH]:
            pipe.unlink(key)
        n += sum(int(r) for r in pipe.execute())
    return n


def clear_datasets(
    client: Any,
    datasets: list[str] | None = None,
    force: bool = False,
    prefix: str = ods_defaults.KEY_PREFIX,
) -> dict[str, int]:
    """Delete every key of ``datasets`` (default: all found); returns keys deleted per
    dataset. A dataset with live jobs is refused unless ``force`` (its jobs would go on from
    storage and fill it again)."""
    names = find_datasets(client, prefix) if datasets is None else datasets
    now = server_ms(client)
    shares = NodeShares(client, prefix)
    parts = {d: part_names(client, d, prefix) for d in names}  # (its shards, if in shards)
    busy = {d: shares.live(d, now, parts[d]) for d in names}
    busy = {d: n for d, n in busy.items() if n}
    if busy and not force:
        held = ", ".join(f"{d} ({n} live)" for d, n in busy.items())
        raise ConfigError(f"jobs are training on {held}; give --force to clear anyway")
    out = {}
    for d in names:
        whole = {d, *parts[d]}
        keys = [k for n in whole for p in Keys(n, prefix).patterns() for k in _scan(client, p)]
        out[d] = _unlink(client, keys)
        shares.forget(d)
    return out


def _expired_jobs(client: Any, keys: Keys, now: int, apply: bool) -> tuple[list[str], int]:
    """Remove the jobs whose lease ran out and the metadata of jobs no longer listed; returns
    the expired jobs and the number of job keys removed (or to remove)."""
    expired = [text_of(n) for n in client.zrange(keys.jobs, "-inf", f"({now}", byscore=True)]
    if apply:
        client.zremrangebyscore(keys.jobs, "-inf", f"({now}")
    listed = {text_of(n) for n in client.zrange(keys.jobs, 0, -1)} - set(expired)
    stale = []
    for pattern in keys.job_patterns():
        for key in _scan(client, pattern):
            job = keys.job_of(key)
            if job is not None and job not in listed:
                stale.append(key)
    if apply:
        _unlink(client, stale)
    return expired, len(stale)


def _dead_views(client: Any, keys: Keys, now: int, apply: bool) -> list[tuple[str, int, int]]:
    """Drop the augmented tiers of views no live job uses: (view, entries, bytes) each."""
    used = {text_of(k): text_of(v) for k, v in client.hgetall(keys.used).items()}
    views = {Keys.view_of_form(f) for f in used} | {
        keys.view_of_tier(k) for k in _scan(client, keys.view_tiers())
    }
    views.discard(None)
    out = []
    for view in sorted(views):
        vk = Keys(keys.dataset, keys.prefix, view)
        form = vk.form("augmented")
        with client.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(keys.jobs)
                live = pipe.zrange(keys.jobs, now, "+inf", byscore=True)
                if any(Keys.view_of(text_of(n)) == view for n in live):
                    continue
                entries, size = pipe.hmget(keys.used, f"n{form}", form)
                out.append((view, int(entries or 0), int(size or 0)))
                if apply:
                    pipe.multi()
                    pipe.unlink(vk.tier("augmented"), vk.sizes("augmented"), vk.gc()[1])
                    pipe.hdel(keys.used, form, f"n{form}")
                    pipe.execute()
            except redis.WatchError:  # a job joined meanwhile: keep the view
                out.pop()
    return out


def _orphan_values(client: Any, keys: Keys, apply: bool, dead: set[str]) -> tuple[int, int]:
    """Delete values whose entry is gone, or whose form is in ``dead`` (the augmented tiers
    dropped, or to drop in a dry run): (how many, bytes)."""
    found = []
    for key in _scan(client, keys.patterns()[1]):
        value = keys.value_of(key)  # staged values (…}:s:<token>) expire by themselves
        if value is not None:
            found.append((key, *value))
    orphans, size = [], 0
    for first in range(0, len(found), _BATCH):
        chunk = found[first : first + _BATCH]
        pipe = client.pipeline(transaction=False)
        for _, form, i in chunk:
            pipe.getbit(keys.bitmap(form), i)
        bits = pipe.execute()
        gone = [k for (k, form, _), b in zip(chunk, bits, strict=True) if not b or form in dead]
        pipe = client.pipeline(transaction=False)
        for key in gone:
            pipe.strlen(key)
        size += sum(int(n) for n in pipe.execute())
        orphans += gone
    if apply:
        _unlink(client, orphans)
    return len(orphans), size


def collect_garbage(
    client: Any,
    apply: bool = False,
    datasets: list[str] | None = None,
    prefix: str = ods_defaults.KEY_PREFIX,
) -> GcReport:
    """Find (and with ``apply``, delete) what no job can use any more in ``datasets`` (default:
    all found); see the module docstring."""
    report = GcReport(applied=apply)
    for d in find_datasets(client, prefix) if datasets is None else datasets:
        views: dict[str, tuple[int, int]] = {}  # per view dropped: entries, bytes (all shards)
        for part in part_names(client, d, prefix):  # each shard, where it is in shards
            keys = Keys(part, prefix)
            now = server_ms(client)
            expired, stale = _expired_jobs(client, keys, now, apply)
            report.expired_jobs += [(d, n) for n in expired if (d, n) not in report.expired_jobs]
            report.job_keys += stale
            dropped = _dead_views(client, keys, now, apply)
            for view, n, size in dropped:
                had = views.get(view, (0, 0))
                views[view] = (had[0] + n, had[1] + size)
            dead = {Keys(part, prefix, v[0]).form("augmented") for v in dropped}
            count, size = _orphan_values(client, keys, apply, dead)
            report.orphan_values += count
            report.orphan_bytes += size
        report.views += [(d, view, n, size) for view, (n, size) in views.items()]
    return report
