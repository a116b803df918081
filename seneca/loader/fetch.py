"""Fetching a decided batch (runs in the loader process or a DataLoader worker).

Each sample of the batch comes with the tier to read it from (decided by ODS, or looked up for
a loader's own order). One round trip reads the values (straight into their own buffers,
``seneca.cache.resp``), releases the batch's pins (the server runs the release after the reads,
so the values were read while pinned; in the loader process the release is posted to the
outbox instead), and reads the tiers' usage and the live jobs of the loader's view. A value
that is gone (its entry was evicted after its pin lapsed, a late eviction deleted it after the
sample was cached again, or its admission is not finished) is a counted miss read from
storage, and its entry is dropped so a later miss caches the sample again: a fetch never fails
for a missing cache entry, and an entry without a value does not stay. Then one call
offers the new values to the cache (its policy decides what stays).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import redis
from torch.utils.data import get_worker_info

from ods.admission import REFUSED
from ods.decision import Pick, hits_by_bucket
from seneca.cache.resp import Pending, Place, Placed, post
from seneca.loader.rows import BatchRows, RowBatch
from seneca.loader.stats import process_row
from seneca.pipeline import codec
from seneca_base.errors import CacheError
from seneca_base.tiers import TIERS

__all__ = ["ReadsAhead", "fetch_decided"]


def _placer(rows: BatchRows, picks: Sequence[Any], slots: Sequence[int]) -> Place:
    """For element j of the values' MGET: put an augmented tensor's payload in its row (pick
    k's row is ``slots[k]``)."""
    where = [slots[k] for k, p in enumerate(picks) if p.tier is not None]
    tiers = [p.tier for p in picks if p.tier is not None]
    known: list[Any] = [None, 0, None]  # the last header and total seen, and their layout

    def place(j: int, header: bytes, total: int) -> memoryview | None:
        if tiers[j] != "augmented":
            return None
        # the values of a batch mostly share one header (the reader passes the same object)
        if header is not known[0] or total != known[1]:
            known[:] = [header, total, codec.tensor_layout(header, total)]
        layout = known[2]
        return None if layout is None else rows.place(where[j], *layout)

    return place


def _keys(ds: Any, picks: Sequence[Pick]) -> list[str]:
    return ds.store.value_keys((p.tier, p.index) for p in picks if p.tier is not None)


def _reads(ds: Any, keys: Sequence[str], releases: Sequence[tuple[int, list[int]]]) -> list:
    """A fetch's round trip: the values, the releases riding in it, the tiers' usage, the live
    jobs and, with a shared plan, the plan."""
    store = ds.store
    commands: list[tuple] = [("MGET", *keys)] if keys else []
    commands += [store.release_command(ds.job, b, hits) for b, hits in releases]
    commands.append(store.used_command())
    commands.append(store.live_command())
    if ds.plan_size:  # the shared plan's split, which this fetch's admissions follow
        commands.append(("GET", store.keys.plan))
    return commands


class ReadsAhead:
    """The reads of a dataset's next batch sent ahead (at most one batch's): what they were
    sent for, and their replies to come."""

    def __init__(self) -> None:
        self._held: tuple[tuple, Pending] | None = None

    @property
    def held(self) -> bool:
        return self._held is not None

    def hold(self, key: tuple, pending: Pending) -> None:
        """Keep ``pending``, sent for ``key``, dropping reads held before."""
        self.drop()
        self._held = (key, pending)

    def take(self, key: tuple) -> Pending | None:
        """The reads sent for ``key``, if those are held (anything else held is dropped)."""
        held, self._held = self._held, None
        if held is not None and held[0] == key:
            return held[1]
        if held is not None:
            held[1].abandon()
        return None

    def drop(self) -> None:
        """Abandon the reads held, if any (their batch did not come)."""
        held, self._held = self._held, None
        if held is not None:
            held[1].abandon()


def _read_next(ds: Any) -> None:
    """Send the reads of the sampler's next batch when it is decided already (the loader
    process, without workers): the server works on them while this batch is made, and the
    next fetch reads their replies (into that batch's rows) if the batch is that one. Its
    tiers' usage and live jobs are then those of this batch's time."""
    upcoming = ds.upcoming() if ds.upcoming is not None else None
    if upcoming:
        pending = post(ds.store.client, _reads(ds, _keys(ds, upcoming), ()))
        ds.reads_ahead.hold(_ahead_of(ds, upcoming), pending)


def _ahead_of(ds: Any, picks: Sequence[Pick]) -> tuple:
    """What reads sent ahead must have been sent for to serve a fetch of ``picks`` here."""
    return tuple(picks), bool(ds.plan_size), os.getpid()


def _read(
    ds: Any, picks: Sequence[Pick], count: Counter, rows: BatchRows | None, slots: Sequence[int]
) -> tuple[list, dict, int]:
    """Values per pick ((tier, bytearray or Placed) or (None, None)), bytes used per tier, live
    jobs of the view; the batch's hits are released in the same round trip (or posted, see
    above)."""
    store = ds.store
    hits = any(p.tier is not None for p in picks)
    releases = list(hits_by_bucket(picks).items())
    if get_worker_info() is None:  # released after the read, replies read at the next fetch
        later, releases = releases, []
    else:  # a worker may exit after this batch: the release rides in this round trip
        later = []
    pending = None if releases else ds.reads_ahead.take(_ahead_of(ds, picks))
    place = _placer(rows, picks, slots) if rows is not None and hits else None
    start = time.perf_counter_ns()
    if pending is None:
        pending = post(store.client, _reads(ds, _keys(ds, picks), releases))
    replies = pending.replies(raise_on_error=False, place=place)
    count["ns_cache"] += time.perf_counter_ns() - start
    if ds.plan_size:
        ds.adopt_plan(replies.pop())
    first = 1 if hits else 0
    for (bucket, hits), reply in zip(releases, replies[first:], strict=False):
        store.released(ds.job, bucket, hits, reply)
    for reply in replies[:first] + replies[first + len(releases) :]:
        if isinstance(reply, redis.RedisError):
            raise reply
    for bucket, hits in later:
        store.release_later(ds.job, bucket, hits)
    live = store.same_view(replies[-1])
    used = {t: int(v or 0) for t, v in zip(TIERS, replies[-2], strict=True)}
    it = iter(replies[0] if hits else ())
    values: list[tuple[str | None, Any]] = []
    gone = []
    for p in picks:
        value = next(it) if p.tier is not None else None
        if isinstance(value, redis.RedisError):  # a cluster node that died: its values are gone
            value = None
        values.append((p.tier, value) if value is not None else (None, None))
        if p.tier is not None and value is None:
            gone.append((p.tier, p.index))
    if gone:  # evicted after the decision, deleted by a late eviction, or not yet in place
        count["ods_gone"] += len(gone)
        _forget_bad(ds, gone, count)  # the entry goes: a later miss caches the sample again
    return values, used, live


def _values(
    ds: Any, picks: Sequence[Pick], count: Counter, rows: BatchRows | None, slots: Sequence[int]
) -> tuple[list, dict | None, int]:
    """:func:`_read`, or no values while the cache is down (each miss read from storage)."""
    nothing: list = [(None, None)] * len(picks)
    if ds.cache_down():
        ds.reads_ahead.drop()
        return nothing, None, 0
    try:
        values, used, live = _read(ds, picks, count, rows, slots)
    except (redis.RedisError, OSError, CacheError) as err:
        ds._cache_failed(err, count)
        return nothing, None, 0
    ds.cache_answered()
    try:  # the next batch's reads, the releases and the sampler's next decision run while
        _read_next(ds)  # this batch is made
        ds.store.outbox.flush()
    except (redis.RedisError, OSError, CacheError) as err:
        ds._cache_failed(err, count)
    return values, used, live


def _admit(
    ds: Any, admit: list[tuple[int, str, bytes]], made: list[int], count: Counter, used: dict
) -> None:
    """Offer the batch's new values, and end the pending of the decided misses ``made`` that
    are not offered (``ods/functions/pending.lua``); the renames and deletions that finish the
    admission are posted to the outbox (sent at once, replies read at the next fetch). A value
    the server refused to store is a cache error, and the budgets shrink (the tiers held
    ``used`` at this batch's read)."""
    if made and admit:
        offered = {i for i, _, _ in admit}
        made = [i for i in made if i not in offered]
    if not admit and not made:
        return
    store = ds.store
    items = [(i, t, store.charge(len(v)), v) for i, t, v in admit]
    try:
        result = store.admit(ds.job, items, wait=False, made=made)
    except (redis.RedisError, OSError, CacheError) as err:
        ds._cache_failed(err, count)
        return
    for (_, t, _), ok in zip(admit, result, strict=True):
        if ok == 1:
            count[f"admitted_{t}"] += 1
        elif ok == 0:
            count[f"full_{t}"] += 1
        elif ok == REFUSED:
            count["cache_errors"] += 1
    if REFUSED in result:
        ds.cache_refused(used, result.count(REFUSED))


def fetch_decided(
    ds: Any,
    picks: Sequence[Pick],
    evict: bool,
    rows: BatchRows | None = None,
    slots: Sequence[int] | None = None,
) -> list[tuple[Any, Any]]:
    """``CachedDataset.__getitems__`` for a batch of ``ods.decision.Pick``; ``evict``: offer
    values to a full encoded tier too (ODS batches: the policy evicts what live jobs need
    least; a loader's own order has no demand to evict for). ``rows`` and ``slots``: the
    picks are some of a batch whose rows are ``rows``, pick k in row ``slots[k]``
    (``seneca.loader.bypass``); by default the picks are the batch, in order."""
    count: Counter = Counter(samples=len(picks))
    store = ds.store
    # with the batch tail deferred, augmented hits are read into the rows of the batch tensor
    if rows is None and ds.tensor_hits:
        rows = BatchRows(len(picks))
    slots = range(len(picks)) if slots is None else slots
    values, used, live = _values(ds, picks, count, rows, slots)
    room = {t: store.capacity[t] - used[t] for t in TIERS} if used is not None else {}
    admit: list[tuple[int, str, bytes]] = []
    # unless the split gives the encoded tier nothing: then no value is sent only to be refused
    full_ok = evict and used is not None and store.capacity["encoded"] > 0
    offer = ds._offerer(room, admit, always="encoded" if full_ok else None)
    aug_ok = ds.transform.head is not None and live > 1
    out = _samples(ds, picks, values, count, rows, slots, offer, aug_ok)
    if used is not None:
        # an ODS batch's misses are pending until offered (a lookup's are not)
        made = [p.index for p in picks if p.tier is None] if evict else []
        _admit(ds, admit, made, count, used)
    ds.counters.add(process_row(), count)
    return out


def _samples(
    ds: Any,
    picks: Sequence[Pick],
    values: list,
    count: Counter,
    rows: BatchRows | None,
    slots: Sequence[int],
    offer: Any,
    aug_ok: bool,
) -> list[tuple[Any, Any]]:
    """The batch's samples from what was read: the remaining work per sample."""
    # a hit read into its row needs nothing more than its target when no step follows
    # PILToTensor: the common case, kept to a few operations per sample
    plain = ds.transform.after_tensor is None and ds.target_transform is None
    views = rows.rows.unbind(0) if rows is not None and rows.rows is not None else ()
    label = ds.source.target
    if plain and isinstance(slots, range) and len(views) == len(picks) > 0:
        whole = _all_placed(picks, values, rows.rows, views, label, count)
        if whole is not None:
            return whole
    out, bad = [], []
    placed = placed_bytes = 0
    for k, (p, (tier, value)) in enumerate(zip(picks, values, strict=True)):
        if isinstance(value, Placed):
            if plain:
                out.append((views[slots[k]], label(p.index)))
                placed += 1
                placed_bytes += value.size
                continue
            obj, size = views[slots[k]], value.size
        else:
            obj = ds._cached_value(value, tier, count) if value is not None else None
            size = len(value) if obj is not None else 0
            if value is not None and obj is None:
                bad.append((tier, p.index))
        if obj is None:
            tier = None
        ds._count_lookup(tier, count)
        count["bytes_cache"] += size
        sample = ds._finish(p.index, tier, obj, count, offer, aug_ok)
        out.append(rows.settle(slots[k], sample) if rows is not None else sample)
    count["hits_augmented"] += placed  # what _count_lookup counts for an augmented hit
    count["bytes_cache"] += placed_bytes
    if bad:
        _forget_bad(ds, bad, count)
    return out


def _all_placed(
    picks: Sequence[Pick],
    values: list,
    rows: Any,
    views: Sequence[Any],
    label: Any,
    count: Counter,
) -> RowBatch | None:
    """The samples of a batch every value of which was read into its row of ``rows``, in
    order (``views`` of them), marked so that ``collate_rows`` takes the rows as they are;
    None for any other batch."""
    if not all(type(v) is Placed for _, v in values):
        return None
    count["hits_augmented"] += len(picks)  # what _samples counts for each such hit
    count["bytes_cache"] += sum(v.size for _, v in values)
    labels = [label(p.index) for p in picks]
    return RowBatch(rows, zip(views, labels, strict=True))


def _forget_bad(ds: Any, bad: list[tuple[str, int]], count: Counter) -> None:
    """Drop the entries whose values were missing, corrupt or foreign (read from storage):
    their values are deleted, and the samples may be cached again."""
    try:
        ds.store.forget(ds.job, bad)
    except (redis.RedisError, OSError, CacheError) as err:
        ds._cache_failed(err, count)
