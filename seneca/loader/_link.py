"""A loader's link to its cache: the store it reads as a job, and what a failure does.

An unreachable cache never stops training: a call that failed or was abandoned at its deadline
makes the whole job read from storage until a retry finds the cache answering again
(``seneca_base.backoff``: one warning per outage); with ``strict`` a failure is raised instead.
The link also follows the shared plan (``split="auto"``): each fetch reads the plan, and the
link budgets the store's tiers by it.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import redis

from ods.decision import Pick
from ods.store import OdsStore
from seneca import defaults
from seneca._autoplan.record import PlanRecord
from seneca.loader._stats import Counters, process_row
from seneca_base.backoff import Backoff
from seneca_base.errors import CacheError

__all__ = ["CACHE_FAILURES", "CacheLink"]

log = logging.getLogger("seneca")

#: what a call to the cache raises when the cache fails (read around unless ``strict``)
CACHE_FAILURES = (redis.RedisError, OSError, CacheError)


class CacheLink:
    """The cache a dataset is read through, as one job (no cache until :meth:`attach`)."""

    def __init__(self, counters: Counters) -> None:
        self.counters = counters
        #: the dataset's cache (None: no cache) and the job this loader reads it as
        self.store: OdsStore | None = None
        self.job: str | None = None
        #: the cache's URL as logs show it
        self.name = ""
        #: the job's back-off of the cache (None: no cache)
        self.backoff: Backoff | None = None
        #: a cache failure is raised (CacheError) instead of read around
        self.strict = False
        #: with ``split="auto"``: the cache size the shared plan's split applies to (None: a
        #: fixed split)
        self.plan_size: int | None = None
        self._plan_raw: bytes | None = None

    def attach(
        self,
        store: OdsStore,
        job: str,
        name: str,
        *,
        unreachable: bool = False,
        strict: bool = False,
        plan_size: int | None = None,
    ) -> None:
        """Read and fill ``store`` as ``job``; ``name``: the cache's URL as logs show it;
        ``unreachable``: it did not answer when the loader was made (reported then: the job
        starts backing off without another warning); ``plan_size``: see :attr:`plan_size`."""
        self.store, self.job, self.name = store, job, name
        self.strict, self.plan_size = strict, plan_size
        #: shared with the sampler and the workers: the job backs off the cache as one
        self.backoff = Backoff(name, defaults.CACHE_RETRY_FIRST, defaults.CACHE_RETRY_CAP)
        if unreachable:
            self.backoff.failed(said=True)

    def down(self) -> bool:
        """Whether the job backs off the cache now, or there is none: read from storage
        without trying it."""
        return self.store is None or self.backoff is None or self.backoff.down()

    def failed(self, err: Exception, count: Counter) -> None:
        """A call failed with ``err``: raised with ``strict``, else counted in ``count`` and
        the job backs off (warned once per outage, for the whole job)."""
        if self.strict:
            raise CacheError(f"cache {self.name} failed ({type(err).__name__}: {err})") from err
        count["cache_errors"] += 1
        if self.backoff is not None:
            self.backoff.failed(err)

    def answered(self) -> None:
        """A call to the cache succeeded: any outage of the job ends (logged once)."""
        if self.backoff is not None:
            self.backoff.succeeded()

    def refused(self, used: dict[str, int], values: int) -> None:
        """The server refused to store ``values`` values the tiers' budgets had room for: its
        memory filled before them (other data, reply buffers). This process's budgets shrink
        by a tenth below what the tiers hold (``used``), or below the budgets when the tiers
        hold less than half of them; the job warns once."""
        store = self.store
        if store is None:
            return
        total, held = store.budget_total, sum(used.values())
        fit = defaults.REFUSED_SHRINK * (min(total, held) if 2 * held > total else total)
        scale = fit / total if total else 1.0
        store.scale_budgets(scale)
        if self.plan_size:
            self.plan_size = int(self.plan_size * scale)
        if self.counters.once("cache-refused"):
            log.warning(
                "cache %s refused to store %d values (its memory is full below the tiers' "
                "budgets); counted as cache errors, the budgets shrink to %s bytes",
                self.name,
                values,
                f"{int(fit):,}",
            )

    def adopt_plan(self, raw: Any) -> None:
        """Budget the tiers by the shared plan ``raw`` (a ``seneca._autoplan`` record, as read
        from the cache; anything else leaves the budgets as they are)."""
        if not isinstance(raw, bytes | bytearray) or raw == self._plan_raw or not self.plan_size:
            return
        self._plan_raw = bytes(raw)
        record = PlanRecord.from_json(self._plan_raw)
        if record is not None and self.store is not None:
            self.store.apply_split(record.as_split(), self.plan_size)

    def lookup(self, indices: list[int]) -> list[Pick]:
        """Where to read each sample of a batch in the loader's own order (storage for every
        sample while the cache is down)."""
        if not self.down():
            try:
                d = self.store.lookup(self.job, indices)
            except CACHE_FAILURES as err:
                count: Counter = Counter()
                self.failed(err, count)
                self.counters.add(process_row(), count)
            else:
                self.answered()
                return [Pick(i, t, d.pin_bucket) for i, t in zip(indices, d.tiers, strict=True)]
        return [Pick(i, None, 0) for i in indices]
