"""Which process the code runs in, with respect to the one that made an object: asked here.

A job's code runs in several processes: the training process, DataLoader workers forked from
it or spawned afresh, and children forked for other work. What one process made (a socket, a
client's connections, a lock, random streams, calls waiting to go out) is not another's, and
a forked child inherits copies of all of it. Every such check goes through this module:

* :class:`Made` marks the process that made (or last took over) an object; ``inherited`` says
  the caller is a forked child holding its parent's copy, and :meth:`Made.take` makes it the
  caller's;
* :func:`spawning`: the process is pickling an object for a child it is starting (spawn or
  forkserver), so it may hand over the object's shared memory rather than a copy;
* :func:`after_fork` registers what a forked child must do first.

A DataLoader worker's role (training process or worker, which asks torch) is
``seneca.loader._workers``'s.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from multiprocessing import context

__all__ = ["Made", "after_fork", "current", "spawning"]


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
