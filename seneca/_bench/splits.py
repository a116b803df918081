"""The planned split against fixed ones, from one ``seneca bench`` run.

Run ``seneca@auto`` (the loader plans its split), ``seneca@50-30-20`` (the old fixed default)
and the six splits of the model validation (``seneca@100-0-0`` ... ``seneca@0-50-50``) side by
side; :func:`compare` then gives, per cache fraction and number of jobs, the planned split's
median throughput against the fixed default's and against the best of the six (the best split
one could have picked offline by measuring all six). The goal: within 10% of the best and above
the fixed default in every cell.

The best of six medians measured in the same rounds overstates what that split runs at: where
the six run alike, the largest of six noisy medians is the luckiest, not the best split. So the
planned split is also compared with the best split held out: for each round, the split with the
best median over the other rounds, measured in that round, beside the planned split in the same
round; the median of those ratios. With two rounds or more the goal is judged on it.
"""

from __future__ import annotations

import statistics
from typing import Any

from seneca import defaults
from seneca._bench.report import by_configuration
from seneca_base.split import Split

__all__ = ["FIXED", "OFFLINE", "SPLITS", "compare", "held_out", "loaders", "markdown"]

#: The six splits (E, D, A in percent) of the paper's model validation
#: (``seneca._bench.validate``): each tier alone and the three 50/50 pairs.
SPLITS = ((100, 0, 0), (0, 100, 0), (0, 0, 100), (50, 50, 0), (50, 0, 50), (0, 50, 50))

#: The fixed split that was the default before the loader planned its own.
FIXED = Split.of(defaults.SPLIT).text()
#: The six splits measured offline (the model validation's).
OFFLINE = tuple("-".join(map(str, s)) for s in SPLITS)
#: The planned split is within this fraction of the best offline split.
WITHIN = 0.10


def loaders(kind: str = "seneca") -> list[str]:
    """The ``--loaders`` of a comparison: ``kind@auto``, ``kind@`` the fixed split and the six."""
    return [f"{kind}@{s}" for s in ("auto", FIXED, *OFFLINE)]


def _rounds(group: dict[str, Any]) -> dict[int, float]:
    return {r.get("round", 0): r["aggregate_samples_per_s"] for r in group["runs"]}


def held_out(auto: dict[int, float], offline: dict[str, dict[int, float]]) -> float | None:
    """The planned split's throughput over the best offline split's, held out: per round
    (``auto`` and each of ``offline`` map rounds to throughputs), the ratio to the split with
    the best median over the other rounds, in that round; their median. None with fewer than
    two rounds that every split ran."""
    rounds = set(auto).intersection(*offline.values()) if offline else set()
    if len(rounds) < 2:
        return None
    ratios = []
    for h in sorted(rounds):
        others = rounds - {h}
        best = max(offline, key=lambda s: statistics.median(offline[s][r] for r in others))
        ratios.append(auto[h] / offline[best][h])
    return statistics.median(ratios)


def compare(result: dict[str, Any], kind: str = "seneca") -> list[dict[str, Any]]:
    """Per (cache fraction, jobs) where ``kind@auto`` ran: its median throughput (``auto``),
    the splits it ended with (each job's), the fixed split's median (``fixed``) and the best
    offline split with its median (``best_split``, ``best``), the ratios (``vs_best``,
    ``vs_fixed``, ``vs_held_out``: see :func:`held_out`), and whether the goal was met
    (``None`` where a split it needs did not run)."""
    by = by_configuration(result)
    out = []
    for (frac, workers, k, loader), g in by.items():
        if loader != f"{kind}@auto":
            continue
        fixed = by.get((frac, workers, k, f"{kind}@{FIXED}"))
        groups = {s: by[(frac, workers, k, f"{kind}@{s}")] for s in OFFLINE
                  if (frac, workers, k, f"{kind}@{s}") in by}  # fmt: skip
        offline = {s: group["median"] for s, group in groups.items()}
        best_split = max(offline, key=offline.__getitem__) if offline else None
        row: dict[str, Any] = {
            "cache_frac": frac,
            "workers": workers,
            "jobs": k,
            "auto": g["median"],
            "planned": [j.get("split", "?") for j in g["median_run"]["per_job"]],
            "fixed": fixed["median"] if fixed else None,
            "best_split": best_split,
            "best": offline.get(best_split) if best_split else None,
        }
        row["vs_best"] = row["auto"] / row["best"] if row["best"] else None
        row["vs_fixed"] = row["auto"] / row["fixed"] if row["fixed"] else None
        row["vs_held_out"] = held_out(_rounds(g), {s: _rounds(x) for s, x in groups.items()})
        vs = row["vs_held_out"] if row["vs_held_out"] is not None else row["vs_best"]
        complete = vs is not None and row["vs_fixed"] is not None
        row["met"] = (vs >= 1 - WITHIN and row["vs_fixed"] > 1) if complete else None
        out.append(row)
    return sorted(out, key=lambda r: (r["cache_frac"], r["workers"], r["jobs"]))


def _num(value: float | None, form: str) -> str:
    return "-" if value is None else format(value, form)


def markdown(rows: list[dict[str, Any]]) -> str:
    """:func:`compare`'s rows as a markdown table."""
    lines = [
        "| cache | jobs | auto samples/s | split planned (at the end) | fixed "
        + FIXED
        + " | best of the six (split) | auto / best | auto / best, held out | auto / fixed"
        + " | goal |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        goal = {True: "met", False: "MISSED", None: "-"}[r["met"]]
        lines.append(
            f"| {r['cache_frac']:.0%} | {r['jobs']} | {r['auto']:,.1f} | "
            f"{', '.join(dict.fromkeys(r['planned']))} | {_num(r['fixed'], ',.1f')} | "
            f"{_num(r['best'], ',.1f')} ({r['best_split'] or '-'}) | "
            f"{_num(r['vs_best'], '.2f')} | {_num(r.get('vs_held_out'), '.2f')} | "
            f"{_num(r['vs_fixed'], '.2f')} | {goal} |"
        )
    return "\n".join(lines) + "\n"
