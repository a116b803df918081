"""A job's name is one run's at a time.

Runs of one job share its name: a script run again starts afresh under it, a run restored from
a checkpoint continues its epoch, and the ranks of a data-parallel job share one epoch. Two
runs of one rank under one name at once would share one epoch too, each getting part of it:
before a run of one rank starts under a name, :func:`check_name_free` looks at the name's
lease. A lease that has run out, or none, is free. A live one belongs to an earlier run that is
either still running (its process renews the lease every third of it) or was killed before its
loader could end the lease: the check waits while the lease runs out, and raises
``JobInUseError`` if it sees it renewed. A lease held by another loader of the same process is
taken over at once (a sweep in one script that keeps its old loaders).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ods import defaults
from seneca_base.errors import JobInUseError

__all__ = ["check_name_free"]

_log = logging.getLogger("seneca.ods")


def check_name_free(store: Any, job: str, held_here: Callable[[str], bool] | None = None) -> None:
    """Return once ``job``'s name on ``store`` is free for a new run of one rank (see the
    module docstring); ``held_here(job)``: whether a loader of this process holds it. Raises
    JobInUseError when another run renews the lease meanwhile (twice: one renewal may have
    been on its way as the earlier run ended)."""
    end = store.lease_end(job)
    if end is None or end <= store.now_ms():
        return
    if held_here is not None and held_here(job):
        return
    _log.info(
        "job %s: an earlier run under this name holds its lease for %.1f s more; waiting to "
        "see whether it still runs",
        job,
        (end - store.now_ms()) / 1000,
    )
    renewed = 0
    while end is not None and end > store.now_ms():
        time.sleep(defaults.RUN_CHECK_INTERVAL)
        later = store.lease_end(job)
        renewed += later is not None and later > end
        if renewed == 2:
            raise JobInUseError(
                f"job={job!r}: another loader of this dataset is running under this name (its "
                "lease was renewed just now); loaders with one name share one epoch, so each "
                "would get part of it. Give each concurrent run a name of its own, or none (a "
                "name of its own is made), or end the other first"
            )
        end = later
