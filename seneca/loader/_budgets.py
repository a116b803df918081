"""The budgets in force for a loader's dataset: its share of the node, split between its tiers.

The node's memory is shared by every dataset on it under one rule (``seneca._cache.shares``).
A loader registers what it asks (``cache_size``) when it is made, and from then on, in the
loader process between batches (every ``defaults.AUTO_TICK`` seconds, as the plan), looks at
its dataset's share: the split (planned with ``split="auto"``, else the one given) applied to
the share gives the tiers' budgets, published in the cache (``OdsStore.publish_budgets``),
where every process of every job of the dataset reads them with its next batch's values. A
planner plans for the share (``AutoPlanner.resize``). Once the loader has measured its samples'
sizes, it tells the node how much the dataset can use at most (every sample in its largest
readable forms), which the node then gives it no more than.
"""

from __future__ import annotations

import logging
import warnings
from typing import TYPE_CHECKING, Any

import redis

from ods.routing import CACHE_FAILURES
from ods.store_api import Store
from seneca import defaults
from seneca._cache.shares import NodeShares
from seneca_base.backoff import Cadence
from seneca_base.process import TRAINING
from seneca_base.split import Split
from seneca_base.units import format_size

if TYPE_CHECKING:
    from seneca._autoplan import AutoPlanner

__all__ = ["Budgets", "largest_value", "most_useful"]

log = logging.getLogger("seneca")


def most_useful(samples: int, counts: dict[str, int], tiers: tuple[str, ...], charge: Any) -> int:
    """Bytes a dataset of ``samples`` samples can use at most: each sample's largest readable
    base form (decoded, else encoded) and, with an augmented tier, one augmented copy, charged
    as the store charges a value (``charge``, with room for larger samples); the mean sizes
    from a loader's counters ``counts`` (``Counters.snapshot``), 0 (not known) until
    ``defaults.NEED_SAMPLES`` samples were made, and half as many augmented copies."""
    sizes = _mean_sizes(counts, tiers)
    if not sizes or ("augmented" in tiers and "augmented" not in sizes):
        return 0
    base = max((v for t, v in sizes.items() if t != "augmented"), default=0)
    per = _charged(base, charge)
    if "augmented" in sizes:
        per += _charged(sizes["augmented"], charge)
    return int(samples * per)


def largest_value(counts: dict[str, int], tiers: tuple[str, ...], charge: Any) -> int:
    """Bytes the largest value of a sample in ``tiers`` takes (charged as by
    :func:`most_useful`; of the forms measured so far), 0 until one is: what a batch moves
    per sample at most."""
    return max((_charged(v, charge) for v in _mean_sizes(counts, tiers).values()), default=0)


def _mean_sizes(counts: dict[str, int], tiers: tuple[str, ...]) -> dict[str, float]:
    """The mean payload of a value of each of ``tiers`` measured in ``counts``: none until
    ``defaults.NEED_SAMPLES`` samples were made; the augmented form once half as many copies
    were."""
    made, augmented = counts.get("decodes", 0), counts.get("augmented_made", 0)
    if made < defaults.NEED_SAMPLES:
        return {}
    sizes = {
        "encoded": counts.get("bytes_encoded", 0) / made,
        "decoded": counts.get("bytes_decoded", 0) / made,
    }
    if augmented >= max(1, made // 2):
        sizes["augmented"] = counts.get("bytes_augmented", 0) / augmented
    return {t: v for t, v in sizes.items() if t in tiers}


def _charged(mean: float, charge: Any) -> int:
    """What a value of a form whose mean payload is ``mean`` bytes is charged, with room for
    samples a sixth larger than the mean and the value's header."""
    return charge(int(mean * _SPREAD) + _HEADER)


#: how much larger than the mean a form's values are planned for, and the bytes of a value's
#: header (``seneca.pipeline.codec``: a few dozen)
_SPREAD, _HEADER = 1.15, 64


class Budgets:
    """The budgets of ``store``'s tiers: the dataset's share of the node ``shares`` (``want``:
    the bytes its loader asks, 0 for whatever the node gives; ``asked``: the user gave that
    size, so getting less is worth a warning), split by ``planner``'s plan with
    ``split="auto"``, else by ``split``; ``tiers``: the tiers the loader reads, ``counters``:
    its counters (its samples' sizes), ``about``: the dataset in a few words, for log lines,
    ``job``: the job that publishes the budgets it sets, ``flight``: the samples the job's
    processes may have in flight at once (a batch each: the node keeps room for their values
    in its clients' buffers, beside the tiers)."""

    def __init__(
        self,
        store: Store,
        shares: NodeShares | None,
        want: int,
        split: Split,
        planner: AutoPlanner | None = None,
        tiers: tuple[str, ...] = (),
        counters: Any = None,
        *,
        asked: bool = True,
        about: str = "",
        backoff: Any = None,
        job: str,
        flight: int = 0,
    ) -> None:
        self.store, self.shares, self.want = store, shares, int(want)
        self.job = job
        self.split, self.planner, self.tiers = split, planner, tiers
        self.counters, self.asked = counters, asked
        self.about = about or store.keys.dataset
        #: the dataset's share of the node (bytes; until it is known, what it asks or the
        #: default cache size)
        self.size = int(want) or defaults.CACHE_SIZE
        #: the node's total for the tiers of every dataset, as last seen (0: unknown)
        self.total = 0
        #: when a look is due (``defaults.AUTO_TICK``; none during an outage of ``backoff``,
        #: the job's back-off of the cache)
        self.cadence = Cadence(defaults.AUTO_TICK, backoff)
        self.flight = int(flight)
        self._told = (0, 0)  # (need, flight bytes) as last told to the node

    @property
    def dataset(self) -> str:
        return self.store.keys.dataset

    def start(self) -> int:
        """Register the dataset's ask and take its share; returns the share (bytes)."""
        if self.shares is not None:
            self.shares.register(self.dataset, self.store.samples, self.want)
            self.total, got = self.shares.shares()
            self.size = got.get(self.dataset, 0)
            if self.asked and self.want > self.total:
                warnings.warn(
                    f"cache_size {format_size(self.want)} does not fit the maxmemory of the "
                    f"cache beside the server's own memory and the metadata of its {len(got)} "
                    f"dataset(s): their tiers hold at most {format_size(self.total)} together",
                    RuntimeWarning,
                    stacklevel=5,
                )
            elif len(got) > 1:
                log.info(
                    "dataset %s gets %s of the cache's %s, shared by %d datasets",
                    self.about,
                    format_size(self.size),
                    format_size(self.total),
                    len(got),
                )
        self._apply(publish=True)
        return self.size

    def _apply(self, publish: bool = False) -> None:
        """Split the share by the plan (or the fixed split) and publish the budgets when they
        changed (or ``publish``)."""
        if self.planner is not None:
            self.planner.resize(self.size)
            return
        before = dict(self.store.capacity)
        self.store.apply_split(self.split, self.size)
        if publish or self.store.capacity != before:
            self.store.publish_budgets(self.job)

    def look(self) -> None:
        """:meth:`tick` now, whatever the time since the last look."""
        self.tick(force=True)

    def tick(self, force: bool = False) -> None:
        """Between batches (at most every ``defaults.AUTO_TICK`` unless ``force``): the plan's
        look (``AutoPlanner.tick``), then the dataset's share of the node now."""
        if not self.cadence.due(force):
            return
        if self.planner is not None:
            self.planner.tick(force=True)
        if self.shares is None:
            return
        try:
            self._noted()
            self.total, got = self.shares.shares()
            size = got.get(self.dataset, self.size)
            if abs(size - self.size) > defaults.SHARE_LOGGED * max(size, self.size):
                log.info(
                    "dataset %s: its share of the cache is %s now (was %s)",
                    self.about,
                    format_size(size),
                    format_size(self.size),
                )
            self.size = size
            self._apply()
        except CACHE_FAILURES as err:
            log.debug("budgets not checked: %s", err)

    def _noted(self) -> None:
        """Note in the node's record that the loader still looks, and what it can use. A
        server out of memory refuses these writes: the look goes on (it is what shrinks the
        budgets then), and each refused write counts as a cache error, as a refused value
        does."""
        try:
            self._note_need()
            self.shares.seen(self.dataset)
        except redis.OutOfMemoryError as err:
            log.debug("the node's record not updated: %s", err)
            if self.counters is not None:
                self.counters.add(TRAINING.row, {"cache_errors": 1})

    def _note_need(self) -> None:
        """Tell the node how much the dataset can use, and the bytes its job's batches may
        have in flight, once the loader has measured its samples' sizes."""
        if self.counters is None or self.shares is None:
            return
        counts = self.counters.snapshot()
        charge = self.store.charge
        need = most_useful(self.store.samples, counts, self.tiers, charge)
        noted = (need, self.flight * largest_value(counts, self.tiers, charge))
        if any(noted) and noted != self._told:
            self.shares.needs(self.dataset, *noted)
            self._told = noted
