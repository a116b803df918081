"""The planned split against fixed ones, from one ``seneca bench`` run.

Run ``seneca@auto`` (the loader plans its split), ``seneca@50-30-20`` (the old fixed default)
and the six splits of the model validation (``seneca@100-0-0`` ... ``seneca@0-50-50``) side by
side; :func:`compare` then gives, per cache fraction and number of jobs, the planned split's
median throughput against the fixed default's and against the best of the six (the best split
one could have picked offline by measuring all six). The goal: within 10% of the best and above
the fixed default in every cell.
"""

from __future__ import annotations

from typing import Any

from seneca import defaults
from seneca.bench.report import by_configuration
from seneca_base.tiers import SPLIT_ORDER

__all__ = ["FIXED", "OFFLINE", "SPLITS", "compare", "loaders", "markdown"]

#: The six splits (E, D, A in percent) of the paper's model validation
#: (``seneca.bench.validate``): each tier alone and the three 50/50 pairs.
SPLITS = ((100, 0, 0), (0, 100, 0), (0, 0, 100), (50, 50, 0), (50, 0, 50), (0, 50, 50))

#: The fixed split that was the default before the loader planned its own.
FIXED = "-".join(f"{100 * defaults.SPLIT[t]:.0f}" for t in SPLIT_ORDER)
#: The six splits measured offline (the model validation's).
OFFLINE = tuple("-".join(map(str, s)) for s in SPLITS)
#: The planned split is within this fraction of the best offline split.
WITHIN = 0.10


def loaders(kind: str = "seneca") -> list[str]:
    """The ``--loaders`` of a comparison: ``kind@auto``, ``kind@`` the fixed split and the six."""
    return [f"{kind}@{s}" for s in ("auto", FIXED, *OFFLINE)]


def compare(result: dict[str, Any], kind: str = "seneca") -> list[dict[str, Any]]:
    """Per (cache fraction, jobs) where ``kind@auto`` ran: its median throughput (``auto``),
    the splits it ended with (each job's), the fixed split's median (``fixed``) and the best
    offline split with its median (``best_split``, ``best``), the ratios, and whether the goal
    was met (``None`` where a split it needs did not run)."""
    by = by_configuration(result)
    out = []
    for (frac, workers, k, loader), g in by.items():
        if loader != f"{kind}@auto":
            continue
        fixed = by.get((frac, workers, k, f"{kind}@{FIXED}"))
        offline = {s: by[(frac, workers, k, f"{kind}@{s}")]["median"] for s in OFFLINE
                   if (frac, workers, k, f"{kind}@{s}") in by}  # fmt: skip
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
        complete = row["vs_best"] is not None and row["vs_fixed"] is not None
        row["met"] = (row["vs_best"] >= 1 - WITHIN and row["vs_fixed"] > 1) if complete else None
        out.append(row)
    return sorted(out, key=lambda r: (r["cache_frac"], r["workers"], r["jobs"]))


def _num(value: float | None, form: str) -> str:
    return "-" if value is None else format(value, form)


def markdown(rows: list[dict[str, Any]]) -> str:
    """:func:`compare`'s rows as a markdown table."""
    lines = [
        "| cache | jobs | auto samples/s | split planned (at the end) | fixed "
        + FIXED
        + " | best of the six (split) | auto / best | auto / fixed | goal |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        goal = {True: "met", False: "MISSED", None: "-"}[r["met"]]
        lines.append(
            f"| {r['cache_frac']:.0%} | {r['jobs']} | {r['auto']:,.1f} | "
            f"{', '.join(dict.fromkeys(r['planned']))} | {_num(r['fixed'], ',.1f')} | "
            f"{_num(r['best'], ',.1f')} ({r['best_split'] or '-'}) | "
            f"{_num(r['vs_best'], '.2f')} | {_num(r['vs_fixed'], '.2f')} | {goal} |"
        )
    return "\n".join(lines) + "\n"
