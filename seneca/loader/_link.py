"""A loader's link to its cache: the store it reads as a job, and what a failure does.

An unreachable cache never stops training: a call that failed or was abandoned at its deadline
makes the whole job read from storage until a retry finds the cache answering again
(``seneca_base.backoff``: one warning per outage); with ``strict`` a failure is raised instead.
The link also follows the budgets in force (``seneca.loader._budgets``): each fetch reads
them, and the store's tiers are budgeted by them.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from typing import Any

from ods.decision import Pick
from ods.routing import CACHE_FAILURES
from ods.store_api import Store
from seneca import defaults
from seneca.loader._stats import Counters
from seneca_base.backoff import Backoff
from seneca_base.errors import CacheError
from seneca_base.process import TRAINING, Role

__all__ = ["CacheLink", "job_backoff"]

log = logging.getLogger("seneca")


def job_backoff(name: str, unreachable: bool = False) -> Backoff:
    """A job's back-off of the cache called ``name`` (its URL as logs show it);
    ``unreachable``: it did not answer when the loader was made (reported then: the job starts
    backing off without another warning)."""
    backoff = Backoff(name, defaults.CACHE_RETRY_FIRST, defaults.CACHE_RETRY_CAP)
    if unreachable:
        backoff.failed(said=True)
    return backoff


class CacheLink:
    """The cache a dataset is read through, as one job (no cache until :meth:`attach`)."""

    def __init__(self, counters: Counters) -> None:
        self.counters = counters
        #: the dataset's cache (None: no cache) and the job this loader reads it as
        self.store: Store | None = None
        self.job: str | None = None
        #: the cache's URL as logs show it
        self.name = ""
        #: the job's back-off of the cache (None: no cache)
        self.backoff: Backoff | None = None
        #: a cache failure is raised (CacheError) instead of read around
        self.strict = False
        #: the job's processes that offer values to the cache at once
        self.writers = 1

    def attach(
        self,
        store: Store,
        job: str,
        backoff: Backoff,
        *,
        strict: bool = False,
        writers: int = 1,
    ) -> None:
        """Read and fill ``store`` as ``job``, backing off it with ``backoff`` (the job's, made
        by :func:`job_backoff` and shared with its sampler and workers: the job backs off the
        cache as one); ``writers``: the job's processes that offer values at once (its
        workers, else the loader process)."""
        self.store, self.job, self.name = store, job, backoff.cache
        self.strict = strict
        self.backoff = backoff
        self.writers = max(1, writers)

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
        memory filled before them (data written since the budgets were set, reply buffers).
        The budgets shrink by a tenth below what the tiers hold (``used``), or below the
        budgets when the tiers hold less than half of them, for every process of the dataset
        until the loader's next look at its share (``seneca.loader._budgets``); the job warns
        once."""
        store = self.store
        if store is None:
            return
        total, held = store.budget_total, sum(used.values())
        fit = defaults.REFUSED_SHRINK * (min(total, held) if 2 * held > total else total)
        with contextlib.suppress(*CACHE_FAILURES):
            store.fit_budgets(self.job, int(fit))
        if self.counters.once("cache-refused"):
            log.warning(
                "cache %s refused to store %d values (its memory is full below the tiers' "
                "budgets); counted as cache errors, the budgets shrink to %s bytes",
                self.name,
                values,
                f"{int(fit):,}",
            )

    def adopt_budgets(self, reply: Any) -> None:
        """Budget the tiers as the budgets in force say (``reply``: of
        ``OdsStore.budgets_command``, as read with a batch's values)."""
        if self.store is not None and not isinstance(reply, Exception):
            self.store.adopt_budgets(reply)

    def lookup(self, indices: list[int], role: Role = TRAINING) -> list[Pick]:
        """Where to read each sample of a batch in the loader's own order (storage for every
        sample while the cache is down), for a process of ``role``."""
        if not self.down():
            try:
                d = self.store.lookup(self.job, indices)
            except CACHE_FAILURES as err:
                count: Counter = Counter()
                self.failed(err, count)
                self.counters.add(role.row, count)
            else:
                self.answered()
                return d.picks()
        return [Pick(i, None, 0) for i in indices]
