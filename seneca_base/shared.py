"""Memory shared by the processes of one job: the one owner of such files.

A job's processes (its training process and its DataLoader workers, whatever their start
method) share small pieces of state: the loader's counters, the cache's back-off. Each is a
:class:`SharedFile`: a file under ``/dev/shm`` (else the temporary directory) of a fixed size,
mapped by every process that holds a copy of the object.

* The process that makes it owns it: the file (and its :meth:`~SharedFile.once` markers) is
  removed when the owner's object is collected or the process exits; a forked child inherits
  the object but not the ownership.
* A copy pickled into another process (a spawned worker) maps the same file.
* :meth:`~SharedFile.locked` holds an exclusive ``flock`` for a change that reads and writes
  (each process opens a descriptor of its own, so a lock is never shared by a fork);
  plain reads and writes of the mapping take no lock.

Larger memory a process hands to others itself is a :class:`HandedMemory`: no name, so nothing
is left behind by a process that is killed. The batch slots the training process and its
workers make batches in are one (``seneca.loader._slots``), handed to a worker by the desk.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import mmap
import os
import tempfile
import weakref
from collections.abc import Iterator
from typing import Any

__all__ = ["HandedMemory", "SharedFile"]


def _folder() -> str | None:
    """/dev/shm where it is writable (memory, never written back to a disk), else the
    temporary directory."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def _remove(path: str, owner: int) -> None:
    """Delete the file and its markers, in the process that made it only."""
    if os.getpid() == owner:
        for name in [path, *glob.glob(glob.escape(path) + ".*")]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)


def _made(name: str, size: int, reserve: bool) -> tuple[int, str]:
    """A new file of ``size`` bytes: (its open descriptor, its path)."""
    fd, path = tempfile.mkstemp(prefix=f"seneca-{name}-", dir=_folder())
    try:
        if reserve:  # the memory taken now: an OSError here, not a SIGBUS at a write later
            os.posix_fallocate(fd, 0, size)
        else:
            os.ftruncate(fd, size)
    except OSError:
        os.close(fd)
        os.unlink(path)
        raise
    return fd, path


class HandedMemory:
    """``size`` bytes with no name: a file removed as soon as it is made, so nothing is left
    behind however its processes end (a killed one included). Another process gets it by being
    handed :attr:`fd` (``socket.send_fds``) and maps it with :meth:`from_fd`; ``reserve`` as
    :class:`SharedFile`'s."""

    def __init__(self, name: str, size: int, reserve: bool = False) -> None:
        fd, path = _made(name, size, reserve)
        os.unlink(path)
        self._take(fd, size)

    @classmethod
    def from_fd(cls, fd: int, size: int) -> HandedMemory:
        """The memory of ``fd`` (handed over by another process; this object closes it)."""
        memory = cls.__new__(cls)
        memory._take(fd, size)
        return memory

    def _take(self, fd: int, size: int) -> None:
        self.fd, self.size = fd, size
        #: the bytes every process that holds the memory sees
        self.memory = mmap.mmap(fd, size)
        weakref.finalize(self, os.close, fd)


class SharedFile:
    """``size`` bytes shared by the processes of a job (see the module docstring); ``name``
    prefixes the file's name (``seneca-<name>-``). ``reserve``: take the memory now (an
    OSError when there is not enough of it), not at the first write of each page."""

    def __init__(self, name: str, size: int, reserve: bool = False) -> None:
        fd, self.path = _made(name, size, reserve)
        os.close(fd)
        self.size = size
        self._owner: Any = weakref.finalize(self, _remove, self.path, os.getpid())
        self._map()

    def _map(self) -> None:
        self._fd = os.open(self.path, os.O_RDWR)
        self.memory = mmap.mmap(self._fd, self.size)  # the bytes every process sees
        self._pid = os.getpid()

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path, self.size, self._owner = state["path"], state["size"], None
        self._map()

    @contextlib.contextmanager
    def locked(self) -> Iterator[memoryview | mmap.mmap]:
        """The mapping, under the file's exclusive lock, for a change that reads and writes."""
        if self._pid != os.getpid():  # forked: a lock of its own needs a descriptor of its own
            self._map()
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield self.memory
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def once(self, key: str) -> bool:
        """True for the first process of the job to ask for ``key``, False for every later
        one (a marker file beside the file, removed with it)."""
        try:
            os.close(os.open(f"{self.path}.{key}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            return False
        return True
