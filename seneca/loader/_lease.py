"""A job stays live while its loader exists: leases renewed by one thread per process.

A job's lease (``ods.defaults.JOB_LEASE``) is renewed by every call its batches make, but a
training step of several seconds, or a validation pass with another loader, makes no call for
longer than that. Other jobs would then stop counting it (and re-plan the split for fewer jobs)
while it still trains. So each loader that caches registers its job here when it is built;
one daemon thread of the loader process renews every registered job's lease
(``OdsStore.renew``) every third of the lease, until the loader is closed or collected. A job
that was never joined, or that left, is not renewed into being; a process that dies stops
renewing, and its jobs lapse as before.

The keeper also owns a job's leaving. :meth:`LeaseKeeper.close` leaves at once (a loader's
``close``). A collected loader's finalizer only posts its handle (:meth:`LeaseKeeper.collected`):
a finalizer runs inside whatever allocation set the garbage collector off, possibly in a thread
that holds this keeper's lock or a Redis connection pool's, so it must neither lock nor call
Redis. The keeper's thread leaves for it a moment later; at interpreter exit the keeper leaves
every job still registered to leave.

Forked DataLoader workers inherit the registry but not the thread: only the process that
registered a job renews it, or leaves it.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import queue
import threading
from dataclasses import dataclass
from typing import Any

from ods import defaults as ods_defaults
from seneca.loader._link import CACHE_FAILURES
from seneca_base.errors import SenecaError

__all__ = ["LeaseKeeper", "keeper"]

log = logging.getLogger("seneca")

_OUTAGES = (*CACHE_FAILURES, SenecaError)  # the fetches report outages


@dataclass(frozen=True)
class _Held:
    store: Any
    job: str
    #: leave the job when its loader is collected or the interpreter exits (a job whose name
    #: Seneca made; a named one may be resumed from a checkpoint)
    leave: bool


class LeaseKeeper:
    """Renews the leases of the jobs registered with :meth:`keep`, each at least every third
    of its store's lease, from a daemon thread started on first use in this process."""

    def __init__(self) -> None:
        self._jobs: dict[int, _Held] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        #: handles of collected loaders (from finalizers), and None to wake the thread;
        #: SimpleQueue.put is safe in finalizers: it neither blocks nor deadlocks
        self._inbox: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        #: leases renewed by this process's thread so far
        self.renewals = 0

    def keep(self, store: Any, job: str, leave: bool) -> int:
        """Renew ``job``'s lease on ``store`` from now on; returns the handle to :meth:`close`
        or :meth:`collected`. ``leave``: leave the job when collected or at exit."""
        with self._lock:
            handle = next(self._ids)
            self._jobs[handle] = _Held(store, job, leave)
            self._start()
        self._inbox.put(None)  # a new job, maybe with a shorter lease
        return handle

    def close(self, handle: int) -> None:
        """Stop renewing the job of ``handle`` and leave it now (a closed loader)."""
        with self._lock:
            held = self._jobs.pop(handle, None)
        if held is not None:
            _leave(held)

    def collected(self, handle: int) -> None:
        """The loader of ``handle`` was collected: its job stops being renewed, and leaves if
        it was kept to leave, from the keeper's thread. Safe in a finalizer."""
        self._inbox.put(handle)

    def held(self) -> list[str]:
        """The jobs renewed now (collected loaders' jobs gone first)."""
        self._take_collected()
        with self._lock:
            return [held.job for held in self._jobs.values()]

    def forked(self) -> None:
        """In a forked child: its parent renews the jobs it inherited, and no thread runs."""
        self._lock, self._inbox = threading.Lock(), queue.SimpleQueue()
        self._jobs, self._thread = {}, None

    def exiting(self) -> None:
        """At interpreter exit: leave the jobs kept to leave (collected or still referenced)."""
        self._take_collected()
        with self._lock:
            leaving = [held for held in self._jobs.values() if held.leave]
            self._jobs.clear()
        for held in leaving:
            _leave(held)

    def _start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._thread = threading.Thread(target=self._run, name="seneca-leases", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                leases = [held.store.lease_ms / 1000 for held in self._jobs.values()]
            default = ods_defaults.JOB_LEASE
            try:
                first = [self._inbox.get(timeout=min(leases, default=default) / 3)]
            except queue.Empty:
                first = []
            self._take_collected(first)
            with self._lock:
                jobs = list(self._jobs.values())
            for held in jobs:
                self._renew(held)

    def _take_collected(self, taken: list[int | None] | None = None) -> None:
        """Forget the jobs of collected loaders (``taken`` and those posted since), leaving
        those kept to leave."""
        leaving = []
        for handle in _drained(self._inbox, taken or []):
            with self._lock:
                held = self._jobs.pop(handle, None) if handle is not None else None
            if held is not None and held.leave:
                leaving.append(held)
        for held in leaving:
            _leave(held)

    def _renew(self, held: _Held) -> None:
        try:
            held.store.renew(held.job)
        except _OUTAGES as err:
            log.debug("lease of job %s not renewed: %s", held.job, err)
        except Exception:  # the thread renews every job of the process: it must not end
            log.exception("renewing the lease of job %s failed", held.job)
        else:
            self.renewals += 1


def _drained(inbox: queue.SimpleQueue[int | None], taken: list[int | None]) -> list[int | None]:
    while True:
        try:
            taken.append(inbox.get_nowait())
        except queue.Empty:
            return taken


def _leave(held: _Held) -> None:
    """Remove ``held``'s job from the cache: its state goes, other jobs stop counting it."""
    try:
        held.store.leave(held.job)
    except _OUTAGES as err:
        log.debug("job %s did not leave: %s", held.job, err)


_KEEPER = LeaseKeeper()
os.register_at_fork(after_in_child=_KEEPER.forked)
atexit.register(_KEEPER.exiting)


def keeper() -> LeaseKeeper:
    """This process's lease keeper."""
    return _KEEPER
