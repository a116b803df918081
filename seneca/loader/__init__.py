"""The loader: :class:`SenecaLoader` and what it runs per batch.

Public: ``loader`` (SenecaLoader, DataLoader's drop-in: option wiring, epochs, state),
``source`` (which datasets can be cached; ``CacheableDataset``) and ``timeline`` (a diagnosis
aid: each batch's times at the stages of the training process, recorded with
``SENECA_TIMELINE``, read with ``python -m seneca.loader.timeline DIR``).
:func:`resolve_device` is here for the command-line tools, which check ``--device`` before
starting jobs.

Internal (a leading underscore; their names may change between releases):

* ``_batch_path``: the path of one batch, every stage in order, and the stages the loader
  process runs (start here to follow a batch);
* ``_dataset``: CachedDataset, the user's dataset read through the cache tiers, made of
  ``_link`` (the cache as one job sees it: store, back-off, strict, the shared plan),
  ``_fetch`` (a batch's fetch, run in three parts: ``_read``, its values in one round trip;
  ``_make``, its samples; ``_admit``, the new values offered to the cache) and ``_samples``
  (a sample's remaining work per tier, and what it offers the cache);
* ``_rows``: batch tensors filled where values are read, and their collate;
* ``_tickets``, ``_desk``, ``_slots``: with workers, each batch decided when its worker starts
  it, and the shared slots the worker makes it in (its hits read straight into them);
* ``_ahead``: with workers, the loader process's share of the next batch made by a thread;
* ``_device``: batches moved to the accelerator (``device=``), the batch tail run there;
* ``_stats``: counters shared with workers and epoch summaries;
* ``_budgets``: the budgets in force (the dataset's share of the node, split by the plan);
* ``_lease``: a job stays live while its loader exists (one thread per process renews leases);
* ``_workers``: DataLoader worker processes: a worker's exit; a worker lost while its batch is
  handed over (a process's role, passed to what behaves differently by role, is
  ``seneca_base.process``'s);
* ``_setup``, ``_options``: the cache a loader is wired to, validation of Seneca's own options.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from seneca.loader._device import resolve_device
    from seneca.loader.loader import SenecaLoader

__all__ = ["SenecaLoader", "resolve_device"]

_HOMES = {"SenecaLoader": "seneca.loader.loader", "resolve_device": "seneca.loader._device"}


def __getattr__(name: str) -> Any:
    # imported on first use, so that the small modules here (``_stats``) load without torch
    # (``seneca.lazy``: with the garbage collector paused)
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'seneca.loader' has no attribute {name!r}")
    from seneca.lazy import attribute

    return attribute(home, name)
