"""Processes that start together and report once: used by ``mdp profile`` and ``seneca bench``.

Each target is called as ``target(*args, barrier, out)``: it prepares, waits on ``barrier``,
works, and puts one report on ``out``; on failure it calls ``barrier.abort()`` and reports
``{"error": "..."}``.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
from collections.abc import Callable, Sequence
from typing import Any

from seneca_base.errors import SenecaError

__all__ = ["ProcessGroup", "job_context"]

#: Modules every benchmark process imports: the forkserver imports them once and each process
#: forks from it, where a spawned process imports torch again (2-3 s of CPU each on 2 cores).
#: The last gives each forked process fresh seeds for torch and numpy, as a spawned one has.
_PRELOAD = [
    "torch",
    "torchvision",
    "PIL.Image",
    "redis",
    "seneca.loader",
    "seneca._bench.harness",
    "seneca._bench._fresh_seeds",
]


def job_context() -> Any:
    """The context benchmark processes start in: fresh processes like ``spawn`` (none inherits
    the caller's state: connections, caches, threads; each seeds its generators), forked from
    a server process that has imported the heavy modules once (spawned where there is no
    forkserver)."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    return ctx


def _as_a_script(target: Callable[..., None], *args: Any) -> None:
    """Call ``target(*args)`` with the platform's default start method, as a training script
    started from a shell has: a process started by a forkserver inherits ``forkserver`` as its
    default, so its DataLoader workers would start from a forkserver of their own and import
    the dataset's modules again, where a script's workers are forked (Linux)."""
    mp.set_start_method(None, force=True)
    target(*args)


class ProcessGroup:
    """Fresh processes (:func:`job_context`), one per argument tuple, sharing a barrier and a
    report queue.

    ``parent_waits`` adds the calling process to the barrier (it can then time the work
    between :meth:`start_together` and the reports).
    """

    def __init__(
        self,
        target: Callable[..., None],
        args: Sequence[tuple[Any, ...]],
        parent_waits: bool = False,
        context: Any = None,
    ) -> None:
        ctx = context or job_context()
        self.barrier = ctx.Barrier(len(args) + (1 if parent_waits else 0))
        self.out = ctx.Queue()
        self.procs = [
            ctx.Process(target=_as_a_script, args=(target, *a, self.barrier, self.out))
            for a in args
        ]
        for p in self.procs:
            p.start()

    def start_together(self, timeout: float) -> None:
        """Wait at the barrier with the processes (a broken barrier shows up in the reports)."""
        try:
            self.barrier.wait(timeout=timeout)
        except Exception:
            return

    def reports(self, timeout: float, what: str) -> list[Any]:
        """One report per process; SenecaError names ``what`` if one is missing or failed. A
        failed report, or a process that ended without one (killed, or crashed), is found
        within a second or two, not at ``timeout``; the other processes are then ended."""
        deadline = time.monotonic() + timeout
        results: list[Any] = []
        failed = None
        try:
            while len(results) < len(self.procs) and failed is None:
                try:
                    report = self.out.get(timeout=1.0)
                except queue.Empty:
                    ended = sum(p.exitcode is not None for p in self.procs)
                    if ended <= len(results) and time.monotonic() < deadline:
                        continue
                    try:  # a report sent just before its process ended is read by now
                        report = self.out.get(timeout=1.0)
                    except queue.Empty:
                        failed = f"{what}: a process ended or timed out without a report"
                        continue
                results.append(report)
                if isinstance(report, dict) and "error" in report:
                    failed = f"{what} failed in a process: {report['error']}"
        finally:
            self._end(grace=30 if len(results) == len(self.procs) else 1)
        if failed:
            raise SenecaError(failed)
        return results

    def _end(self, grace: float) -> None:
        """Join the processes, killing any still running after ``grace`` seconds."""
        until = time.monotonic() + grace
        for p in self.procs:
            p.join(timeout=max(0.0, until - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join()
