"""How often a loader looks at what it shares with other jobs (the plan, its share of a node):
at most once per interval between batches, unless forced (an epoch's end), and never during an
outage of the cache (the fetches retry it)."""

from __future__ import annotations

import time
from typing import Any

__all__ = ["Cadence"]


class Cadence:
    """Says when a look is due: at most once per ``every`` seconds unless forced, and not while
    ``backoff`` (a job's ``seneca_base.backoff.Backoff``; None: none) is in an outage."""

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
