"""DataLoader worker processes as the loader handles them: how a worker exits, and a worker lost
while its batch crosses to the training process. Which role a process has (the training process
or worker k) is ``seneca_base.process``'s to say.

**A worker's exit** waits for the results it is still sending (:func:`guard_exit`). A worker
started by ``spawn`` or ``forkserver`` ends by finalizing its interpreter (a forked one leaves
with ``os._exit`` instead). When an epoch is cut short, the loader tells its workers to stop
and does not wait for the results they are still sending: the thread that sends them (the
result queue's feeder, a daemon thread) may be inside torch's C++ code that moves a tensor into
shared memory when finalization begins. CPython ends such a thread with ``pthread_exit``;
unwinding through that C++ code calls ``std::terminate``, and the worker aborts ("terminate
called without an active exception", SIGABRT) instead of exiting. :func:`guard_exit` registers,
once per process, an exit handler that waits (at most ``defaults.WORKER_EXIT_WAIT_S``) for the
process's queue feeder threads before finalization begins; exit handlers run while the
interpreter is still whole. Once a feeder has sent what it holds and sees its queue closed, it
ends. One still blocked after the wait (a pipe nobody reads) is in C code, which ends cleanly.

**A worker lost** mid-hand-over (:func:`reported`). A worker's batch arrives in two steps: a
message on the result queue, then the memory of each tensor in it, fetched from the worker over
a connection of its own. A worker killed between the two (a SIGKILL, the kernel's OOM killer)
breaks that connection, and the loop gets an ``EOFError`` or ``ConnectionResetError`` from deep
inside torch. DataLoader's SIGCHLD handler then raises its own error naming the worker
("DataLoader worker (pid N) is killed by signal") a moment later, in whatever the training
script runs by then: its ``except`` block, its checkpointing, the next epoch. :func:`reported`
gives the loop one error, the right one: on a broken connection it waits in the loop's thread,
where Python runs signal handlers, for DataLoader's handler to raise (at most
``defaults.WORKER_LOSS_WAIT_S``), and raises :class:`~seneca.errors.WorkerError` if none did
(no handler: a loop outside the main thread).
"""

from __future__ import annotations

import atexit
import threading
import time
from collections.abc import Iterator
from typing import Any

from seneca import defaults
from seneca_base.errors import SenecaError, WorkerError
from seneca_base.process import Made

__all__ = ["guard_exit", "reported"]


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


#: what a connection to a worker that died raises (a worker's own errors re-raised in the loop
#: are told apart by being SenecaErrors, or by no worker dying within the wait)
_BROKEN = (EOFError, ConnectionError)


def reported(it: Iterator[Any], wait: float = defaults.WORKER_LOSS_WAIT_S) -> Iterator[Any]:
    """The batches of ``it``; a broken connection to a worker raised as the worker's death."""
    try:
        yield from it
    except _BROKEN as err:
        if isinstance(err, SenecaError):
            raise
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:  # DataLoader's SIGCHLD handler raises in here
            time.sleep(defaults.WORKER_LOSS_POLL_S)
        raise WorkerError(
            f"a DataLoader worker's connection broke while its batch was handed over "
            f"({type(err).__name__}: {err or 'no message'}); the worker most likely died "
            "(killed, or out of memory)"
        ) from err
