"""A job stays live while its loader exists: leases renewed by one thread per process.

A job's lease (``ods.defaults.JOB_LEASE``) is renewed by every call its batches make, but a
training step of several seconds, or a validation pass with another loader, makes no call for
longer than that. Other jobs would then stop counting it (and re-plan the split for fewer jobs)
while it still trains. So each loader that caches registers its job here when it is built;
one daemon thread of the loader process renews every registered job's lease
(``OdsStore.renew``) every third of the lease, until the loader is closed or collected. A job
that was never joined, or that left, is not renewed into being; a process that dies stops
renewing, and its jobs lapse as before.

Forked DataLoader workers inherit the registry but not the thread: only the process that
registered a job renews it.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from typing import Any

import redis

from ods import defaults as ods_defaults
from seneca_base.errors import SenecaError

__all__ = ["LeaseKeeper", "keeper"]

log = logging.getLogger("seneca")


class LeaseKeeper:
    """Renews the leases of the jobs registered with :meth:`keep`, each at least every third
    of its store's lease, from a daemon thread started on first use in this process."""

    def __init__(self) -> None:
        self._jobs: dict[int, tuple[Any, str]] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()  # set by keep: a new job, maybe with a shorter lease
        #: leases renewed by this process's thread so far
        self.renewals = 0

    def keep(self, store: Any, job: str) -> int:
        """Renew ``job``'s lease on ``store`` from now on; returns the handle to :meth:`drop`."""
        with self._lock:
            handle = next(self._ids)
            self._jobs[handle] = (store, job)
            self._start()
        self._wake.set()
        return handle

    def drop(self, handle: int) -> None:
        """Stop renewing the job of ``handle`` (closed or collected loader)."""
        with self._lock:
            self._jobs.pop(handle, None)

    def held(self) -> list[str]:
        """The jobs renewed now."""
        with self._lock:
            return [job for _, job in self._jobs.values()]

    def forked(self) -> None:
        """In a forked child: its parent renews the jobs it inherited, and no thread runs."""
        self._lock, self._wake = threading.Lock(), threading.Event()
        self._jobs, self._thread = {}, None

    def _start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._thread = threading.Thread(target=self._run, name="seneca-leases", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                jobs = list(self._jobs.values())
            leases = [store.lease_ms / 1000 for store, _ in jobs]
            self._wake.wait(min(leases, default=ods_defaults.JOB_LEASE) / 3)
            self._wake.clear()
            with self._lock:
                jobs = list(self._jobs.values())
            for store, job in jobs:
                self._renew(store, job)

    def _renew(self, store: Any, job: str) -> None:
        try:
            store.renew(job)
        except (redis.RedisError, OSError, SenecaError) as err:  # the fetches report outages
            log.debug("lease of job %s not renewed: %s", job, err)
        else:
            self.renewals += 1


_KEEPER = LeaseKeeper()
os.register_at_fork(after_in_child=_KEEPER.forked)


def keeper() -> LeaseKeeper:
    """This process's lease keeper."""
    return _KEEPER
