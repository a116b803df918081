"""A DataLoader worker's exit waits for the results it is still sending.

A worker started by ``spawn`` or ``forkserver`` ends by finalizing its interpreter (a forked
one leaves with ``os._exit`` instead). When an epoch is cut short, the loader tells its workers
to stop and does not wait for the results they are still sending: the thread that sends them
(the result queue's feeder, a daemon thread) may be inside torch's C++ code that moves a
tensor into shared memory when finalization begins. CPython ends such a thread with
``pthread_exit``; unwinding through that C++ code calls ``std::terminate``, and the worker
aborts ("terminate called without an active exception", SIGABRT) instead of exiting.

:func:`guard_exit` registers, once per process, an exit handler that waits (at most
``defaults.WORKER_EXIT_WAIT_S``) for the process's queue feeder threads before finalization
begins; exit handlers run while the interpreter is still whole. Once a feeder has sent what it
holds and sees its queue closed, it ends. One still blocked after the wait (a pipe nobody
reads) is in C code, which ends cleanly.
"""

from __future__ import annotations

import atexit
import threading
import time

from seneca import defaults
from seneca_base.process import Made

__all__ = ["guard_exit"]

#: the name ``multiprocessing.Queue`` gives its feeder threads
_FEEDER = "QueueFeederThread"
_guarded: Made | None = None  # the process whose exit waits


def _wait_for_feeders(timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for thread in threading.enumerate():
        if thread.name == _FEEDER and thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))


def guard_exit() -> None:
    """Make this process's exit wait for its queue feeder threads (once per process; see the
    module docstring). Called in DataLoader workers."""
    global _guarded
    if _guarded is None or _guarded.inherited:
        _guarded = Made()
        atexit.register(_wait_for_feeders, defaults.WORKER_EXIT_WAIT_S)
