"""A job stays live while its loader exists: leases renewed by one thread per process.

A job's lease (``ods.defaults.JOB_LEASE``) is renewed by every call its batches make, but a
training step of several seconds, or a validation pass with another loader, makes no call for
longer than that. Other jobs would then stop counting it (and re-plan the split for fewer jobs)
while it still trains. So each loader that caches registers its job here when it is built;
one daemon thread of the loader process renews every registered job's lease
(``OdsStore.renew``) every third of the lease, until the loader is closed or collected. A loader
registers when its first epoch starts, its job joined: a job that was never joined, or that left,
is not renewed into being, and a run under a name an earlier run used does not renew that run's
lease before it has looked at it (``OdsBatchSampler`` refuses a name whose lease another run
renews). A process that dies stops renewing, and its jobs lapse as before.

The keeper also owns a job's leaving. :meth:`LeaseKeeper.close` leaves at once (a loader's
``close``). A collected loader's finalizer only posts its handle (:meth:`LeaseKeeper.collected`):
a finalizer runs inside whatever allocation set the garbage collector off, possibly in a thread
that holds this keeper's lock or a Redis connection pool's, so it must neither lock nor call
Redis. The keeper's thread leaves for it a moment later; at interpreter exit the keeper leaves
every job still registered to leave. A job the user named is not left (a run may continue it from
a checkpoint) but its lease ends then (``OdsStore.lapse``), unless another loader of this
process still holds the name: other jobs stop counting it, and the next run under the name
starts without waiting for the lease.

Forked DataLoader workers inherit the registry but not the thread: only the process that
registered a job renews it, or leaves it.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import logging
import queue
import threading
from dataclasses import dataclass
from typing import Any

import redis

from ods import defaults as ods_defaults
from ods.routing import CACHE_FAILURES
from seneca_base.errors import SenecaError
from seneca_base.process import after_fork

__all__ = ["JobLease", "LeaseKeeper", "keeper"]

log = logging.getLogger("seneca")

_OUTAGES = (*CACHE_FAILURES, SenecaError)  # the fetches report outages


@dataclass(frozen=True)
class _Held:
    store: Any
    job: str
    #: leave the job when its loader is collected or the interpreter exits (a job whose name
    #: Seneca made; a named one may be resumed from a checkpoint, and its lease only ends)
    leave: bool

    def holds(self, store: Any, job: str) -> bool:
        """Whether this is ``job`` of ``store``'s dataset (whichever loader's store it is)."""
        return self.job == job and self.store.keys.jobs == store.keys.jobs


class LeaseKeeper:
    """Renews the leases of the jobs registered with :meth:`keep`, each at least every third
    of its store's lease, from a daemon thread started on first use in this process."""

    def __init__(self) -> None:
        self._jobs: dict[int, _Held] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        #: held around each renewal and each ending, so that a renewal begun before a loader was
        #: collected never lands after its lease ended (taken before ``_lock``, never inside it)
        self._ops = threading.Lock()
        self._thread: threading.Thread | None = None
        #: handles of collected loaders (from finalizers), taken only under ``_ops``, so that
        #: whoever asks what is held after a collection finds it gone; and a token per event
        #: that wakes the thread. SimpleQueue.put is safe in finalizers: it neither blocks nor
        #: deadlocks
        self._collected: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._wake: queue.SimpleQueue[None] = queue.SimpleQueue()
        #: leases renewed by this process's thread so far
        self.renewals = 0
        #: a renewal was refused by a server out of memory (warned once)
        self.refused = False

    def keep(self, store: Any, job: str, leave: bool) -> int:
        """Renew ``job``'s lease on ``store`` from now on; returns the handle to :meth:`close`
        or :meth:`collected`. ``leave``: leave the job when collected or at exit."""
        with self._lock:
            handle = next(self._ids)
            self._jobs[handle] = _Held(store, job, leave)
            self._start()
        self._wake.put(None)  # a new job, maybe with a shorter lease
        return handle

    def close(self, handle: int) -> None:
        """Stop renewing the job of ``handle`` and leave it now (a closed loader)."""
        with self._ops:
            with self._lock:
                held = self._jobs.pop(handle, None)
            if held is not None:
                _leave(held)

    def collected(self, handle: int) -> None:
        """The loader of ``handle`` was collected: its job stops being renewed, and leaves if
        it was kept to leave, from the keeper's thread. Safe in a finalizer."""
        self._collected.put(handle)
        self._wake.put(None)

    def holds(self, store: Any, job: str) -> bool:
        """Whether a loader of this process holds ``job`` of ``store``'s dataset."""
        self._take_collected()
        with self._lock:
            return any(held.holds(store, job) for held in self._jobs.values())

    def held(self) -> list[str]:
        """The jobs renewed now (collected loaders' jobs gone first)."""
        self._take_collected()
        with self._lock:
            return [held.job for held in self._jobs.values()]

    def forked(self) -> None:
        """In a forked child: its parent renews the jobs it inherited, and no thread runs."""
        self._lock, self._ops = threading.Lock(), threading.Lock()
        self._collected, self._wake = queue.SimpleQueue(), queue.SimpleQueue()
        self._jobs, self._thread = {}, None

    def exiting(self) -> None:
        """At interpreter exit: leave the jobs kept to leave, and end the leases of the others
        (collected or still referenced)."""
        self._take_collected()
        with self._ops:
            with self._lock:
                ending = list(self._jobs.values())
                self._jobs.clear()
            for held in ending:
                _end(held, [])

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
            with contextlib.suppress(queue.Empty):  # woken early, or the time to renew
                self._wake.get(timeout=min(leases, default=default) / 3)
            self._take_collected()
            with self._lock:
                handles = list(self._jobs)
            for handle in handles:
                with self._ops:
                    with self._lock:
                        held = self._jobs.get(handle)
                    if held is not None:  # not collected meanwhile
                        self._renew(held)

    def _take_collected(self) -> None:
        """Forget the jobs of the loaders collected so far, leaving those kept to leave and
        ending the others' leases."""
        with self._ops:
            ending = []
            for handle in _drained(self._collected):
                with self._lock:
                    held = self._jobs.pop(handle, None)
                if held is not None:
                    ending.append(held)
            with self._lock:
                still = list(self._jobs.values())
            for held in ending:
                _end(held, still)

    def _renew(self, held: _Held) -> None:
        try:
            held.store.renew(held.job)
        except redis.OutOfMemoryError as err:  # the server is full: a refusal, not an outage
            if not self.refused:
                self.refused = True
                log.warning("lease of job %s not renewed: the cache refused it (%s)", held.job, err)
        except _OUTAGES as err:
            log.debug("lease of job %s not renewed: %s", held.job, err)
        except Exception:  # the thread renews every job of the process: it must not end
            log.exception("renewing the lease of job %s failed", held.job)
        else:
            self.renewals += 1


def _drained(inbox: queue.SimpleQueue[int]) -> list[int]:
    taken = []
    while True:
        try:
            taken.append(inbox.get_nowait())
        except queue.Empty:
            return taken


def _end(held: _Held, still: list[_Held]) -> None:
    """A loader of ``held`` is gone: its job leaves if kept to leave, else its lease ends
    unless another loader of the process (``still``) holds the job."""
    if held.leave:
        _leave(held)
    elif not any(other.holds(held.store, held.job) for other in still):
        try:
            held.store.lapse(held.job)
        except _OUTAGES as err:
            log.debug("the lease of job %s did not end: %s", held.job, err)


def _leave(held: _Held) -> None:
    """Remove ``held``'s job from the cache: its state goes, other jobs stop counting it."""
    try:
        held.store.leave(held.job)
    except _OUTAGES as err:
        log.debug("job %s did not leave: %s", held.job, err)


class JobLease:
    """One loader's job on ``store``, kept live by this process's keeper from :meth:`start`
    (its first epoch's start, the job joined) until :meth:`close` or :meth:`collected`.
    ``leave``: the job leaves then (a name Seneca made), else its lease only ends."""

    def __init__(self, store: Any, job: str, leave: bool) -> None:
        self.store, self.job, self.leave = store, job, leave
        self._handle: int | None = None

    def start(self) -> None:
        """Keep the job live from now on (once)."""
        if self._handle is None:
            self._handle = keeper().keep(self.store, self.job, self.leave)

    def close(self) -> None:
        """The loader is closed: leave the job now."""
        if self._handle is not None:
            keeper().close(self._handle)

    def collected(self) -> None:
        """The loader was collected (a finalizer): see :meth:`LeaseKeeper.collected`."""
        if self._handle is not None:
            keeper().collected(self._handle)


_KEEPER = LeaseKeeper()
after_fork(_KEEPER.forked)
atexit.register(_KEEPER.exiting)


def keeper() -> LeaseKeeper:
    """This process's lease keeper."""
    return _KEEPER
