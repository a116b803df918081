"""Fetching a decided batch (runs in the loader process or a DataLoader worker).

Each sample of the batch comes with the tier to read it from (decided by ODS, or looked up for
a loader's own order). A fetch has three parts, each its own module, run in this order:

1. **read** (``_read.Reader``): one round trip reads the batch's values, releases its pins and
   reads the tiers' usage and the live jobs; values found missing are looked for again, and
   those gone are read from storage;
2. **make** (``_make.Maker``): each sample's remaining work from what was read, the new values
   offered as they are made;
3. **admit** (``_admit.Admitter``): one call offers the new values to the cache.

This module runs them: it decides what the batch offers (to a full tier too, for an ODS
batch), makes the samples another job promised last (after offering its own), and, with
workers while the cache is short of room, makes the misses a few at a time, each few first
swapped for copies other jobs cached since the batch was decided.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from ods.decision import Pick
from ods.routing import CACHE_FAILURES
from seneca import defaults
from seneca.loader._admit import Admitter
from seneca.loader._link import CacheLink
from seneca.loader._make import Maker
from seneca.loader._read import Reader, nothing_read
from seneca.loader._rows import BatchRows
from seneca.loader._samples import Offers, SampleWork
from seneca.loader._stats import Counters
from seneca_base.process import TRAINING, Role

log = logging.getLogger("seneca")

__all__ = ["Fetcher", "Swaps"]

#: the tiers an ODS batch offers its values to even when full: the encoded tier (its base copy
#: when nothing more processed fits) and the augmented one (its crops); the policy evicts for
#: them what live jobs need less
_EVICTING = ("encoded", "augmented")


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


class Fetcher:
    """Fetches the decided batches of one dataset through its cache ``link``: the values read
    in one round trip, the rest of each sample made by ``work``, the new values offered, the
    batch counted in ``counters``."""

    def __init__(self, link: CacheLink, work: SampleWork, counters: Counters) -> None:
        self.link, self.work, self.counters = link, work, counters
        self.admitter = Admitter(link)
        self.reader = Reader(link, counters, self.admitter.forget)
        self.maker = Maker(work)

    def read_ahead_from(self, upcoming: Callable[[], Sequence[Pick] | None]) -> None:
        """In the loader process without workers: send each batch's reads while the one before
        is made, ``upcoming`` giving the sampler's next batch once decided
        (``OdsBatchSampler.upcoming``; the sampler is made after this dataset)."""
        self.reader.upcoming = upcoming

    def drop_reads_ahead(self) -> None:
        """Abandon the reads sent ahead for a batch that will not come (the loader closes)."""
        self.reader.reads_ahead.drop()

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
        values, glance = self.reader.batch(picks, count, rows, role, self.work.stale)
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
        # crops are offered (and promised ones waited for) under the transform's name in the
        # cache: never when that name is an older transform's (``SampleWork.old_view``)
        old_view = self.work.old_view
        if old_view is not None and self.counters.once(old_view):
            log.warning("%s, so this loader makes every crop anew and caches none", old_view)
        aug_ok = self.work.transform.head is not None and live > 1 and old_view is None
        # a worker makes the rest of the batch before it waits for the promised samples' copies
        # (elsewhere a promised sample is made as a miss: the training loop does not wait)
        waits = role.worker and used is not None and old_view is None
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
            self.admitter.admit(b.offers, made, count, used)
            b.offers = b.offers.rest()
            claimed = self.reader.claim(b.picks, promised, values, count)
            self._make(b, only=promised)
            mine = [k for k in promised if b.picks[k].index not in claimed]
        if used is not None:
            self.admitter.admit(b.offers, [b.picks[k].index for k in mine], count, used)
        old_files = self.work.old_files
        if old_files is not None and self.counters.once("files made again"):
            log.warning(
                "%s: this loader reads them from storage and caches nothing of them (make a "
                "new SenecaLoader to cache the new ones)",
                old_files,
            )
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
            read, _ = self.reader.read(view, b.count, b.rows, b.role)
        except CACHE_FAILURES as err:
            self.link.failed(err, b.count)
            read = nothing_read(view)
        for k in swapped:
            b.values[k] = read[k]

    def _make(
        self, b: _Making, skip: Collection[int] = (), only: Collection[int] | None = None
    ) -> None:
        """Make batch ``b``'s samples at the positions not in ``skip`` (and in ``only``) into
        ``b.out``."""
        made, bad = self.maker.samples(
            b.picks, b.values, b.count, b.rows, b.offers, b.aug_ok, skip, only
        )
        if bad:  # the entry goes: a later miss caches the sample again
            self.admitter.forget(bad, b.count)
        if not b.out:
            b.out = made
        elif only is not None:
            b.out = [made[k] if k in only else sample for k, sample in enumerate(b.out)]
