"""``seneca bench`` of two source trees, side by side: the same bench command run from tree A
(``--base``, for example a ``git worktree`` of main) and tree B (``--tree``, by default this
checkout) in A B B A order, ``--rounds`` times, each run a fresh ``python -m seneca bench``
whose jobs import the tree it measures (``PYTHONPATH``). Prints each run's aggregate samples/s
per loader and Seneca's ratio to the other loader in the same run, then the medians per tree:

    git worktree add /tmp/base main
    seneca make-dataset /tmp/hp16 --images 1600 --classes 4
    .venv/bin/python scripts/bench_abba.py --base /tmp/base --rounds 2 -- \\
        --data /tmp/hp16 --jobs 3 --loaders pytorch-tuned,seneca --cache-frac 0.25 --epochs 2

Everything after ``--`` is handed to ``seneca bench`` (without ``--out``); the ratio is taken
against the first loader named in ``--loaders`` that is not ``seneca``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def _env(tree: str) -> dict[str, str]:
    """The environment of a run that imports ``tree``'s packages ahead of the editable
    install's (checked)."""
    env = {**os.environ, "PYTHONPATH": tree}
    where = subprocess.run(
        [sys.executable, "-c", "import seneca; print(seneca.__file__)"],
        env=env, cwd=tree, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    if not where.startswith(tree):
        raise SystemExit(f"a run from {tree} would import {where}")
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="tree A (a checkout's root)")
    parser.add_argument("--tree", default=str(Path(__file__).resolve().parents[1]))
    parser.add_argument("--rounds", type=int, default=2, help="A B B A rounds")
    parser.add_argument("bench", nargs=argparse.REMAINDER, help="-- then seneca bench's options")
    args = parser.parse_args()
    bench = [a for a in args.bench if a != "--"]
    trees = {"A": str(Path(args.base).resolve()), "B": str(Path(args.tree).resolve())}
    envs = {name: _env(tree) for name, tree in trees.items()}
    ratios: dict[str, list[float]] = {"A": [], "B": []}
    with tempfile.TemporaryDirectory() as tmp:
        for k, name in enumerate("ABBA" * args.rounds):
            out = Path(tmp, f"{k}-{name}")
            subprocess.run(
                [sys.executable, "-m", "seneca", "bench", *bench, "--out", str(out)],
                env=envs[name], cwd=trees[name], check=True, stdout=subprocess.DEVNULL,
            )  # fmt: skip
            runs = json.loads((out / "results.json").read_text())["runs"]
            rate = {r["loader"]: r["aggregate_samples_per_s"] for r in runs}
            other = next(loader for loader in rate if loader != "seneca")
            ratios[name].append(rate["seneca"] / rate[other])
            rates = ", ".join(f"{loader} {r:.1f}" for loader, r in rate.items())
            print(f"{name} {rates} samples/s; seneca / {other} {ratios[name][-1]:.3f}", flush=True)
    for name, got in ratios.items():
        print(f"{name} ({trees[name]}): median seneca / {other} {statistics.median(got):.3f}")


if __name__ == "__main__":
    main()
