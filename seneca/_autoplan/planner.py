"""AutoPlanner: the split of a loader's cache, planned with MDP from what the loader measures
and shared with every loader of the dataset (``seneca._autoplan.record``).

The first loader of a dataset plans from documented defaults (``defaults.AUTO_DEFAULTS``) and
writes the plan; later loaders start with the plan they find. While they train, each loader
looks at the plan every ``defaults.AUTO_TICK`` seconds (between batches, in the loader process):
it adopts a plan another loader wrote, and re-plans from its measurements and the live jobs.

A plan gives a share only to tiers its jobs can read (``mdp.planner.readable_tiers``: no
augmented tier for a lone job or a transform without a random head). A plan is *measured* when
its CPU rates are (``inputs.KEY_INPUTS``), else *from defaults*; a plan from defaults never
replaces a measured one. The split changes, with hysteresis, only when:

* the best split's predicted throughput beats the current split's, both predicted from the same
  inputs, by more than ``defaults.AUTO_REPLAN_GAIN`` (a plan from defaults is replaced by the
  first measured one whatever the gain), or the current split gives a share to a tier nobody
  can read; and
* the current plan is ``defaults.AUTO_REPLAN_INTERVAL`` old, or this loader measured
  ``defaults.AUTO_EVIDENCE_FACTOR`` times the samples behind the plan's inputs (its
  ``evidence``: a plan from a short measurement does not stick), or the live jobs have
  differed from those it was planned for for ``defaults.AUTO_JOBS_SETTLE`` seconds (at once
  while the plan is from defaults and younger than that: jobs that start together find the
  plan the first of them made for itself alone), or it is from defaults and the first
  measured inputs arrived; and
* a tier that holds at least ``defaults.AUTO_WARM_SHARE`` of the cache and would have to evict
  (a *warm* tier) is given up only for a gain above ``AUTO_REPLAN_GAIN`` predicted from
  measured rates, or when the plan that filled it is from defaults and that young (its tier
  holds the first seconds' values only).

A split whose tiers the live jobs can read none of (a lone job left with a split made for
several, all augmented) is replaced at the loader's next look by the best split of the tiers
they read, however young the plan and warm its tier: no job runs on a split it cannot hit.

One loader changes the plan at a time (a short lock). A tier left above its new budget shrinks
by evicting its least needed unpinned entries (``OdsStore.shrink``), never by a flush.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

from mdp import plan, predict
from mdp.planner import Prediction
from ods.routing import CACHE_FAILURES
from seneca import defaults
from seneca._autoplan.inputs import Setting, evidence, measured_inputs, source_of, spec_of
from seneca._autoplan.record import PlanRecord
from seneca_base.backoff import Cadence
from seneca_base.split import Split
from seneca_base.tiers import SPLIT_ORDER, TIERS

__all__ = ["AutoPlanner", "plan_for"]

log = logging.getLogger("seneca")


def plan_for(spec: Any, tiers: tuple[str, ...] | None = None) -> Prediction:
    """The split the loader plans for ``spec``: MDP's plan over the ``tiers`` its jobs can
    read (default all), caching more than the fewest samples only when that is predicted to
    pay for filling the cache (``defaults.AUTO_MIN_GAIN``)."""
    return plan(spec, min_gain=defaults.AUTO_MIN_GAIN, tiers=tiers)


class AutoPlanner:
    """The planned split of ``job``'s loader over ``store`` (an ``ods.store.OdsStore``).

    ``counters``: the loader's counters (``snapshot()``), its measurements; ``setting``: what
    it knows without measuring; ``about``: the dataset in a few words, for its log lines.
    :attr:`record` is the plan in use, :attr:`history` the plans this loader used, oldest
    first.
    """

    def __init__(
        self,
        store: Any,
        job: str,
        counters: Any,
        setting: Setting,
        about: str = "",
        backoff: Any = None,
    ) -> None:
        self.store, self.job, self.counters, self.setting = store, job, counters, setting
        self.about = about or store.keys.dataset
        self.record: PlanRecord | None = None
        self.history: list[PlanRecord] = []
        #: when a look at the plan is due (``defaults.AUTO_TICK``; none during an outage of
        #: ``backoff``, the job's back-off of the cache)
        self.cadence = Cadence(defaults.AUTO_TICK, backoff)
        self._jobs_seen: tuple[int, float] | None = None  # (live jobs, since when: monotonic)
        #: the samples measured behind this loader's latest measured inputs (0: none yet)
        self.evidence = 0

    @property
    def split(self) -> Split:
        """The split in use (the defaults' before :meth:`start`)."""
        if self.record is None:
            return Split.of(defaults.SPLIT)
        return self.record.as_split()

    # -- the shared record -------------------------------------------------------------------

    def _read(self) -> PlanRecord | None:
        return PlanRecord.from_json(self.store.client.get(self.store.keys.plan))

    def _jobs(self) -> int:
        return max(1, self.store.same_view(self.store.refresh_jobs()))

    def _measured(self, jobs: int) -> dict[str, float]:
        """The inputs this loader has measured for ``jobs`` live jobs; :attr:`evidence` says
        how much measuring is behind them (0 until the plan they make is measured)."""
        snapshot = self.counters.snapshot()
        measured = measured_inputs(snapshot, jobs, self.setting.workers, self.setting.head)
        self.evidence = evidence(snapshot) if source_of(measured) == "measured" else 0
        return measured

    def _record(
        self,
        best: Prediction,
        version: int,
        spec: Any,
        measured: dict[str, float],
        previous: Split | None = None,
    ) -> PlanRecord:
        """The record of ``best`` planned from ``spec``; its gain over ``previous`` (the split
        it replaced, if any) predicted from the same spec."""
        body = spec.as_toml_dict()
        inputs = {f"{s}.{k}": v for s, keys in body.items() for k, v in keys.items()}
        gain = 0.0
        if previous is not None:
            before = predict(spec, previous).throughput
            gain = best.throughput / before - 1 if before > 0 else 0.0
        return PlanRecord(
            split=best.split,
            version=version,
            source=source_of(measured),
            throughput=best.throughput,
            gain=gain,
            by=self.job,
            at_ms=self.store.now_ms(),
            inputs=inputs,
            measured=tuple(sorted(measured)),
            previous=previous,
            evidence=self.evidence,
        )

    def _log(self, record: PlanRecord) -> None:
        log.info("cache plan for %s: %s", self.about, record.describe())

    def start(self) -> PlanRecord:
        """Use the dataset's plan, or make the first one from defaults (and whatever this
        loader measured already)."""
        record = self._read()
        if record is None:
            jobs = self._jobs()
            measured = self._measured(jobs)
            spec = spec_of(self.setting, measured, jobs)
            first = self._record(plan_for(spec, self._tiers(spec)), 1, spec, measured)
            if self.store.client.set(self.store.keys.plan, first.to_json(), nx=True):
                self._log(first)
            record = self._read() or first
        self._adopt(record)
        return record

    # -- re-planning -----------------------------------------------------------------------

    def tick(self, force: bool = False) -> None:
        """Between batches: adopt the shared plan, re-plan when due, shrink tiers above their
        budget. At most once per ``defaults.AUTO_TICK`` unless ``force``; a cache failure is
        left to the fetch path, which reports it."""
        if not self.cadence.due(force):
            return
        try:
            record = self._read()
            if record is None:
                record = self.start()
            jobs = self._jobs()
            measured = self._measured(jobs)
            if self._due(record, jobs, measured):
                record = self._replan(record, measured, jobs)
            self._adopt(record)
            self._shrink()
        except CACHE_FAILURES as err:
            log.debug("plan not checked: %s", err)

    def _settled(self, jobs: int) -> bool:
        """Whether the live jobs have been ``jobs`` for ``defaults.AUTO_JOBS_SETTLE`` seconds
        (as this loader saw them at its looks)."""
        now = time.monotonic()
        if self._jobs_seen is None or self._jobs_seen[0] != jobs:
            self._jobs_seen = (jobs, now)
        return now - self._jobs_seen[1] >= defaults.AUTO_JOBS_SETTLE

    def _due(self, record: PlanRecord, jobs: int, measured: dict[str, float]) -> bool:
        """Whether to look for a better split now: the plan gives a share to a tier the live
        jobs cannot read (a lone job left on a split made for several: at once, whatever its
        age); the live jobs have differed from those the plan was planned for long enough (how
        many jobs share the cache moves the best split most); the plan is from defaults and
        rates are measured now; this loader's measurement is longer than the plan's
        (:meth:`_thicker`); or the plan is ``defaults.AUTO_REPLAN_INTERVAL`` old."""
        settled = self._settled(jobs)
        if self._reads_nothing(record, self._tiers(spec_of(self.setting, measured, jobs))):
            return True
        planned_for = record.inputs.get("cluster.jobs")
        if planned_for is not None and jobs != planned_for and (settled or self._young(record)):
            return True
        if not measured:
            return False
        if record.source == "defaults":
            return source_of(measured) == "measured"
        if self._thicker(record):
            return True
        return self.store.now_ms() - record.at_ms >= defaults.AUTO_REPLAN_INTERVAL * 1000

    def _thicker(self, record: PlanRecord) -> bool:
        """Whether this loader's measured inputs have ``defaults.AUTO_EVIDENCE_FACTOR`` times
        the samples behind them that ``record``'s had: a plan made from a short measurement
        (a slow start, a hiccup) is looked at again as soon as a longer one exists, whatever
        its age. A measured record that does not say (written by an older Seneca) waits out
        the interval."""
        return 0 < defaults.AUTO_EVIDENCE_FACTOR * record.evidence <= self.evidence

    @staticmethod
    def _unreadable(record: PlanRecord, readable: tuple[str, ...]) -> bool:
        """Whether ``record``'s split gives a share to a tier not in ``readable``."""
        return any(
            share > 0 and tier not in readable
            for tier, share in zip(SPLIT_ORDER, record.split.percent, strict=True)
        )

    @staticmethod
    def _reads_nothing(record: PlanRecord, readable: tuple[str, ...]) -> bool:
        """Whether ``record``'s split gives no share to a tier in ``readable`` (jobs that read
        only those would never hit)."""
        shares = dict(zip(SPLIT_ORDER, record.split.percent, strict=True))
        return all(shares[tier] == 0 for tier in readable)

    def _tiers(self, spec: Any) -> tuple[str, ...]:
        """The tiers the jobs of ``spec`` can read (``mdp.planner.readable_tiers``)."""
        from mdp.model import Params
        from mdp.planner import readable_tiers

        return readable_tiers(Params.from_spec(spec), "shared", self.setting.tiers)

    def _young(self, record: PlanRecord) -> bool:
        """Whether ``record`` is from defaults and younger than ``defaults.AUTO_JOBS_SETTLE``:
        the first plan, made before the jobs that start with its maker have joined."""
        age_ms = self.store.now_ms() - record.at_ms
        return record.source == "defaults" and age_ms < defaults.AUTO_JOBS_SETTLE * 1000

    def _gives_up_warm(self, old: Split, new: Split) -> bool:
        """Whether changing ``old`` for ``new`` evicts from a warm tier: one that holds at least
        ``defaults.AUTO_WARM_SHARE`` of the cache, more than ``new`` budgets it."""
        size = self.setting.cache_bytes
        budgets = new.budgets(size)
        used = self.store.usage()
        warm = defaults.AUTO_WARM_SHARE * size
        return any(used[t] >= warm and used[t] > budgets[t] for t in TIERS)

    def _replan(self, record: PlanRecord, measured: dict[str, float], jobs: int) -> PlanRecord:
        """The plan after looking at ``measured``: a new one when it gains enough (written
        under the lock), else ``record`` (re-predicted from measured rates when it was from
        defaults)."""
        source = source_of(measured)
        if record.source == "measured" and source != "measured":
            return record  # never replaced by a plan on defaults
        spec = spec_of(self.setting, measured, jobs)
        readable = self._tiers(spec)
        best, current = plan_for(spec, readable), predict(spec, record.split)
        gain = best.throughput / current.throughput - 1 if current.throughput > 0 else 0.0
        measured_gain = source == "measured" and gain > defaults.AUTO_REPLAN_GAIN
        unreadable = self._unreadable(record, readable)
        if unreadable:
            wanted = True
        elif record.source == "defaults":  # the first measured rates, or other jobs
            news = source == "measured" or jobs != record.inputs.get("cluster.jobs")
            wanted = news and gain > defaults.AUTO_MIN_GAIN
        else:
            wanted = gain > defaults.AUTO_REPLAN_GAIN
        chosen: Prediction | None = best if wanted and best.split != record.split else None
        # a warm tier is given up only for a measured gain (a share nobody reads goes to the
        # readable tier with the most), unless the live jobs can read none of the split: the
        # best split of the tiers they read replaces it, whatever its tiers hold
        warm = chosen is not None and self._gives_up_warm(record.as_split(), best.as_split())
        hopeless = self._reads_nothing(record, readable)
        if warm and not measured_gain and not self._young(record) and not hopeless:
            repaired = _repaired(record.split, readable) if unreadable else record.split
            chosen = predict(spec, repaired) if repaired != record.split else None
        # the split stands: the record now says the inputs it was predicted from when they
        # were measured first or longer (the next look waits for a longer measurement still)
        relabel = source == "measured" and (record.source == "defaults" or self._thicker(record))
        if chosen is None and not relabel and jobs == record.inputs.get("cluster.jobs"):
            return record
        lock = self.store.keys.plan + ":lock"
        if not self.store.client.set(lock, self.job, nx=True, px=defaults.AUTO_LOCK_MS):
            return record  # another loader is changing it
        try:
            latest = self._read()
            if latest is not None and latest.version != record.version:
                return latest  # changed meanwhile: look again at the next tick
            if chosen is not None:
                new = self._record(chosen, record.version + 1, spec, measured, record.split)
            else:  # the split stands; the record now says the inputs it was predicted from
                new = self._record(current, record.version, spec, measured, record.previous)
            self.store.client.set(self.store.keys.plan, new.to_json())
        finally:
            self.store.client.delete(lock)
        self._log(new)
        return new

    def resize(self, size: int) -> None:
        """Plan for a cache of ``size`` bytes from now on (the dataset's share of the node
        changed): the tiers' budgets follow at once."""
        if size == self.setting.cache_bytes:
            return
        self.setting = replace(self.setting, cache_bytes=int(size))
        if self.record is not None:
            self.store.apply_split(self.split, self.setting.cache_bytes)
            self.store.publish_budgets(self.job, self.record.version)

    def _adopt(self, record: PlanRecord) -> None:
        if self.record is not None and record == self.record:
            return
        changed = self.record is None or record.split != self.record.split
        self.record = record
        self.history.append(record)
        self.store.apply_split(self.split, self.setting.cache_bytes)
        if changed:
            self.store.publish_budgets(self.job, record.version)

    def _shrink(self) -> None:
        """Evict from tiers above their budget, a few bounded calls per look."""
        caps = self.store.capacity
        used = self.store.usage()
        if all(used[t] <= caps[t] for t in TIERS):
            return
        before = None
        for _ in range(defaults.AUTO_SHRINK_CALLS):
            over = self.store.shrink(self.job, caps)
            if not any(over.values()) or over == before:
                return  # done, or only pinned entries are left above the budget
            before = over


def _repaired(split: Split, readable: tuple[str, ...]) -> Split:
    """``split`` with the shares of tiers not in ``readable`` given to the readable tier with
    the largest share (the least change that leaves no share unread)."""
    shares = dict(zip(SPLIT_ORDER, split.percent, strict=True))
    keep = max(readable, key=lambda t: shares[t])
    for tier in SPLIT_ORDER:
        if tier not in readable:
            shares[keep] += shares[tier]
            shares[tier] = 0
    return Split.from_percent([shares[t] for t in SPLIT_ORDER])
