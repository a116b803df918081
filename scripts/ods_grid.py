"""The ODS policies over the Fig. 13 grid and beyond, with seeds, beside the ceiling.

    python scripts/ods_grid.py [--samples 20000] [--seeds 3] [--scenarios fig13]
                               [--policies seneca,paper]

Each scenario (jobs, their speeds and start times) runs ``ods simulate``'s simulation
(payload-free samples on a private redis-server, batches of 64, 3 epochs) once per seed and
cache size (10-80% of the dataset) per policy. Per policy two rows: the mean hit rate with its
range over the seeds, and the mean storage loads per sample served (what a real loader reads
and decodes); then the ceiling (``ods.ceiling``): the hit rate left by the fewest loads any
policy can make, and those loads per sample. The loads of each policy by cause (``ods.losses``)
follow, summed over the seeds.

Scenarios: ``fig13`` (3 jobs at speeds 1:1:1 and 1:2:3, the paper's Fig. 13), ``more`` (8 jobs
at equal and at mixed speeds, 3 jobs joining a third of an epoch apart, 8 jobs joining a quarter
of an epoch apart).
"""

from __future__ import annotations

import argparse
import statistics
from collections import Counter
from dataclasses import dataclass, field

import redis

from ods.losses import CAUSES
from ods.simulate import SimConfig, simulate_ods
from seneca._cache.embedded import acquire_embedded

FRACS = (0.1, 0.2, 0.4, 0.6, 0.8)
STAGGERED = (0, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75)
SCENARIOS = {
    "fig13": [
        ("3 jobs, speeds 1:1:1", {"jobs": 3}),
        ("3 jobs, speeds 1:2:3", {"jobs": 3, "speeds": (1, 2, 3)}),
    ],
    "more": [
        ("8 jobs, equal speeds", {"jobs": 8}),
        ("8 jobs, speeds 1:1:2:2:3:3:4:4", {"jobs": 8, "speeds": (1, 1, 2, 2, 3, 3, 4, 4)}),
        ("3 jobs joining a third of an epoch apart", {"jobs": 3, "starts": (0, 1 / 3, 2 / 3)}),
        ("8 jobs joining a quarter of an epoch apart", {"jobs": 8, "starts": STAGGERED}),
    ],
}
COUNTS = (*CAUSES, "evicted_needed")


@dataclass
class Point:
    """One policy at one cache size, over the seeds."""

    hit_rates: list[float] = field(default_factory=list)
    loads_per_sample: list[float] = field(default_factory=list)
    causes: Counter = field(default_factory=Counter)
    ceiling: tuple[float, float] = (0.0, 0.0)  # hit rate, loads per sample


def measure(client: redis.Redis, setup: dict, policy: str, frac: float, args) -> Point:
    point = Point()
    for seed in range(args.seeds):
        client.flushdb()
        cfg = SimConfig(samples=args.samples, cache_frac=frac, policy=policy, seed=seed, **setup)
        r = simulate_ods(client, cfg)
        point.hit_rates.append(r["hit_rate"])
        point.loads_per_sample.append(r["loads_per_sample"])
        point.causes.update(r["loads_by_cause"])
        point.ceiling = (r["ceiling"]["hit_rate"], r["ceiling"]["storage_loads"] / r["served"])
    return point


def _cell(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def _row(name: str, cells: list[str], width: int) -> None:
    print(f"{name:<22}" + "".join(f"{c:>{width}}" for c in cells))


def report(points: dict[str, list[Point]], width: int) -> None:
    """The table of one scenario: per policy its hit rates and loads, the ceiling, causes."""
    _row("", [f"{f:.0%}" for f in FRACS], width)
    for policy, row in points.items():
        _row(f"ods-{policy} hit rate", [_cell(p.hit_rates) for p in row], width)
        _row("  loads per sample", [_cell(p.loads_per_sample) for p in row], width)
    row = next(iter(points.values()))
    _row("ceiling hit rate", [f"{p.ceiling[0]:.3f}" for p in row], width)
    _row("  loads per sample", [f"{p.ceiling[1]:.3f}" for p in row], width)
    for policy, row in points.items():
        print(f"ods-{policy} loads by cause (over the seeds), per cache size:")
        for frac, p in zip(FRACS, row, strict=True):
            print(f"  {frac:.0%}: " + ", ".join(f"{c} {p.causes[c]:,}" for c in COUNTS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--scenarios", default="fig13", help="fig13, more, or fig13,more")
    parser.add_argument("--policies", default="seneca,paper")
    args = parser.parse_args()
    client = redis.Redis.from_url(acquire_embedded(256_000_000, name="ods-grid"))
    width = 20 if args.seeds > 1 else 8
    for name in args.scenarios.split(","):
        for title, setup in SCENARIOS[name]:
            print(f"{title}, {args.samples:,} samples, {args.seeds} seed(s)")
            points = {
                policy: [measure(client, setup, policy, frac, args) for frac in FRACS]
                for policy in args.policies.split(",")
            }
            report(points, width)
            print(flush=True)


if __name__ == "__main__":
    main()
