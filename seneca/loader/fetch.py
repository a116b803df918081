"""Fetching a batch that ODS decided (runs in the loader process or a DataLoader worker).

One round trip reads each sample's value from the tier ODS chose (straight into its own buffer,
``seneca.cache.resp``), then releases the batch's pins (the server runs the release after the reads,
so the values were read while pinned), and reads the tiers' usage and the number of live jobs.
A value that is gone (its pin lapsed and it was evicted) is looked for in the next tiers in a
second round trip, else read from storage: a fetch never fails for a missing cache entry. Then
one call admits the new values (the ODS policy decides what stays).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import redis
from torch.utils.data import get_worker_info

from ods.sampler import hits_by_bucket
from seneca.cache.resp import Place, Placed, execute
from seneca.loader.rows import BatchRows
from seneca.loader.stats import process_row
from seneca.pipeline import codec
from seneca_base.tiers import TIERS

__all__ = ["fetch_decided"]


def _placer(rows: BatchRows, picks: Sequence[Any]) -> Place:
    """For element j of the values' MGET: put an augmented tensor's payload in its row."""
    where = [k for k, p in enumerate(picks) if p.tier is not None]
    known: list[Any] = [None, None]  # the last header and total seen, and their layout

    def place(j: int, header: bytes, total: int) -> memoryview | None:
        k = where[j]
        if picks[k].tier != "augmented":
            return None
        if known[0] != (header, total):  # the values of a batch mostly share one header
            known[:] = [(header, total), codec.tensor_layout(header, total)]
        layout = known[1]
        return None if layout is None else rows.place(k, *layout)

    return place


def _read(
    ds: Any, picks: Sequence[Any], count: Counter, rows: BatchRows | None
) -> tuple[list, dict, int]:
    """Values per pick ((tier, bytearray or Placed) or (None, None)), bytes used per tier, live
    jobs; the batch's hits are released in the same round trip."""
    store = ds.ods
    client = store.client
    keys = [store.value_key(p.tier, p.index) for p in picks if p.tier is not None]
    releases = list(hits_by_bucket(picks).items())
    commands: list[tuple] = [("MGET", *keys)] if keys else []
    if get_worker_info() is None:  # released after the read, replies read at the next fetch
        later, releases = releases, []
    else:  # a worker may exit after this batch: the release rides in this round trip
        later = []
    commands += [store.release_command(ds.job, b, hits) for b, hits in releases]  # replies 1..
    commands.append(("MGET", *(store.used_key(t) for t in TIERS)))
    commands.append(("ZCOUNT", store.live_jobs_key(), int(time.time() * 1000), "+inf"))
    place = _placer(rows, picks) if rows is not None and keys else None
    replies = execute(client, commands, raise_on_error=False, place=place)
    for k, r in enumerate(replies):
        if isinstance(r, redis.exceptions.NoScriptError) and 1 <= k <= len(releases):
            store.release_hits(ds.job, *releases[k - 1])  # loads the script
        elif isinstance(r, redis.ResponseError):
            raise r
    for bucket, hits in later:
        store.release_later(ds.job, bucket, hits)
    live = int(replies[-1])
    used = {t: int(v or 0) for t, v in zip(TIERS, replies[-2], strict=True)}
    it = iter(replies[0] if keys else ())
    values: list[tuple[str | None, Any]] = []
    gone: list[int] = []
    for k, p in enumerate(picks):
        value = next(it) if p.tier is not None else None
        values.append((p.tier, value) if value is not None else (None, None))
        if p.tier is not None and value is None:
            gone.append(k)
    if gone:  # evicted after the decision: try the cheaper forms, then storage
        count["ods_gone"] += len(gone)
        lower = {k: TIERS[TIERS.index(picks[k].tier) + 1 :] for k in gone}
        keys = [store.value_key(t, picks[k].index) for k in gone for t in lower[k]]
        it = iter(execute(client, [("MGET", *keys)])[0] if keys else ())
        for k in gone:
            for t in lower[k]:
                value = next(it)
                if value is not None and values[k][0] is None:
                    values[k] = (t, value)
    return values, used, live


def fetch_decided(ds: Any, picks: Sequence[Any]) -> list[tuple[Any, Any]]:
    """``CachedDataset.__getitems__`` for a batch of ``ods.sampler.Pick``."""
    count: Counter = Counter(samples=len(picks))
    store = ds.ods
    # with the batch tail deferred, augmented hits are read into the rows of the batch tensor
    rows = BatchRows(len(picks)) if ds.tensor_hits else None
    try:
        values, used, live = _read(ds, picks, count, rows)
    except (redis.RedisError, OSError) as err:
        ds._cache_failed(err, count)
        values, used, live = [(None, None)] * len(picks), None, 0
    else:
        try:  # the releases and the sampler's next decision run while this batch is made
            store.outbox.flush()
        except (redis.RedisError, OSError) as err:
            ds._cache_failed(err, count)
    room = {t: store.capacity[t] - used[t] for t in TIERS} if used is not None else {}
    admit: list[tuple[int, str, bytes]] = []
    # a full encoded tier is still offered values (the ODS policy evicts what live jobs need
    # least), unless the split gives it nothing: then no value is sent only to be refused
    always = "encoded" if used is not None and store.capacity["encoded"] > 0 else None
    offer = ds._offerer(room, admit, always=always)
    aug_ok = ds.transform.head is not None and live > 1
    # a hit read into its row needs nothing more than its target when no step follows
    # PILToTensor: the common case, kept to a few operations per sample
    plain = ds.transform.after_tensor is None and ds.target_transform is None
    views = rows.rows.unbind(0) if rows is not None and rows.rows is not None else ()
    label = ds.storage.label
    out = []
    placed = placed_bytes = 0
    for k, (p, (tier, value)) in enumerate(zip(picks, values, strict=True)):
        if isinstance(value, Placed):
            if plain:
                out.append((views[k], label(p.index)))
                placed += 1
                placed_bytes += value.size
                continue
            obj, size = views[k], value.size
        else:
            obj = ds._cached_value(value, tier, count) if value is not None else None
            size = len(value) if obj is not None else 0
        if obj is None:
            tier = None
        ds._count_lookup(tier, count)
        count["bytes_cache"] += size
        sample = ds._finish(p.index, tier, obj, count, offer, aug_ok)
        out.append(rows.settle(k, sample) if rows is not None else sample)
    count["hits_augmented"] += placed  # what _count_lookup counts for an augmented hit
    count["bytes_cache"] += placed_bytes
    if used is not None:
        try:
            if admit:
                overhead = store.overhead
                items = [(i, t, len(v) + overhead, v) for i, t, v in admit]
                result = store.admit(ds.job, items)
                for (_, t, _), ok in zip(admit, result, strict=True):
                    if ok == 1:
                        count[f"admitted_{t}"] += 1
                    elif ok == 0:
                        count[f"full_{t}"] += 1
        except (redis.RedisError, OSError) as err:
            ds._cache_failed(err, count)
    ds.counters.add(process_row(), count)
    return out
