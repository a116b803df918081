"""Benchmark jobs as fresh interpreters, started as a user starts a training script.

``seneca bench`` runs each job as ``python -m seneca._bench.fresh``: a new interpreter that
imports what it needs, whose DataLoader workers start with the platform's default method (fork
on Linux up to Python 3.13), and that inherits no state of the benchmark's process. The job
gets its spec as JSON, prepares (imports, loader, model), says it is ready and waits until
every job is; then it works and sends back one JSON report. Spec, go-ahead and report travel on
two pipes of their own, so whatever the job prints stays on its stdout and stderr.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import select
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from seneca_base.errors import SenecaError

__all__ = ["FreshJobs"]

_READY = b"ready\n"
_GO = b"go\n"


def _read_line(fd: int, deadline: float) -> bytes | None:
    """One line from pipe ``fd`` (without waiting past ``deadline``); None at its end or at
    the deadline. Each pipe carries one line at a time (a job writes its report only after the
    go-ahead), so what is read in chunks never runs past the line."""
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        wait = None if left == float("inf") else left
        if left <= 0 or not select.select([fd], [], [], wait)[0]:
            return None
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return None
        line += chunk
    return line


class FreshJobs:
    """One fresh interpreter per spec, each running ``target`` (``"module:function"``):
    ``function(spec, ready)`` prepares, calls ``ready()`` (which returns once every job is
    ready), works, and returns its report (a JSON-able dict)."""

    def __init__(self, target: str, specs: Sequence[dict[str, Any]]) -> None:
        self.procs: list[subprocess.Popen] = []
        self._reports: list[int] = []
        self._gos: list[int] = []
        for spec in specs:
            go_r, go_w = os.pipe()
            out_r, out_w = os.pipe()
            proc = subprocess.Popen(
                [sys.executable, "-m", "seneca._bench.fresh", target, str(go_r), str(out_w)],
                stdin=subprocess.PIPE,
                pass_fds=(go_r, out_w),
            )
            os.close(go_r)
            os.close(out_w)
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(spec).encode() + b"\n")
            proc.stdin.close()
            self.procs.append(proc)
            self._gos.append(go_w)
            self._reports.append(out_r)

    def start_together(self, timeout: float, what: str) -> None:
        """Wait until every job is ready, then let them all go; SenecaError names ``what`` if
        one fails or is not ready in ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        for fd in self._reports:
            line = _read_line(fd, deadline)
            if line != _READY:
                report = self._report_of(line)
                self.close()
                raise SenecaError(f"{what}: a job failed before it was ready: {report}")
        for fd in self._gos:
            os.write(fd, _GO)

    def reports(self, timeout: float, what: str) -> list[dict[str, Any]]:
        """Each job's report; SenecaError names ``what`` if one is missing or failed."""
        deadline = time.monotonic() + timeout
        try:
            lines = [_read_line(fd, deadline) for fd in self._reports]
        finally:
            self.close()
        reports = [self._report_of(line) for line in lines]
        errors = [r["error"] for r in reports if "error" in r]
        if errors:
            raise SenecaError(f"{what} failed in a job: {errors[0]}")
        return reports

    @staticmethod
    def _report_of(line: bytes | None) -> dict[str, Any]:
        if not line:
            return {"error": "it ended or timed out without a report"}
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            return {"error": f"an unreadable report: {line[:200]!r}"}

    def close(self) -> None:
        """End the jobs (at once if still running) and close the pipes."""
        for fd in self._gos + self._reports:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._gos, self._reports = [], []
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _main(argv: list[str]) -> None:
    """A job's interpreter: ``target go_fd report_fd``, its spec on stdin."""
    target, go_fd, out_fd = argv[0], int(argv[1]), int(argv[2])
    spec = json.loads(sys.stdin.readline())

    def send(data: bytes) -> None:
        os.write(out_fd, data)

    def ready() -> None:
        gc.collect()  # once, untimed: training starts from where a script's collector would be
        gc.enable()
        send(_READY)
        if _read_line(go_fd, float("inf")) != _GO:
            raise SystemExit(1)  # the benchmark gave up: end quietly

    # The job prepares (imports torch, makes its loader and model) with the garbage collector
    # paused: the imports make long-lived objects that start full collections, a fifth of the
    # CPU they take. None of it is timed; one collection and the collector runs again before
    # the job says it is ready.
    gc.disable()
    try:
        module, _, name = target.partition(":")
        function: Callable[..., dict[str, Any]] = getattr(importlib.import_module(module), name)
        report = function(spec, ready)
    except BaseException as e:  # reported to the benchmark's process
        if isinstance(e, SystemExit):
            raise
        traceback.print_exc()
        report = {"error": f"{type(e).__name__}: {e}"}
    finally:
        gc.enable()
    send(json.dumps(report).encode() + b"\n")


if __name__ == "__main__":
    _main(sys.argv[1:])
