"""Per-batch stage times in a loader's process: where each batch waits, and on what.

A diagnosis aid, off by default. With the environment variable ``SENECA_TIMELINE`` set to a
directory, a SenecaLoader whose workers get tickets (ODS, workers and the default collate)
records when each batch passed each of :data:`STAGES` in its training process, on
``perf_counter``'s clock (CLOCK_MONOTONIC: one clock for every process of the machine), and
appends one JSON line per iteration to ``<dir>/<job>-<pid>.jsonl``. :func:`intervals` turns a
batch's times into the waits between the stages, and

    SENECA_TIMELINE=/tmp/tl python train.py      # or seneca bench ...
    python -m seneca.loader.timeline /tmp/tl

prints, per file, the median and 90th percentile of each wait over every batch but each
iteration's first (an epoch's start waits for its workers to start), in milliseconds.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "ENV",
    "INTERVALS",
    "STAGES",
    "Timeline",
    "from_environment",
    "intervals",
    "summary",
]

#: the environment variable that turns the timeline on (a directory)
ENV = "SENECA_TIMELINE"

#: the stages a batch passes in the training process, in order
STAGES = (
    "asked",  # DataLoader hands the batch's ticket to a worker (it dispatches ahead)
    "decided",  # the worker started the ticket, and ODS has decided the batch
    "part",  # the worker's part (the batch, made in its slot or sent) has arrived
    "merged",  # the batch is put together (its targets; its rows are the slot's)
    "made",  # the batch tail has run (or the device copy is queued)
    "taken",  # the training loop has it
    "returned",  # the loop asks for the next one (its step is over)
)
#: the waits between stages: (name, from, to), ``from`` of the batch before for "loop waited"
INTERVALS = (
    ("ticket queued + decide", "asked", "decided"),
    ("worker part (answer + work)", "decided", "part"),
    ("merge", "part", "merged"),
    ("tail or device copy", "merged", "made"),
    ("ready, waiting for the loop", "made", "taken"),
    ("step", "taken", "returned"),
    ("loop waited for the batch", "returned", "taken"),
)


class Timeline:
    """The stage times of one loader's batches (tags: the batch numbers the ticket sampler
    gives), written out per iteration."""

    def __init__(self, folder: Path, job: str) -> None:
        self.path = folder / f"{job}-{os.getpid()}.jsonl"
        self.job = job
        self.times: dict[int, dict[str, float]] = {}
        self._merged: list[int] = []  # the tags in the order batches leave the merge

    def mark(self, tag: int, stage: str) -> None:
        """Batch ``tag`` passes ``stage`` now."""
        self.times.setdefault(tag, {})[stage] = time.perf_counter()
        if stage == "merged":
            self._merged.append(tag)

    def passed(self, it: Iterator[Any], stage: str) -> Iterator[Any]:
        """The batches of ``it`` (in the order they left the merge), each marked ``stage``."""
        for k, batch in enumerate(it):
            self.mark(self._merged[k], stage)
            yield batch

    def handed(self, it: Iterator[Any]) -> Iterator[Any]:
        """The batches of ``it`` to the loop: each marked taken, and returned when the loop asks
        for the next; the iteration's times are written when it ends, however."""
        try:
            for k, batch in enumerate(it):
                tag = self._merged[k]
                self.mark(tag, "taken")
                yield batch
                self.mark(tag, "returned")
        finally:
            self.flush()

    def flush(self) -> None:
        """Append the iteration's batches (in the order they were decided and the loop took
        them, then any not merged) and start anew."""
        merged = set(self._merged)
        order = [t for t in self._merged if t in self.times]
        order += sorted(t for t in self.times if t not in merged)
        batches = [self.times[t] for t in order]
        self.times, self._merged = {}, []
        if not batches:
            return
        line = json.dumps({"job": self.job, "pid": os.getpid(), "batches": batches})
        with open(self.path, "a") as f:
            f.write(line + "\n")


def from_environment(job: str) -> Timeline | None:
    """A timeline when ``SENECA_TIMELINE`` names a directory (made if missing), else None."""
    folder = os.environ.get(ENV)
    if not folder:
        return None
    Path(folder).mkdir(parents=True, exist_ok=True)
    return Timeline(Path(folder), job)


def intervals(batches: list[dict[str, float]]) -> dict[str, list[float]]:
    """Each interval of :data:`INTERVALS` of every batch that passed both its ends, in seconds
    ("loop waited": from the batch before's return to this one's taking)."""
    out: dict[str, list[float]] = {name: [] for name, _, _ in INTERVALS}
    for k, times in enumerate(batches):
        for name, start, end in INTERVALS:
            before = batches[k - 1] if name.startswith("loop") and k else None
            origin = before if name.startswith("loop") else times
            if origin is not None and start in origin and end in times:
                out[name].append(times[end] - origin[start])
    return out


def summary(path: Path) -> dict[str, tuple[float, float, int]]:
    """Per interval of a timeline file: (median ms, 90th percentile ms, batches) over its
    iterations, each one's first batch left out."""
    waits: dict[str, list[float]] = {name: [] for name, _, _ in INTERVALS}
    for line in path.read_text().splitlines():
        for name, values in intervals(json.loads(line)["batches"][1:]).items():
            waits[name] += values
    out = {}
    for name, values in waits.items():
        if values:
            p90 = statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0]
            out[name] = (1000 * statistics.median(values), 1000 * p90, len(values))
    return out


def main(argv: list[str]) -> int:
    """Print :func:`summary` of every timeline file in the directory ``argv[0]``."""
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python -m seneca.loader.timeline DIR (the directory SENECA_TIMELINE named)")
        return 2
    for path in sorted(Path(argv[0]).glob("*.jsonl")):
        print(f"{path.name}: ms, median / p90 (batches)")
        for name, (median, p90, n) in summary(path).items():
            print(f"  {name:<30} {median:8.1f} / {p90:8.1f} ({n})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
