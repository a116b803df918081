"""``mdp bench``: how long planning takes (the paper's brute force: < 1 s).

For each spec it times :func:`mdp.planner.plan` in this process (all 5,151 splits; median and
worst of ``repeat`` runs, both models) and the whole ``mdp plan SPEC --json`` command as a fresh
process (interpreter start, imports, spec parsing, planning, JSON output). The caller says how
to run that command (``mdp`` is the application's: this package does not start it itself).
"""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Sequence

from mdp import defaults
from mdp.planner import MODELS, plan
from mdp.spec import load_spec

__all__ = ["run_bench"]

GOAL_S = defaults.PLAN_GOAL_S


def _timed(fn: object, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append(time.perf_counter() - start)
    return out


def run_bench(
    specs: Sequence[str], command: Sequence[str], repeat: int = 20
) -> list[dict[str, object]]:
    """Time planning for each spec; prints a table and returns its rows. ``command``: the
    ``mdp`` command line (``plan SPEC --json --model M`` is added)."""
    rows: list[dict[str, object]] = []
    print(f"{'spec':<20} {'model':<7} {'plan() median':>14} {'worst':>9} {'mdp plan cmd':>13}")
    for name in specs:
        spec = load_spec(name)
        for model in MODELS:
            times = _timed(lambda spec=spec, model=model: plan(spec, model), repeat)
            cmd = [*command, "plan", name, "--json"]
            cmd += ["--model", model]
            command_s = min(
                _timed(lambda cmd=cmd: subprocess.run(cmd, check=True, capture_output=True), 3)
            )
            row = {
                "spec": name,
                "model": model,
                "plan_median_s": statistics.median(times),
                "plan_worst_s": max(times),
                "command_s": command_s,
            }
            rows.append(row)
            print(
                f"{name:<20} {model:<7} {row['plan_median_s'] * 1e3:>11.1f} ms "
                f"{row['plan_worst_s'] * 1e3:>6.1f} ms {command_s * 1e3:>10.0f} ms"
            )
    worst = max(max(r["plan_worst_s"], r["command_s"]) for r in rows)  # type: ignore[type-var]
    print(
        f"\nslowest: {worst * 1e3:.0f} ms = {worst / GOAL_S:.2f}x the {GOAL_S:g} s goal "
        f"({'met' if worst < GOAL_S else 'MISSED'})"
    )
    return rows
