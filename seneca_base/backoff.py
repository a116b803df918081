"""One back-off per process and cache.

After a call to a cache fails, every reader of that cache in this process (the sampler's
decisions, fetches, admissions, releases) goes straight to storage until the retry time, so a
frozen server costs one socket timeout per process per outage, not one per batch or per caller.
The state is per process (a worker started after a failure inherits it when forked).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

__all__ = ["Backoff"]

_UNTIL: dict[str, float] = {}  # cache -> when this process may try it again (monotonic)
_FAILED: Counter[str] = Counter()  # cache -> calls to it that failed in this process


@dataclass(frozen=True)
class Backoff:
    """The back-off of the cache named ``cache`` (its URL as logs show it): ``retry_after``
    seconds after a failure."""

    cache: str
    retry_after: float

    def failed(self) -> None:
        """A call to the cache failed: read around it for ``retry_after`` seconds."""
        _UNTIL[self.cache] = time.monotonic() + self.retry_after
        _FAILED[self.cache] += 1

    @property
    def failures(self) -> int:
        """How many calls to the cache failed in this process (each a timeout or an error the
        process waited for)."""
        return _FAILED[self.cache]

    def down(self) -> bool:
        """Whether the cache failed less than ``retry_after`` ago (in this process)."""
        return time.monotonic() < _UNTIL.get(self.cache, 0.0)
