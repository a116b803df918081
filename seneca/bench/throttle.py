"""A storage-bandwidth throttle shared by processes: emulates remote storage in benchmarks.

Reads reserve time on one shared clock (``bytes / rate`` each), so all the processes that hold
the same :class:`Throttle`, including DataLoader workers it is pickled into while they start,
together read at most ``rate`` bytes per second. This is an emulation for ``seneca bench
--storage-mbps``, not a model of any particular storage system.
"""

from __future__ import annotations

import time
from typing import Any

from seneca.bench.spawn import job_context
from seneca_base.errors import ConfigError

__all__ = ["Throttle"]


class Throttle:
    """At most ``rate`` bytes per second over all processes sharing this object."""

    def __init__(self, rate: float, context: Any = None) -> None:
        if not rate > 0:
            raise ConfigError(f"--storage-mbps: must be positive, got {rate!r}")
        self.rate = float(rate)
        ctx = context or job_context()
        self._next = ctx.Value("d", 0.0)  # monotonic time when the link is free again

    def reserve(self, nbytes: int, now: float | None = None) -> float:
        """Book ``nbytes`` on the shared link at ``now`` (default: ``time.monotonic()``); returns
        when (on that clock) the transfer is done. A link left idle banks no credit."""
        with self._next.get_lock():
            start = max(time.monotonic() if now is None else now, self._next.value)
            self._next.value = start + nbytes / self.rate
            return self._next.value

    def wait(self, nbytes: int) -> None:
        """Block until ``nbytes`` may have been transferred."""
        delay = self.reserve(nbytes) - time.monotonic()
        if delay > 0:
            time.sleep(delay)
