"""Which process the code runs in: its role in a job, and whether it is the one that made an
object. Every such question is asked here, and the rest of the code asks this module.

A job's code runs in several processes: the training process, DataLoader workers forked from
it or spawned afresh, and children forked for other work.

**Roles.** :func:`role` says which kind of process the caller is, as a :class:`Role`:

* **training**: the user's process, which runs the training loop and the loader's batch path
  (the ODS decisions, the merge, the batch tail or the copy to the device);
* **worker**: a DataLoader worker process, which makes the batches it is handed (with
  tickets, in their slots) and sends them to the training process.

The code that behaves differently by role gets a :class:`Role` passed in: where rows are made
(shared memory in a worker, for the trip to the training process), when a batch's pins are
released (in a worker, in the batch's own round trip, as the worker may exit after it), and
which row of the shared counters a process writes. :func:`role` asks torch
(``torch.utils.data.get_worker_info``) when the process has imported it: a process that has
not cannot be a DataLoader worker, and this module imports no torch.

**What a process made.** What one process made (a socket, a client's connections, a lock,
random streams, calls waiting to go out) is not another's, and a forked child inherits copies
of all of it:

* :class:`Made` marks the process that made (or last took over) an object; ``inherited`` says
  the caller is a forked child holding its parent's copy, and :meth:`Made.take` makes it the
  caller's;
* :func:`spawning`: the process is pickling an object for a child it is starting (spawn or
  forkserver), so it may hand over the object's shared memory rather than a copy;
* :func:`after_fork` registers what a forked child must do first.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import context

__all__ = ["TRAINING", "Made", "Role", "after_fork", "current", "role", "spawning"]


def current() -> int:
    """This process's id."""
    return os.getpid()


class Made:
    """The process an object was made in, or last taken over by (:meth:`take`)."""

    __slots__ = ("pid",)

    def __init__(self) -> None:
        self.pid = os.getpid()

    @property
    def inherited(self) -> bool:
        """Whether the caller is not that process: a forked child holding its parent's copy."""
        return self.pid != os.getpid()

    def take(self) -> bool:
        """Make the object the caller's; whether it was another process's until now."""
        pid = os.getpid()
        if pid == self.pid:
            return False
        self.pid = pid
        return True


def spawning() -> bool:
    """Whether this process is pickling for a child it is starting (multiprocessing's spawn or
    forkserver): what it pickles goes to that child alone, so shared memory can be handed over
    as itself rather than copied."""
    return context.get_spawning_popen() is not None


def after_fork(action: Callable[[], object]) -> None:
    """Run ``action`` in every child forked from this process, first thing."""
    os.register_at_fork(after_in_child=action)


@dataclass(frozen=True)
class Role:
    """A process's role: ``kind`` ("training" or "worker") and, for a worker, its id."""

    kind: str
    index: int = 0

    @property
    def worker(self) -> bool:
        """Whether this is a DataLoader worker (whose results cross to the training process)."""
        return self.kind == "worker"

    @property
    def row(self) -> int:
        """This process's row of the shared counters: 0 for the training process, k + 1 for
        worker k."""
        return self.index + 1 if self.worker else 0


#: the training process
TRAINING = Role("training")


def role() -> Role:
    """The role of the calling process."""
    data = sys.modules.get("torch.utils.data")
    info = data.get_worker_info() if data is not None else None
    return TRAINING if info is None else Role("worker", info.id)
