"""glibc malloc tuning for loader processes.

A batch's buffers (150 KB-20 MB: cached values, decoded images, collated batches) are above
glibc's default mmap threshold, so each one is mapped fresh and every page is faulted in and
zeroed on first touch, then unmapped when freed. On the machines we measured this cost more than
the copies themselves (``docs/benchmarks.md``, the hit path's small costs).
Raising the threshold (``defaults.MALLOC_MMAP_THRESHOLD``) keeps such buffers in the heap, where
freed ones are reused. The price is memory kept by the process after a peak (at most
``defaults.MALLOC_TRIM_THRESHOLD`` of free heap before it is returned).

Applied once per process (the loader process and each worker); a no-op outside glibc or with
``SENECA_MALLOC_TUNING=0`` in the environment.
"""

from __future__ import annotations

import ctypes
import os

from seneca import defaults
from seneca_base.process import Made

__all__ = ["tune_malloc"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_tuned: Made | None = None  # the process the tuning is in effect in


def tune_malloc() -> bool:
    """Apply the tuning in this process (once); whether it is in effect."""
    global _tuned
    if _tuned is not None and not _tuned.inherited:
        return True
    if os.environ.get("SENECA_MALLOC_TUNING", "1") == "0":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    ok = mallopt(_M_MMAP_THRESHOLD, defaults.MALLOC_MMAP_THRESHOLD) == 1
    ok = ok and mallopt(_M_TRIM_THRESHOLD, defaults.MALLOC_TRIM_THRESHOLD) == 1
    if ok:
        _tuned = Made()
    return ok
