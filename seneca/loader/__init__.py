"""The loader: :class:`SenecaLoader` and what it runs per batch.

* ``loader``: SenecaLoader, DataLoader's drop-in (option wiring, epochs, state);
* ``options``: validation of Seneca's own options (split, plan, job, ods, batch_tail);
* ``dataset``: CachedDataset, the user's dataset read through the cache tiers;
* ``fetch``: reading a batch that ODS decided, straight into the batch's rows;
* ``rows``: batch tensors filled where values are read, and their collate;
* ``stats``: per-job counters shared with DataLoader workers, and epoch summaries;
* ``malloc``: glibc malloc tuning for loader processes;
* ``ahead``: with workers, the loader process's share of the next batch made by a thread;
* ``device``: batches moved to the accelerator (``device=``), the batch tail run there;
* ``bypass``, ``part_buffers``: with workers, hits read here and the workers' reused buffers;
* ``setup``, ``source``, ``worker_exit``: the cache a loader is wired to, what it can cache,
  a worker's exit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from seneca.loader.loader import SenecaLoader

__all__ = ["SenecaLoader"]


def __getattr__(name: str) -> Any:
    # imported on first use, so that the small modules here (``malloc``, ``stats``) load
    # without torch (``seneca.lazy``: with the garbage collector paused)
    if name == "SenecaLoader":
        from seneca.lazy import attribute

        return attribute("seneca.loader.loader", "SenecaLoader")
    raise AttributeError(f"module 'seneca.loader' has no attribute {name!r}")
