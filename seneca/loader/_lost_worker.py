"""A DataLoader worker that dies while its batch crosses to the loader process.

A worker's batch arrives in two steps: a message on the result queue, then the memory of each
tensor in it, fetched from the worker over a connection of its own. A worker killed between the
two (a SIGKILL, the kernel's OOM killer) breaks that connection, and the loop gets an
``EOFError`` or ``ConnectionResetError`` from deep inside torch. DataLoader's SIGCHLD handler
then raises its own error naming the worker ("DataLoader worker (pid N) is killed by signal")
a moment later, in whatever the training script runs by then: its ``except`` block, its
checkpointing, the next epoch.

:func:`reported` gives the loop one error, the right one: on a broken connection it waits in the
loop's thread, where Python runs signal handlers, for DataLoader's handler to raise (at most
``defaults.WORKER_LOSS_WAIT_S``), and raises :class:`~seneca.errors.WorkerError` if none did (no
handler: a loop outside the main thread).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from seneca import defaults
from seneca_base.errors import SenecaError, WorkerError

__all__ = ["reported"]

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
