"""The back-off of a failing cache, shared by every process of one job.

After a call to the cache fails (an error, or no answer within its deadline), every reader of
the cache in the job (its loader process and its DataLoader workers, whatever their start
method) reads from storage without trying the cache until the retry time. The first failure
starts an outage: the first retry is ``first`` seconds later, and each retry that fails doubles
the wait, up to ``cap``. The first call that succeeds, in any of the job's processes, ends the
outage for all of them. An outage is logged twice on the ``seneca`` logger: a warning when it
starts and an info line when the cache answers again.

The state lives in a small file under ``/dev/shm`` (else the temporary directory), mapped by
each process: a copy pickled into a worker maps the same file. Reads are lock-free; a change
of state holds an ``flock`` on the file, so two processes that fail at once start one outage.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import mmap
import os
import struct
import tempfile
import time
import weakref
from typing import Any

__all__ = ["Backoff"]

_log = logging.getLogger("seneca")

# until (monotonic s), interval (s), started (monotonic s; 0: no outage), outages, failures
_STATE = struct.Struct("<dddqq")


def _state_dir() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def _unlink(path: str, pid: int) -> None:
    if os.getpid() == pid:
        with contextlib.suppress(OSError):
            os.unlink(path)


class Backoff:
    """The back-off of the cache named ``cache`` (its URL as logs show it, password redacted)
    for one job: see the module docstring. ``first`` and ``cap``: seconds to the first retry,
    and the most between two retries."""

    def __init__(self, cache: str, first: float, cap: float) -> None:
        self.cache, self.first, self.cap = cache, float(first), float(cap)
        fd, self.path = tempfile.mkstemp(prefix="seneca-backoff-", dir=_state_dir())
        os.ftruncate(fd, _STATE.size)
        os.close(fd)
        self._owner: Any = weakref.finalize(self, _unlink, self.path, os.getpid())
        self._map()

    def _map(self) -> None:
        self._fd = os.open(self.path, os.O_RDWR)
        self._mem = mmap.mmap(self._fd, _STATE.size)
        self._pid = os.getpid()

    def __getstate__(self) -> dict[str, Any]:
        return {"cache": self.cache, "first": self.first, "cap": self.cap, "path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.cache, self.first, self.cap = state["cache"], state["first"], state["cap"]
        self.path, self._owner = state["path"], None
        self._map()

    def _read(self) -> tuple[float, float, float, int, int]:
        return _STATE.unpack_from(self._mem)

    @contextlib.contextmanager
    def _changing(self) -> Any:
        """The state, read and written back under the file's lock."""
        if self._pid != os.getpid():  # forked: a lock of its own needs a descriptor of its own
            self._map()
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            state = list(self._read())
            yield state
            _STATE.pack_into(self._mem, 0, *state)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def down(self) -> bool:
        """Whether the job reads around the cache now (a retry is not due yet)."""
        return time.monotonic() < self._read()[0]

    @property
    def in_outage(self) -> bool:
        """Whether a call failed and none has succeeded since (retries may be due)."""
        return self._read()[2] > 0

    @property
    def failures(self) -> int:
        """Calls to the cache that failed in the job's processes (each an error or a call
        abandoned at its deadline)."""
        return self._read()[4]

    @property
    def outages(self) -> int:
        """Outages the job has seen (each from a failure to the next success)."""
        return self._read()[3]

    def failed(self, err: BaseException | None = None, said: bool = False) -> bool:
        """A call to the cache failed with ``err``: read around it until the next retry. True
        when this started an outage (logged, unless the caller ``said`` so already)."""
        now = time.monotonic()
        with self._changing() as state:
            until, interval, started = state[0], state[1], state[2]
            state[4] += 1
            if started == 0:  # a new outage
                state[:4] = [now + self.first, self.first, now, state[3] + 1]
            elif now >= until:  # a retry failed: wait twice as long
                interval = min(2 * interval, self.cap)
                state[:2] = [now + interval, interval]
            new = started == 0
        if new and not said:
            why = f" ({type(err).__name__}: {str(err)[:160]})" if err is not None else ""
            _log.warning(
                "cache %s failed%s; reading from storage, trying the cache again in %gs "
                "(then at most every %gs)",
                self.cache,
                why,
                self.first,
                self.cap,
            )
        return new

    def succeeded(self) -> bool:
        """A call to the cache succeeded: an outage, if any, ends for the whole job. True when
        this ended one (it was logged)."""
        if self._read()[2] == 0:  # the common case: no outage, no lock
            return False
        now = time.monotonic()
        with self._changing() as state:
            started = state[2]
            state[:3] = [0.0, 0.0, 0.0]
        if started == 0:  # another process ended it meanwhile
            return False
        _log.info("cache %s answers again after %.1fs; reading it again", self.cache, now - started)
        return True
