"""AutoPlanner: the split of a loader's cache, planned with MDP from what the loader measures
and shared with every loader of the dataset (``seneca._autoplan.record``).

The first loader of a dataset plans from documented defaults (``defaults.AUTO_DEFAULTS``) and
writes the plan; later loaders start with the plan they find. While they train, each loader
looks at the plan every ``defaults.AUTO_TICK`` seconds (between batches, in the loader process):
it adopts a plan another loader wrote, and re-plans from its measurements and the live jobs.
A new split is written only when its predicted throughput beats the current split's, both
predicted from the same inputs, by more than ``defaults.AUTO_REPLAN_GAIN``, and the current
plan is ``defaults.AUTO_REPLAN_INTERVAL`` old or was planned for another number of live jobs
(a plan from defaults is replaced by the first measured one at once, whatever the gain, and
re-planned from defaults when jobs join before anything is measured): the hysteresis that
keeps the split from oscillating. One loader changes the plan at a time (a short lock). A
tier left above its new budget shrinks by evicting its least needed unpinned entries
(``OdsStore.shrink``), never by a flush.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import redis

from mdp import plan, predict
from mdp.planner import Prediction
from seneca import defaults
from seneca._autoplan.inputs import Setting, measured_inputs, spec_of
from seneca._autoplan.record import PlanRecord
from seneca_base.errors import CacheError
from seneca_base.split import Split
from seneca_base.tiers import TIERS

__all__ = ["AutoPlanner", "plan_for"]

log = logging.getLogger("seneca")

_CACHE_ERRORS = (redis.RedisError, OSError, CacheError)


def plan_for(spec: Any) -> Prediction:
    """The split the loader plans for ``spec``: MDP's plan, caching more than the fewest
    samples only when that is predicted to pay for filling the cache
    (``defaults.AUTO_MIN_GAIN``)."""
    return plan(spec, min_gain=defaults.AUTO_MIN_GAIN)


class AutoPlanner:
    """The planned split of ``job``'s loader over ``store`` (an ``ods.store.OdsStore``).

    ``counters``: the loader's counters (``snapshot()``), its measurements; ``setting``: what
    it knows without measuring. :attr:`record` is the plan in use, :attr:`history` the plans
    this loader used, oldest first.
    """

    def __init__(self, store: Any, job: str, counters: Any, setting: Setting) -> None:
        self.store, self.job, self.counters, self.setting = store, job, counters, setting
        self.record: PlanRecord | None = None
        self.history: list[PlanRecord] = []
        #: the job's back-off of the cache (``seneca_base.backoff``): no look at the plan
        #: during an outage (the fetch and the sampler retry the cache)
        self.backoff: Any = None
        self._next = 0.0

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

    def _record(
        self,
        best: Prediction,
        version: int,
        spec: Any,
        measured: dict[str, float],
        previous: tuple[int, int, int] | None = None,
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
            source="measured" if measured else "defaults",
            throughput=best.throughput,
            gain=gain,
            by=self.job,
            at_ms=self.store.now_ms(),
            inputs=inputs,
            measured=tuple(sorted(measured)),
            previous=previous,
        )

    def start(self) -> PlanRecord:
        """Use the dataset's plan, or make the first one from defaults (and whatever this
        loader measured already)."""
        record = self._read()
        if record is None:
            jobs = self._jobs()
            measured = measured_inputs(self.counters.snapshot(), jobs, self.setting.workers)
            spec = spec_of(self.setting, measured, jobs)
            first = self._record(plan_for(spec), 1, spec, measured)
            if self.store.client.set(self.store.keys.plan, first.to_json(), nx=True):
                log.info("cache plan: %s", first.describe())
            record = self._read() or first
        self._adopt(record)
        return record

    # -- re-planning -----------------------------------------------------------------------

    def tick(self, force: bool = False) -> None:
        """Between batches: adopt the shared plan, re-plan when due, shrink tiers above their
        budget. At most once per ``defaults.AUTO_TICK`` unless ``force``; a cache failure is
        left to the fetch path, which reports it."""
        now = time.monotonic()
        if not force and now < self._next:
            return
        if self.backoff is not None and self.backoff.in_outage:
            return
        self._next = now + defaults.AUTO_TICK
        try:
            record = self._read()
            if record is None:
                record = self.start()
            jobs = self._jobs()
            measured = measured_inputs(self.counters.snapshot(), jobs, self.setting.workers)
            if self._due(record, jobs, measured):
                record = self._replan(record, measured, jobs)
            self._adopt(record)
            self._shrink()
        except _CACHE_ERRORS as err:
            log.debug("plan not checked: %s", err)

    def _due(self, record: PlanRecord, jobs: int, measured: dict[str, float]) -> bool:
        """Whether to look for a better split now: as soon as there are measurements while the
        plan is from defaults, or the live jobs differ from those it was planned for (a job
        joined or left: the split that pays depends most on how many jobs share the cache);
        else once the plan is ``defaults.AUTO_REPLAN_INTERVAL`` old."""
        planned_for = record.inputs.get("cluster.jobs")
        if planned_for is not None and jobs != planned_for:
            return True
        if not measured:
            return False
        if record.source == "defaults":
            return True
        return self.store.now_ms() - record.at_ms >= defaults.AUTO_REPLAN_INTERVAL * 1000

    def _replan(self, record: PlanRecord, measured: dict[str, float], jobs: int) -> PlanRecord:
        """The plan after looking at ``measured``: a new one when it gains enough (written
        under the lock), else ``record`` (marked measured when it was from defaults)."""
        spec = spec_of(self.setting, measured, jobs)
        best, current = plan_for(spec), predict(spec, record.split)
        gain = best.throughput / current.throughput - 1 if current.throughput > 0 else 0.0
        enough = gain > defaults.AUTO_REPLAN_GAIN or record.source == "defaults"
        change = best.split != record.split and enough
        if not change and (record.source != "defaults" or not measured):
            return record
        lock = self.store.keys.plan + ":lock"
        if not self.store.client.set(lock, self.job, nx=True, px=defaults.AUTO_LOCK_MS):
            return record  # another loader is changing it
        try:
            latest = self._read()
            if latest is not None and latest.version != record.version:
                return latest  # changed meanwhile: look again at the next tick
            if change:
                new = self._record(best, record.version + 1, spec, measured, record.split)
            else:  # the defaults' split stands; the record now says what it was measured from
                new = self._record(current, record.version, spec, measured, record.previous)
            self.store.client.set(self.store.keys.plan, new.to_json())
        finally:
            self.store.client.delete(lock)
        log.info("cache plan: %s", new.describe())
        return new

    def _adopt(self, record: PlanRecord) -> None:
        if self.record is not None and record == self.record:
            return
        changed = self.record is None or record.split != self.record.split
        self.record = record
        self.history.append(record)
        self.store.apply_split(self.split, self.setting.cache_bytes)
        if changed:
            info = {f"budget:{self.store.keys.form(t)}": self.store.capacity[t] for t in TIERS}
            self.store.client.hset(self.store.keys.info, mapping=info)

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
