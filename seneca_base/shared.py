"""Memory shared by the processes of one job: the one owner of such memory.

A job's processes (its training process and its DataLoader workers, whatever their start
method) share small pieces of state: the loader's counters, the cache's back-off. Each is a
:class:`SharedFile`: ``size`` bytes of a file under ``/dev/shm`` (else the temporary
directory), mapped by every process that holds a copy of the object.

* The file has **no name**: it is removed as soon as it is made, so nothing is left behind
  however the job's processes end (killed ones included). The memory lives while a process
  holds it open.
* A forked child inherits the object (its descriptor and mapping). A copy pickled into a
  process being started (a spawned or forkserver worker) is handed the descriptor by
  ``multiprocessing`` and maps the same memory. A copy pickled at any other time is a copy of
  the bytes, shared with no one.
* :meth:`~SharedFile.locked` holds the memory exclusively for a change that reads and writes:
  a POSIX record lock (``lockf``: owned by the process, so a forked child's is its own) and a
  lock between the process's threads. Plain reads and writes of the mapping take no lock.
* :meth:`~SharedFile.once` answers True for the first process of the job to ask for a key
  (a small table of keys before the bytes).

Larger memory a process hands to others itself is a :class:`HandedMemory`, also without a
name. The batch slots the training process and its workers make batches in are one
(``seneca.loader._slots``), handed to a worker by the desk over a Unix socket.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import mmap
import os
import struct
import tempfile
import threading
import weakref
from collections.abc import Iterator
from multiprocessing import reduction
from typing import Any

from seneca_base.process import Made, spawning

__all__ = ["HandedMemory", "SharedFile"]


def _folder() -> str | None:
    """/dev/shm where it is writable (memory, never written back to a disk), else the
    temporary directory."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def _made(name: str, size: int, reserve: bool) -> int:
    """A new file of ``size`` bytes with no name: its open descriptor."""
    fd, path = tempfile.mkstemp(prefix=f"seneca-{name}-", dir=_folder())
    os.unlink(path)
    try:
        if reserve:  # the memory taken now: an OSError here, not a SIGBUS at a write later
            os.posix_fallocate(fd, 0, size)
        else:
            os.ftruncate(fd, size)
    except OSError:
        os.close(fd)
        raise
    return fd


class HandedMemory:
    """``size`` bytes with no name: a file removed as soon as it is made, so nothing is left
    behind however its processes end (a killed one included). Another process gets it by being
    handed :attr:`fd` (``socket.send_fds``) and maps it with :meth:`from_fd`; ``reserve`` as
    :class:`SharedFile`'s."""

    def __init__(self, name: str, size: int, reserve: bool = False) -> None:
        self._take(_made(name, size, reserve), size)

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


#: the table of :meth:`SharedFile.once`'s keys before a shared file's bytes: 8-byte digests
_KEYS = 32
_KEY = struct.Struct("<Q")
_KEYS_BYTES = _KEYS * _KEY.size


class SharedFile:
    """``size`` bytes shared by the processes of a job (see the module docstring); ``name``
    prefixes the file's name while it is made (``seneca-<name>-``). ``reserve``: take the
    memory now (an OSError when there is not enough of it), not at the first write of each
    page. ``data``: what a copy starts with (another's keys and bytes)."""

    def __init__(self, name: str, size: int, reserve: bool = False, data: bytes = b"") -> None:
        self._hold(HandedMemory(name, _KEYS_BYTES + size, reserve), size)
        self._map[: len(data)] = data  # a copy's: the keys' table, then the bytes

    def _hold(self, held: HandedMemory, size: int) -> None:
        self._held, self._fd, self._map, self.size = held, held.fd, held.memory, size
        #: the bytes every process that holds the memory sees
        self.memory = memoryview(self._map)[_KEYS_BYTES:]
        self._threads, self._made = threading.Lock(), Made()

    @classmethod
    def _handed(cls, fd: Any, size: int) -> SharedFile:
        shared = cls.__new__(cls)
        shared._hold(HandedMemory.from_fd(fd.detach(), _KEYS_BYTES + size), size)
        return shared

    def __reduce__(self) -> tuple[Any, ...]:
        if spawning():  # a process being started: the same memory
            return SharedFile._handed, (reduction.DupFd(self._fd), self.size)
        return SharedFile, ("copy", self.size, False, bytes(self._map))

    @contextlib.contextmanager
    def locked(self) -> Iterator[memoryview]:
        """The bytes, held exclusively for a change that reads and writes."""
        if self._made.take():  # forked: the thread lock may have been held at the fork
            self._threads = threading.Lock()
        with self._threads:
            fcntl.lockf(self._fd, fcntl.LOCK_EX)
            try:
                yield self.memory
            finally:
                fcntl.lockf(self._fd, fcntl.LOCK_UN)

    def once(self, key: str) -> bool:
        """True for the first process of the job to ask for ``key``, False for every later
        one (and for every key past the table's 32)."""
        digest = _KEY.unpack(hashlib.blake2b(key.encode(), digest_size=8).digest())[0] or 1
        with self.locked():
            for k in range(_KEYS):
                held = _KEY.unpack_from(self._map, k * _KEY.size)[0]
                if held == digest:
                    return False
                if held == 0:
                    _KEY.pack_into(self._map, k * _KEY.size, digest)
                    return True
        return False
