"""When a job calls its cache: the back-off of a failing cache, shared by every process of one
job (:class:`Backoff`), and how often a loader looks at what it shares with other jobs
(:class:`Cadence`).

After a call to the cache fails (an error, or no answer within its deadline), every reader of
the cache in the job (its loader process and its DataLoader workers, whatever their start
method) reads from storage without trying the cache until the retry time. The first failure
starts an outage: the first retry is ``first`` seconds later, and each retry that fails doubles
the wait, up to ``cap``. The first call that succeeds, in any of the job's processes, ends the
outage for all of them. An outage is logged twice on the ``seneca`` logger: a warning when it
starts and an info line when the cache answers again.

The state is a :class:`seneca_base.shared.SharedFile`, mapped by each process: a copy pickled
into a worker maps the same file. Reads are lock-free; a change of state holds the file's lock,
so two processes that fail at once start one outage.

A loader looks at what it shares with other jobs (the plan, its share of a node) at most once
per interval between batches, unless forced (an epoch's end), and never during an outage of
the cache (the fetches retry it): :class:`Cadence` says when a look is due.
"""

from __future__ import annotations

import contextlib
import logging
import struct
import time
from typing import Any

from seneca_base.shared import SharedFile

__all__ = ["Backoff", "Cadence"]

_log = logging.getLogger("seneca")

# until (monotonic s), interval (s), started (monotonic s; 0: no outage), outages, failures
_STATE = struct.Struct("<dddqq")


class Backoff:
    """The back-off of the cache named ``cache`` (its URL as logs show it, password redacted)
    for one job: see the module docstring. ``first`` and ``cap``: seconds to the first retry,
    and the most between two retries."""

    def __init__(self, cache: str, first: float, cap: float) -> None:
        self.cache, self.first, self.cap = cache, float(first), float(cap)
        self.state = SharedFile("backoff", _STATE.size)

    def _read(self) -> tuple[float, float, float, int, int]:
        return _STATE.unpack_from(self.state.memory)

    @contextlib.contextmanager
    def _changing(self) -> Any:
        """The state, read and written back under the file's lock."""
        with self.state.locked() as memory:
            state = list(_STATE.unpack_from(memory))
            yield state
            _STATE.pack_into(memory, 0, *state)

    def down(self) -> bool:
        """Whether the job reads around the cache now (a retry is not due yet)."""
        return time.monotonic() < self._read()[0]

    @property
    def in_outage(self) -> bool:
        """Whether a call failed and none has succeeded since (retries may be due)."""
        return self._read()[2] > 0

    @property
    def interval(self) -> float:
        """Seconds from the latest failure that set the wait to the next retry (0: no outage):
        ``first``, then twice as long after each failed retry, at most ``cap``."""
        return self._read()[1]

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


class Cadence:
    """Says when a look is due: at most once per ``every`` seconds unless forced, and not while
    ``backoff`` (a job's :class:`Backoff`; None: none) is in an outage."""

    def __init__(self, every: float, backoff: Any = None) -> None:
        self.every = float(every)
        self.backoff = backoff
        self._next = 0.0

    def due(self, force: bool = False) -> bool:
        """Whether to look now (the next look is then ``every`` seconds away)."""
        now = time.monotonic()
        if not force and now < self._next:
            return False
        if self.backoff is not None and self.backoff.in_outage:
            return False
        self._next = now + self.every
        return True
