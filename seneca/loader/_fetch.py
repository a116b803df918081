"""Fetching a decided batch (runs in the loader process or a DataLoader worker).

Each sample of the batch comes with the tier to read it from (decided by ODS, or looked up for
a loader's own order). One round trip reads the values (straight into their own buffers,
``seneca._cache.resp``), releases the batch's pins (the server runs the release after the reads,
so the values were read while pinned; in the loader process the release is posted to the
outbox instead), and reads the tiers' usage and the live jobs of the loader's view. A value
found missing is looked for again for a few milliseconds (an admission's values are in place
a round trip after its entries). One still missing is gone (its entry was evicted after its
pin lapsed, or a late eviction deleted it after the sample was cached again): a counted miss
read from storage, and its entry is dropped so a later miss caches the sample again: a fetch
never fails for a missing cache entry, and an entry without a value does not stay. Then one
call offers the new values to the cache (its policy decides what stays, and may evict for
them: values are offered to a full encoded or augmented tier too).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from ods.admission import REFUSED
from ods.decision import Pick, hits_by_bucket
from ods.routing import CACHE_FAILURES
from ods.store import Glance
from seneca import defaults
from seneca._cache.resp import Pending, Place, Placed, post
from seneca.loader._link import CacheLink
from seneca.loader._roles import TRAINING, Role
from seneca.loader._rows import BatchRows, RowBatch
from seneca.loader._samples import Offers, SampleWork, count_lookup
from seneca.loader._stats import Counters
from seneca.pipeline import codec
from seneca_base.process import current

__all__ = ["Fetcher", "ReadsAhead", "Swaps"]

log = logging.getLogger("seneca")

#: the tiers an ODS batch offers its values to even when full: the encoded tier (its base copy
#: when nothing more processed fits) and the augmented one (its crops); the policy evicts for
#: them what live jobs need less
_EVICTING = ("encoded", "augmented")


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


@dataclass
class Swaps:
    """A batch whose misses not yet made may be swapped late for copies cached after it was
    decided: its ODS ``epoch``, and the swaps :meth:`Fetcher.fetch` made, (position, index
    served instead) each."""

    epoch: int
    made: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class _Making:
    """A batch being made: its picks (a swap changes them), the values read per pick, what it
    counts, its rows, its offers to the cache, whether crops may be offered (``aug_ok``), the
    role of the process making it, and its samples so far (None where not made yet)."""

    picks: list[Pick]
    values: list
    count: Counter
    rows: BatchRows | None
    offers: Offers
    aug_ok: bool
    role: Role
    out: list = field(default_factory=list)


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


class Fetcher:
    """Fetches the decided batches of one dataset through its cache ``link``: the values read
    in one round trip, the rest of each sample made by ``work``, the new values offered, the
    batch counted in ``counters``."""

    def __init__(self, link: CacheLink, work: SampleWork, counters: Counters) -> None:
        self.link, self.work, self.counters = link, work, counters
        #: the reads of the next batch sent ahead (the loader process, without workers)
        self.reads_ahead = ReadsAhead()
        #: in the loader process without workers: the sampler's next batch when it is decided
        #: (``OdsBatchSampler.upcoming``); its reads are sent while this batch is made. A
        #: hook: the loader sets it once its sampler is made (the sampler needs this dataset)
        self.upcoming: Callable[[], Sequence[Pick] | None] | None = None

    def fetch(
        self,
        picks: Sequence[Pick],
        evict: bool,
        rows: BatchRows | None = None,
        role: Role = TRAINING,
        late: Swaps | None = None,
    ) -> list[tuple[Any, Any]]:
        """The samples of a batch of ``ods.decision.Pick``; ``evict``: offer values to a full
        encoded tier too (ODS batches: the policy evicts what live jobs need least; a loader's
        own order has no demand to evict for). ``rows``: the rows of the batch's images (pick k
        in row k; ``seneca.loader._tickets`` gives a batch slot's), by default made here.
        ``role``: the calling process's. ``late``: the batch's misses may be swapped late
        (:meth:`_made_late`), the swaps noted there."""
        count: Counter = Counter(samples=len(picks))
        store = self.link.store
        # with the batch tail deferred, augmented hits are read into the rows of the batch
        if rows is None and self.work.tensor_hits:
            rows = BatchRows(len(picks), shared=role.worker)
        values, glance = self._values(picks, count, rows, role)
        used = glance.used if glance is not None else None
        live = glance.live if glance is not None else 0
        room = store.room(glance) if glance is not None else {}
        # an ODS batch offers its encoded and augmented values even to a full tier, where the
        # policy may evict what live jobs need less (a tier the split gives nothing is not
        # offered anything)
        always = [t for t in _EVICTING if evict and used is not None and store.capacity[t] > 0]
        charge = store.charge if store is not None else len
        # what the other processes writing to the cache may stage at once (each a batch like
        # this one, every live job having as many as this one)
        others = max(1, live) * self.link.writers - 1
        offers = Offers(room, charge, always=always, reserve=others * len(picks))
        aug_ok = self.work.transform.head is not None and live > 1
        # a worker makes the rest of the batch before it waits for the promised samples' copies
        # (elsewhere a promised sample is made as a miss: the training loop does not wait)
        waits = role.worker and used is not None
        promised = {k for k, p in enumerate(picks) if p.promised} if waits else set()
        # misses made a few at a time, each few decided again as late as that (see _made_late)
        later: list[int] = []
        if late is not None and used is not None and live > 1:
            misses = [k for k, p in enumerate(picks) if p.tier is None and not p.promised]
            later = misses[defaults.SWAP_EVERY :]
        b = _Making(list(picks), values, count, rows, offers, aug_ok, role)
        self._make(b, skip={*promised, *later})
        if later and late is not None and self._crowded(offers, live, len(picks)):
            self._made_late(b, later, late)
        elif later:
            self._make(b, only=set(later))
        # an ODS batch's misses are pending until offered (a lookup's are not)
        mine = [k for k, p in enumerate(b.picks) if p.tier is None and evict]
        if promised:
            # what the batch made is offered before it waits for other jobs' copies: at an
            # epoch's end the jobs promise each other what they make, and each would wait for
            # copies the others offer only once done waiting themselves
            made = [b.picks[k].index for k in mine if k not in promised]
            self._admit(b.offers, made, count, used)
            b.offers = b.offers.rest()
            claimed = self._claim(b.picks, promised, values, count)
            self._make(b, only=promised)
            mine = [k for k in promised if b.picks[k].index not in claimed]
        if used is not None:
            self._admit(b.offers, [b.picks[k].index for k in mine], count, used)
        self.counters.add(role.row, count)
        return b.out

    def _crowded(self, offers: Offers, live: int, size: int) -> bool:
        """Whether the cache is short of room for the copies the jobs make next: a tier this
        batch offered values to has less room left than a batch of ``size`` such values for
        each of the ``live`` jobs. Only then are copies dropped before every job that needs
        them has had them, so that a miss made now rather than a copy that came meanwhile may
        cost a decode more; with room, a swap only moves a miss to a later batch, at the cost
        of a call and a read. Nothing offered yet: short of room, for all it shows."""
        units: dict[str, list[int]] = {}
        for _, tier, value in offers.items:
            units.setdefault(tier, []).append(offers.charge(len(value)))
        if not units:
            return True
        return any(offers.room.get(t, 0) < live * size * sum(c) / len(c) for t, c in units.items())

    def _made_late(self, b: _Making, later: list[int], late: Swaps) -> None:
        """Make batch ``b``'s misses at positions ``later``, ``defaults.SWAP_EVERY`` at a time,
        each time first swapping those still to make for copies other jobs cached since the
        batch was decided (``OdsStore.swap``): a batch decided together with its job's other
        workers' finds few copies, while copies keep coming as it is made. Each swapped
        position becomes a hit in ``b.picks`` (its value read, its pin released in the same
        round trip) and is noted in ``late``."""
        link = self.link
        while later:
            try:
                got = link.store.swap(link.job, late.epoch, [b.picks[k].index for k in later])
            except CACHE_FAILURES as err:
                link.failed(err, b.count)
                got = []
            swapped = later[: len(got)]
            for k, pick in zip(swapped, got, strict=True):
                b.picks[k] = pick
                late.made.append((k, pick.index))
            if swapped:
                self._read_swapped(b, swapped)
                b.count["swapped"] += len(swapped)
            later = later[len(got) :]
            self._make(b, only={*swapped, *later[: defaults.SWAP_EVERY]})
            later = later[defaults.SWAP_EVERY :]

    def _read_swapped(self, b: _Making, swapped: list[int]) -> None:
        """Read the values of the hits swapped into batch ``b`` at positions ``swapped`` (into
        their rows), releasing their pins in the same round trip."""
        only = set(swapped)
        view = [p if k in only else Pick(p.index, None, 0) for k, p in enumerate(b.picks)]
        try:
            read, _ = self._read(view, b.count, b.rows, b.role)
        except CACHE_FAILURES as err:
            self.link.failed(err, b.count)
            read = [(None, None)] * len(view)
        for k in swapped:
            b.values[k] = read[k]

    def _make(
        self, b: _Making, skip: Collection[int] = (), only: Collection[int] | None = None
    ) -> None:
        """Make batch ``b``'s samples at the positions not in ``skip`` (and in ``only``) into
        ``b.out``."""
        made = self._samples(b.picks, b.values, b.count, b.rows, b.offers, b.aug_ok, skip, only)
        if not b.out:
            b.out = made
        elif only is not None:
            b.out = [made[k] if k in only else sample for k, sample in enumerate(b.out)]

    # -- the round trip -------------------------------------------------------------------------

    def _keys(self, picks: Sequence[Pick]) -> list[str]:
        return self.link.store.value_keys((p.tier, p.index) for p in picks if p.tier is not None)

    def _commands(
        self, picks: Sequence[Pick], releases: Sequence[tuple[int, list[int]]]
    ) -> list[tuple]:
        """A fetch's round trip: the values of ``picks``' hits, the releases riding in it,
        and what the store reads beside them (``OdsStore.glance_commands``: the tiers' usage,
        the live jobs and the budgets in force, which this fetch's admissions follow)."""
        store, job = self.link.store, self.link.job
        keys = self._keys(picks)
        commands: list[tuple] = [("MGET", *keys)] if keys else []
        commands += [store.release_command(job, b, hits) for b, hits in releases]
        return commands + store.glance_commands([p.index for p in picks])

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

    def _read(
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
        releases = store.release_groups(picks)
        if not role.worker:  # released after the read, replies read at the next fetch
            later, releases = releases, []
        else:  # a worker may exit after this batch: the release rides in this round trip
            later = []
        pending = None if releases else self.reads_ahead.take(self._ahead_of(picks))
        place = _placer(rows, picks) if rows is not None and hits else None
        start = time.perf_counter_ns()
        if pending is None:
            pending = post(store.client, self._commands(picks, releases))
        replies = pending.replies(raise_on_error=False, place=place)
        count["ns_cache"] += time.perf_counter_ns() - start
        glance = store.glance([p.index for p in picks], replies)
        replies = replies[: len(replies) - glance.replies]
        link.adopt_budgets(glance.budgets)
        first = 1 if hits else 0
        for (bucket, released), reply in zip(releases, replies[first:], strict=False):
            store.released(job, bucket, released, reply)
        for reply in replies[:first]:
            if isinstance(reply, redis.RedisError):
                raise reply
        for bucket, released in later:
            store.release_later(job, bucket, released)
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
            self._forget_bad(gone, count)  # the entry goes: a later miss caches it again
        return values, glance

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

    def _claim(
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

    def _values(
        self,
        picks: Sequence[Pick],
        count: Counter,
        rows: BatchRows | None,
        role: Role,
    ) -> tuple[list, Glance | None]:
        """:meth:`_read`, or no values while the cache is down (each miss read from storage)."""
        nothing: list = [(None, None)] * len(picks)
        link = self.link
        if link.down():
            self.reads_ahead.drop()
            return nothing, None
        if self.work.stale:  # the values the cache holds are another transform's
            self._read_around(picks, count)
            return nothing, None
        try:
            values, glance = self._read(picks, count, rows, role)
        except CACHE_FAILURES as err:
            link.failed(err, count)
            return nothing, None
        link.answered()
        try:  # the next batch's reads, the releases and the sampler's next decision run while
            self._read_next()  # this batch is made
            link.store.outbox.flush()
        except CACHE_FAILURES as err:
            link.failed(err, count)
        return values, glance

    def _read_around(self, picks: Sequence[Pick], count: Counter) -> None:
        """Unpin a batch's decided hits, to be read from storage: the dataset's transform was
        changed after the loader was made (said once per job)."""
        link = self.link
        if self.counters.once("transform-changed"):
            log.warning(
                "the dataset's transform changed after SenecaLoader was made: its cached values "
                "are the old transform's, so this loader reads from storage (make a new "
                "SenecaLoader to cache the new transform)"
            )
        try:
            for bucket, hits in hits_by_bucket(picks).items():
                link.store.release_later(link.job, bucket, hits)
        except CACHE_FAILURES as err:
            link.failed(err, count)

    # -- what was read, made into samples -------------------------------------------------------

    def _samples(
        self,
        picks: Sequence[Pick],
        values: list,
        count: Counter,
        rows: BatchRows | None,
        offers: Offers,
        aug_ok: bool,
        skip: Collection[int] = (),
        only: Collection[int] | None = None,
    ) -> list[Any]:
        """The batch's samples from what was read: the remaining work per sample. Positions
        in ``skip``, or not in ``only``, are left None (made by another call)."""
        work = self.work
        # a hit read into its row needs nothing more than its target when no step follows
        # PILToTensor: the common case, kept to a few operations per sample
        plain = work.transform.after_tensor is None and work.target_transform is None
        views = rows.rows.unbind(0) if rows is not None and rows.rows is not None else ()
        label = work.source.target
        if plain and len(views) == len(picks) > 0 and not skip and only is None:
            whole = _all_placed(picks, values, rows.rows, views, label, count)
            if whole is not None:
                return whole
        out, bad = [], []
        placed = placed_bytes = 0
        for k, (p, (tier, value)) in enumerate(zip(picks, values, strict=True)):
            if k in skip or (only is not None and k not in only):
                out.append(None)
                continue
            if isinstance(value, Placed):
                if plain:
                    out.append((views[k], label(p.index)))
                    placed += 1
                    placed_bytes += value.size
                    continue
                obj, size = views[k], value.size
            else:
                obj = work.cached_value(value, tier, count) if value is not None else None
                size = len(value) if obj is not None else 0
                if value is not None and obj is None:
                    bad.append((tier, p.index))
            if obj is None:
                tier = None
            count_lookup(tier, count)
            count["bytes_cache"] += size
            sample = work.finish(p.index, tier, obj, count, offers, aug_ok)
            out.append(rows.settle(k, sample) if rows is not None else sample)
        count["hits_augmented"] += placed  # what count_lookup counts for an augmented hit
        count["bytes_cache"] += placed_bytes
        if bad:
            self._forget_bad(bad, count)
        return out

    # -- what goes back to the cache ------------------------------------------------------------

    def _admit(self, offers: Offers, made: list[int], count: Counter, used: dict) -> None:
        """Offer the batch's new values, and end the pending of the decided misses ``made``
        that are not offered (``ods/functions/pending.lua``); the renames and deletions that
        finish the admission are posted to the outbox (sent at once, replies read at the next
        fetch), the values offered past their tier's room written once admitted. A value the
        server refused to store is a cache error, and the budgets shrink (the tiers held
        ``used`` at this batch's read)."""
        admit = offers.items
        if made and admit:
            offered = {i for i, _, _ in admit}
            made = [i for i in made if i not in offered]
        if not admit and not made:
            return
        link = self.link
        store = link.store
        items = [(i, t, store.charge(len(v)), v) for i, t, v in admit]
        try:
            result = store.admit(link.job, items, wait=False, made=made, later=offers.later)
        except CACHE_FAILURES as err:
            link.failed(err, count)
            return
        for (_, t, _), ok in zip(admit, result, strict=True):
            if ok == 1:
                count[f"admitted_{t}"] += 1
            elif ok == 0:
                count[f"full_{t}"] += 1
            elif ok == REFUSED:
                count["cache_errors"] += 1
        if REFUSED in result:
            link.refused(used, result.count(REFUSED))

    def _forget_bad(self, bad: list[tuple[str, int]], count: Counter) -> None:
        """Drop the entries whose values were missing, corrupt or foreign (read from storage):
        their values are deleted, and the samples may be cached again."""
        try:
            self.link.store.forget(self.link.job, bad)
        except CACHE_FAILURES as err:
            self.link.failed(err, count)


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
