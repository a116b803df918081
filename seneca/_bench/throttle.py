"""A storage-bandwidth throttle shared by processes: emulates remote storage in benchmarks.

Reads reserve time on one shared clock (``bytes / rate`` each), so all the processes that hold
the same :class:`Throttle` (the benchmark's jobs, each a fresh interpreter, and the DataLoader
workers it is pickled into) together read at most ``rate`` bytes per second. The clock is one
number in a small file (in ``/dev/shm`` where there is one), read and written under an
exclusive ``flock``; ``time.monotonic()`` is the same clock in every process of the machine.
This is an emulation for ``seneca bench --storage-mbps``, not a model of any storage system.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import tempfile
import time
import weakref
from typing import Any

from seneca_base.errors import ConfigError
from seneca_base.process import Made

__all__ = ["Throttle"]

_CLOCK = struct.Struct("d")


def _remove(path: str, owner: Made) -> None:
    """Remove the clock's file, in the process that made it only (a forked process inherits
    the finalizer)."""
    if not owner.inherited:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


class Throttle:
    """At most ``rate`` bytes per second over all processes sharing this object (or its
    :attr:`path`: ``Throttle(rate, path)`` in another process joins it). The process that
    made the file removes it when its object is collected."""

    def __init__(self, rate: float, path: str | None = None) -> None:
        if not rate > 0:
            raise ConfigError(f"--storage-mbps: must be positive, got {rate!r}")
        self.rate = float(rate)
        if path is None:
            where = "/dev/shm" if os.path.isdir("/dev/shm") else None
            fd, path = tempfile.mkstemp(prefix="seneca-throttle-", dir=where)
            os.write(fd, _CLOCK.pack(0.0))  # when the link is free again (monotonic seconds)
            os.close(fd)
            weakref.finalize(self, _remove, path, Made())
        self.path = path
        self._fd: int | None = None
        self._made: Made | None = None  # the process whose descriptor _fd is

    def __getstate__(self) -> dict[str, Any]:  # the file, not this process's descriptor
        return {"rate": self.rate, "path": self.path, "_fd": None, "_made": None}

    def _file(self) -> int:
        if self._fd is None or self._made is None or self._made.inherited:
            self._fd, self._made = os.open(self.path, os.O_RDWR), Made()
        return self._fd

    def reserve(self, nbytes: int, now: float | None = None) -> float:
        """Book ``nbytes`` on the shared link at ``now`` (default: ``time.monotonic()``); returns
        when (on that clock) the transfer is done. A link left idle banks no credit."""
        fd = self._file()
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            (free,) = _CLOCK.unpack(os.pread(fd, _CLOCK.size, 0))
            start = max(time.monotonic() if now is None else now, free)
            done = start + nbytes / self.rate
            os.pwrite(fd, _CLOCK.pack(done), 0)
            return done
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def wait(self, nbytes: int) -> None:
        """Block until ``nbytes`` may have been transferred."""
        delay = self.reserve(nbytes) - time.monotonic()
        if delay > 0:
            time.sleep(delay)
