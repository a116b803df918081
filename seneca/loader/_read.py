"""A decided batch's values read from the cache: the read part of a fetch (``_fetch``).

One round trip reads the values (straight into their own buffers, ``seneca._cache.resp``;
an augmented tensor's payload into its row of the batch), releases the batch's pins (the
server runs the release after the reads, so the values were read while pinned; in the loader
process the release is posted to the outbox instead), and reads the tiers' usage and the live
jobs of the loader's view. A value found missing is looked for again for a few milliseconds
(an admission's values are in place a round trip after its entries). One still missing is
gone (its entry was evicted after its pin lapsed, or a late eviction deleted it after the
sample was cached again): it is read from storage as a counted miss, and its entry is
forgotten so that a later miss caches the sample again. A fetch never fails for a missing
cache entry, and an entry without a value does not stay.

Also here: the copies promised by another job, waited for and claimed; the reads of the next
batch sent while this one is made (the loader process, without workers); and a batch read
around the cache (its pins released) when the cache holds another transform's values.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import redis

from ods.decision import Pick
from ods.outbox import RoundTrip
from ods.routing import CACHE_FAILURES
from ods.store import Glance
from seneca import defaults
from seneca._cache.resp import Pending, Place, post
from seneca.loader._link import CacheLink
from seneca.loader._rows import BatchRows
from seneca.loader._stats import Counters
from seneca.pipeline import codec
from seneca_base.process import Role, current

__all__ = ["Forget", "Reader", "ReadsAhead", "nothing_read"]

log = logging.getLogger("seneca")

#: drops cache entries whose values were missing, corrupt or foreign: (tier, index) each
Forget = Callable[[list[tuple[str, int]], Counter], None]


def nothing_read(picks: Sequence[Pick]) -> list:
    """The values of a batch read without the cache: none (each sample read from storage)."""
    return [(None, None)] * len(picks)


def _placer(rows: BatchRows, picks: Sequence[Any]) -> Place:
    """For element j of the values' MGET: put an augmented tensor's payload in its row (pick
    k's row is row k)."""
    where = [k for k, p in enumerate(picks) if p.tier is not None]
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


class Reader:
    """Reads the decided batches of one dataset through its cache ``link``; entries found
    without a value are dropped by ``forget``; ``counters`` say what was said once per job."""

    def __init__(self, link: CacheLink, counters: Counters, forget: Forget) -> None:
        self.link, self.counters, self.forget = link, counters, forget
        #: the reads of the next batch sent ahead (the loader process, without workers)
        self.reads_ahead = ReadsAhead()
        #: in the loader process without workers: the sampler's next batch when it is decided
        #: (``OdsBatchSampler.upcoming``); its reads are sent while this batch is made. A
        #: hook: the loader sets it once its sampler is made (the sampler needs this dataset)
        self.upcoming: Callable[[], Sequence[Pick] | None] | None = None

    def batch(
        self,
        picks: Sequence[Pick],
        count: Counter,
        rows: BatchRows | None,
        role: Role,
        stale: str | None,
    ) -> tuple[list, Glance | None]:
        """:meth:`read`, or no values (each sample read from storage) while the cache is down
        or holds values of another transform or other files than the dataset's now (``stale``
        says why)."""
        link = self.link
        if link.down():
            self.reads_ahead.drop()
            return nothing_read(picks), None
        if stale is not None:
            self.reads_ahead.drop()
            self._read_around(picks, count, stale)
            return nothing_read(picks), None
        try:
            values, glance = self.read(picks, count, rows, role)
        except CACHE_FAILURES as err:
            link.failed(err, count)
            return nothing_read(picks), None
        link.answered()
        try:  # the next batch's reads, the releases and the sampler's next decision run while
            self._read_next()  # this batch is made
            link.store.outbox.flush()
        except CACHE_FAILURES as err:
            link.failed(err, count)
        return values, glance

    def read(
        self,
        picks: Sequence[Pick],
        count: Counter,
        rows: BatchRows | None,
        role: Role,
    ) -> tuple[list, Glance]:
        """Values per pick ((tier, bytearray or Placed) or (None, None)) and what the store
        read beside them (``ods.store.Glance``: the tiers' usage, the live jobs of the view);
        the batch's hits are released in the same round trip (or posted, see the module's
        docstring)."""
        link = self.link
        store, job = link.store, link.job
        hits = any(p.tier is not None for p in picks)
        riding = RoundTrip()
        if role.worker and hits:  # it may exit after this batch: the release rides along
            store.release(job, picks, via=riding)
        along = riding.commands
        pending = None if along else self.reads_ahead.take(self._ahead_of(picks))
        place = _placer(rows, picks) if rows is not None and hits else None
        start = time.perf_counter_ns()
        if pending is None:
            pending = post(store.client, self._commands(picks, along))
        replies = pending.replies(raise_on_error=False, place=place)
        count["ns_cache"] += time.perf_counter_ns() - start
        glance = store.glance([p.index for p in picks], replies)
        replies = replies[: len(replies) - glance.replies]
        link.adopt_budgets(glance.budgets)
        first = 1 if hits else 0
        riding.answer(replies[first:])
        for reply in replies[:first]:
            if isinstance(reply, redis.RedisError):
                raise reply
        if not role.worker and hits:  # released after the read, replies read at the next fetch
            store.release(job, picks, via=store.outbox)
        it = iter(replies[0] if hits else ())
        values: list[tuple[str | None, Any]] = []
        missing = []  # positions in picks
        for k, p in enumerate(picks):
            value = next(it) if p.tier is not None else None
            if isinstance(value, redis.RedisError):  # a cluster node that died: values gone
                value = None
            values.append((p.tier, value) if value is not None else (None, None))
            if p.tier is not None and value is None:
                missing.append(k)
        gone = self._look_again(picks, missing, values)
        if gone:  # evicted after the decision, deleted by a late eviction, or a node died
            count["ods_gone"] += len(gone)
            self.forget(gone, count)  # the entry goes: a later miss caches it again
        return values, glance

    def claim(
        self, picks: Sequence[Pick], promised: set[int], values: list, count: Counter
    ) -> set[int]:
        """Wait for the copies of the batch's picks at positions ``promised`` (misses another
        job was making when the batch was decided) for up to ``defaults.PROMISE_WAIT`` seconds,
        and claim each one cached as a hit (its value put in ``values``); returns the samples
        claimed. The rest are made here as misses."""
        want = {picks[k].index: k for k in promised}
        link = self.link
        store, claimed = link.store, set()
        deadline = time.monotonic() + defaults.PROMISE_WAIT
        try:
            while want:
                asked = list(want)
                keys = store.value_keys(("augmented", i) for i in asked)
                read = post(store.client, [("MGET", *keys)])
                reply = read.replies(raise_on_error=False)[0]
                if isinstance(reply, Exception):
                    raise reply
                found = {
                    i: v
                    for i, v in zip(asked, reply, strict=True)
                    if isinstance(v, bytes | bytearray)
                }
                rest = [i for i in asked if i not in found]
                got, still = store.claim(link.job, list(found), rest)
                for i in got:
                    values[want[i]] = ("augmented", found[i])
                    claimed.add(i)
                # what is left is waited for while another job is still making it
                want = {i: want[i] for i in still}
                if not want or time.monotonic() >= deadline:
                    break
                time.sleep(defaults.PROMISE_POLL)
        except CACHE_FAILURES as err:
            link.failed(err, count)
        count["promised"] += len(promised)
        count["promises_kept"] += len(claimed)
        return claimed

    # -- the round trip -------------------------------------------------------------------------

    def _commands(self, picks: Sequence[Pick], riding: Sequence[tuple]) -> list[tuple]:
        """A fetch's round trip: the values of ``picks``' hits, the ``riding`` commands (its
        releases), and what the store reads beside them (``OdsStore.glance_commands``: the
        tiers' usage, the live jobs and the budgets in force, which this fetch's admissions
        follow)."""
        store = self.link.store
        keys = store.value_keys((p.tier, p.index) for p in picks if p.tier is not None)
        commands: list[tuple] = [("MGET", *keys)] if keys else []
        return commands + list(riding) + store.glance_commands([p.index for p in picks])

    def _ahead_of(self, picks: Sequence[Pick]) -> tuple:
        """What reads sent ahead must have been sent for to serve a fetch of ``picks`` here."""
        return tuple(picks), current()

    def _read_next(self) -> None:
        """Send the reads of the sampler's next batch when it is decided already (the loader
        process, without workers): the server works on them while this batch is made, and the
        next fetch reads their replies (into that batch's rows) if the batch is that one. Its
        tiers' usage and live jobs are then those of this batch's time."""
        upcoming = self.upcoming() if self.upcoming is not None else None
        if upcoming:
            pending = post(self.link.store.client, self._commands(upcoming, ()))
            self.reads_ahead.hold(self._ahead_of(upcoming), pending)

    def _look_again(self, picks: Sequence[Pick], missing: list[int], values: list) -> list:
        """Read the values of ``picks`` at positions ``missing`` again, for up to
        ``defaults.MISSING_WAIT`` seconds, into ``values``: an admission's values are put in
        place a round trip after its entries are visible, and a batch decided meanwhile finds
        them missing. Returns the (tier, index) of those still missing: gone."""
        wait, deadline = defaults.MISSING_POLL, time.monotonic() + defaults.MISSING_WAIT
        store = self.link.store
        while missing and time.monotonic() < deadline:
            time.sleep(wait)
            wait *= 2
            keys = store.value_keys((picks[k].tier, picks[k].index) for k in missing)
            reply = post(store.client, [("MGET", *keys)]).replies(raise_on_error=False)[0]
            if isinstance(reply, redis.RedisError):  # (a node that died: gone)
                break
            dead = False
            for k, value in zip(missing, reply, strict=True):
                if isinstance(value, redis.RedisError):  # (its node died: gone)
                    dead = True
                elif value is not None:
                    values[k] = (picks[k].tier, value)
            missing = [k for k in missing if values[k][1] is None]
            if dead:
                break
        return [(picks[k].tier, picks[k].index) for k in missing]

    def _read_around(self, picks: Sequence[Pick], count: Counter, why: str) -> None:
        """Unpin a batch's decided hits, to be read from storage: the cache's values are not
        the dataset's now, ``why`` (said once per job)."""
        link = self.link
        if self.counters.once(why):
            log.warning(
                "%s, so this loader reads every sample from storage and caches nothing (make a "
                "new SenecaLoader to cache the new ones)",
                why,
            )
        try:
            link.store.release(link.job, picks, via=link.store.outbox)
        except CACHE_FAILURES as err:
            link.failed(err, count)
