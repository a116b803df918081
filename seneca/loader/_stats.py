"""Per-job counters shared by the loader process and its workers, and each epoch's summary.

Each process writes only its own row of a small file-backed int64 matrix (no locks needed);
``snapshot`` sums the rows. The file path pickles, so fork, spawn and forkserver workers all
write to the same counters.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from seneca.loader._ahead import closing
from seneca_base.process import spawning
from seneca_base.shared import SharedFile
from seneca_base.tiers import TIERS as TIER_NAMES

__all__ = [
    "FIELDS",
    "Counters",
    "epoch_summary",
    "job_stats",
    "progress_line",
    "summarised",
]

log = logging.getLogger("seneca")


def _per_tier(*names: str) -> tuple[str, ...]:
    """``<name>_<tier>`` for each name, each tier (``seneca_base.tiers.TIERS`` order)."""
    return tuple(f"{name}_{t}" for name in names for t in TIER_NAMES)


FIELDS = (
    "samples",
    *_per_tier("hits", "misses"),
    "storage_reads",
    "decodes",
    "transforms",
    "bytes_storage",
    "bytes_cache",
    *_per_tier("admitted", "full"),
    "cache_errors",
    "ods_gone",
    # misses another job was making when decided (workers wait for its copy), and those that
    # came as that job's copy in time
    "promised",
    "promises_kept",
    # misses a worker swapped for copies cached after its batch was decided
    "swapped",
    # what the loader's own plan is made from (seneca._autoplan): time spent (ns) and bytes
    "ns_storage",
    "ns_decode",
    "ns_transform",
    "ns_cache",
    *_per_tier("bytes")[::-1],  # bytes_encoded, bytes_decoded, bytes_augmented
    "augmented_made",
)
_INDEX = {f: i for i, f in enumerate(FIELDS)}


class Counters:
    """``rows`` rows of FIELDS counters in a :class:`~seneca_base.shared.SharedFile`; row 0 is
    the loader process, row k+1 worker k (a process's ``Role.row``)."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self._attach(SharedFile("stats", rows * len(FIELDS) * 8))

    def _attach(self, shared: SharedFile) -> None:
        self.shared = shared
        self._arr = np.frombuffer(shared.memory, dtype=np.int64).reshape(self.rows, len(FIELDS))

    def __getstate__(self) -> dict:
        if spawning():
            return {"rows": self.rows, "shared": self.shared}
        return {"rows": self.rows, "shared": None}  # a copy outside a worker counts on its own

    def __setstate__(self, state: dict) -> None:
        if state["shared"] is None:
            self.__init__(state["rows"])
        else:
            self.rows = state["rows"]
            self._attach(state["shared"])

    def add(self, row: int, counts: dict[str, int]) -> None:
        """Add ``counts`` to ``row`` (each process must write only its own row)."""
        arr = self._arr[min(row, self.rows - 1)]
        for name, value in counts.items():
            if value:
                arr[_INDEX[name]] += value

    def snapshot(self, first: int = 0) -> dict[str, int]:
        """Every counter summed over the processes' rows from ``first`` on (0: all of them; 1:
        the workers')."""
        total = np.asarray(self._arr[first:]).sum(axis=0)
        return {name: int(total[i]) for i, name in enumerate(FIELDS)}

    def row(self, row: int) -> dict[str, int]:
        """The counters of one process (0: the loader process, k + 1: worker k)."""
        values = np.asarray(self._arr[row])
        return {name: int(values[i]) for i, name in enumerate(FIELDS)}

    def reset(self) -> None:
        self._arr[:] = 0

    def once(self, key: str) -> bool:
        """True for the first process of the job (loader or worker, this epoch or a later one)
        to ask for ``key``, False for every later one: for things said once per job."""
        return self.shared.once(key)


def summarised(
    it: Iterator[Any],
    job: str,
    counters: Counters,
    sampler: Any,
    before: dict,
    every: float | None = None,
    iteration: int | None = None,
    length: int | None = None,
) -> Iterator[Any]:
    """The batches of an iteration ``it`` of ``job``; a summary of the epoch logged at INFO
    when it ends (``before``: ``counters`` at its start; ``sampler``: its ODS sampler, if any,
    whose epoch it names, else the ``iteration``'s number); ``every``: seconds between
    progress lines at INFO while it runs (None: none). With the epoch's ``length`` known (its
    batches: ``len(loader)``), the summary comes with the last batch: a consumer that stops
    after ``len(loader)`` batches (Lightning, ``zip``, ``islice``) never ends the iteration."""
    subs = sampler.substitutions if sampler else 0
    start = last = time.monotonic()
    said = False

    def summary() -> None:
        if log.isEnabledFor(logging.INFO):
            made = (sampler.substitutions if sampler else 0) - subs
            epoch = sampler.current if sampler else iteration
            log.info("%s", epoch_summary(job, epoch, before, counters.snapshot(), made))

    with closing(it):  # a loop cut short closes what it iterates (the batch thread stops)
        for count, batch in enumerate(it, 1):
            if every is not None and time.monotonic() - last >= every:
                last = time.monotonic()
                epoch = sampler.current if sampler else iteration
                log.info("%s", progress_line(job, epoch, before, counters.snapshot(), last - start))
            if count == length:
                said = True
                summary()
            yield batch
    if not said:
        summary()


def progress_line(job: str, epoch: int | None, before: dict, now: dict, seconds: float) -> str:
    """One line on an epoch under way: samples so far, samples/s and the hit rate."""
    samples = now["samples"] - before.get("samples", 0)
    hits = sum(now[f"hits_{t}"] - before.get(f"hits_{t}", 0) for t in TIER_NAMES)
    rate = hits / samples if samples else 0.0
    return (
        f"job {job} epoch {'-' if epoch is None else epoch}: {samples} samples in {seconds:.0f}s "
        f"({samples / seconds if seconds else 0.0:,.0f} samples/s), hit rate {rate:.0%}"
    )


def epoch_summary(job: str, epoch: int | None, before: dict, after: dict, subs: int) -> str:
    """One line on an epoch from two :meth:`Counters.snapshot` (and its substitutions)."""
    d = {k: after[k] - before.get(k, 0) for k in after}
    hits = [d[f"hits_{t}"] for t in TIER_NAMES]
    rate = sum(hits) / d["samples"] if d["samples"] else 0.0
    return (
        f"job {job} epoch {'-' if epoch is None else epoch}: {d['samples']} samples, hits "
        f"{'/'.join(TIER_NAMES)} {'/'.join(map(str, hits))} ({rate:.0%}), {subs} "
        f"substitutions, {d['storage_reads']} storage reads, {d['cache_errors']} cache errors"
    )


def job_stats(c: dict[str, int], substitutions: int) -> dict[str, Any]:
    """``SenecaLoader.stats()`` from a :meth:`Counters.snapshot` and the substitutions."""
    out: dict[str, Any] = {"samples": c["samples"]}
    for t in TIER_NAMES:
        hits, misses = c[f"hits_{t}"], c[f"misses_{t}"]
        out[t] = {
            "hits": hits,
            "misses": misses,
            "hit_rate": hits / (hits + misses) if hits + misses else 0.0,
            "admitted": c[f"admitted_{t}"],
            "full": c[f"full_{t}"],
        }
    for name in ("storage_reads", "decodes", "transforms", "bytes_storage", "bytes_cache"):
        out[name] = c[name]
    out["cache_errors"] = c["cache_errors"]
    out["substitutions"] = substitutions
    out["ods_gone"] = c["ods_gone"]
    out["promised"], out["promises_kept"] = c["promised"], c["promises_kept"]
    out["swapped"] = c["swapped"]
    return out
