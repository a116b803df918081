"""The waits of a loader's batches between its stages, from the files ``SENECA_TIMELINE`` made.

    SENECA_TIMELINE=/tmp/tl seneca bench ... --loaders seneca
    python -m seneca._bench.stages /tmp/tl

prints, per job file, the median and 90th percentile of each interval of
``seneca.loader._timeline.INTERVALS`` over every batch but each iteration's first (the start of
an epoch waits for workers that start), in milliseconds, and writes nothing.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from seneca.loader._timeline import INTERVALS, intervals

__all__ = ["summary"]


def summary(path: Path) -> dict[str, tuple[float, float, int]]:
    """Per interval: (median ms, 90th percentile ms, batches) over the file's iterations."""
    waits: dict[str, list[float]] = {name: [] for name, _, _ in INTERVALS}
    for line in path.read_text().splitlines():
        batches = json.loads(line)["batches"][1:]
        for name, values in intervals(batches).items():
            waits[name] += values
    out = {}
    for name, values in waits.items():
        if values:
            q = statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0]
            out[name] = (1000 * statistics.median(values), 1000 * q, len(values))
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python -m seneca._bench.stages DIR (what SENECA_TIMELINE named)")
        return 2
    for path in sorted(Path(argv[0]).glob("*.jsonl")):
        print(f"{path.name}: ms, median / p90 (batches)")
        for name, (median, p90, n) in summary(path).items():
            print(f"  {name:<30} {median:8.1f} / {p90:8.1f} ({n})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
