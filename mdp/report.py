"""Readable output of the planner: tables for ``mdp plan`` / ``predict`` / ``sweep`` and the
sweep plot."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mdp.model import BOUND_LABELS, TIERS
from mdp.planner import SPLIT_TIERS, Prediction
from mdp.spec import Spec
from seneca_base.tiers import NOTATION
from seneca_base.units import format_size

__all__ = ["format_prediction", "format_sweep", "plot_sweep"]


def _table(header: Sequence[str], rows: list[Sequence[str]], right: set[int]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(r: Sequence[str]) -> str:
        cells = [
            str(c).rjust(w) if i in right else str(c).ljust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        return "  ".join(cells).rstrip()

    return [line(header), *(line(r) for r in rows)]


def format_prediction(pred: Prediction, spec: Spec, title: str) -> str:
    """The table ``mdp plan`` and ``mdp predict`` print."""
    split = ", ".join(f"{t} {v}%" for t, v in zip(SPLIT_TIERS, pred.split.percent, strict=True))
    encoded = spec.samples * spec.sample_kb * 1e3
    lines = [
        f"{title} (model: {pred.model})",
        f"split {NOTATION:<10} {pred.split_text()}  ({split})",
        f"throughput       {pred.throughput:,.1f} samples/s (predicted)",
    ]
    if pred.bound is not None:
        lines.append(f"bound            {BOUND_LABELS[pred.bound]}")
    lines += [
        f"cache            {format_size(pred.cache_bytes)}; dataset {spec.samples:,} samples, "
        f"{format_size(encoded)} encoded, {format_size(encoded * spec.inflation)} decoded",
        "",
    ]
    rows = [
        (
            t,
            f"{r.dsi:,.1f}",
            BOUND_LABELS[r.bound],
            f"{r.samples:,}",
            f"{100 * r.samples / spec.samples:.1f}%",
            format_size(r.bytes),
        )
        for t, r in ((t, pred.tiers[t]) for t in TIERS)
    ]
    header = ("tier", "DSI (samples/s)", "bound", "samples", "of data", "bytes")
    lines += _table(header, rows, right={1, 3, 4, 5})
    lines.append(
        "DSI: the data storage and ingestion pipeline's rate for samples read from that tier"
    )
    return "\n".join(lines) + "\n"


def _cached_pct(pred: Prediction, samples: int) -> str:
    return f"{100 * (1 - pred.tiers['storage'].samples / samples):.1f}%"


def format_sweep(
    param: str, results: list[tuple[Any, Prediction]], samples_of: list[int], title: str
) -> str:
    """The table ``mdp sweep`` prints: best split and throughput per value of ``param``."""
    shared = any(p.bound is not None for _, p in results)
    header = [param, f"split {NOTATION}", "throughput", "cached"]
    if shared:
        header.append("bound")
    rows = []
    for (value, pred), samples in zip(results, samples_of, strict=True):
        row = [f"{value:g}" if isinstance(value, float) else str(value)]
        row += [pred.split_text(), f"{pred.throughput:,.1f}", _cached_pct(pred, samples)]
        if shared:
            row.append(BOUND_LABELS[pred.bound] if pred.bound else "")
        rows.append(row)
    model = results[0][1].model if results else ""
    lines = [f"{title} (model: {model})", ""]
    lines += _table(header, rows, right={2, 3})
    return "\n".join(lines) + "\n"


def plot_sweep(param: str, results: list[tuple[Any, Prediction]], path: str, title: str) -> None:
    """Write a PNG: predicted throughput (top) and the best split (bottom) per value."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{v:g}" if isinstance(v, float) else str(v) for v, _ in results]
    x = list(range(len(results)))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    top.plot(x, [p.throughput for _, p in results], marker="o")
    for xi, (_, p) in zip(x, results, strict=True):
        top.annotate(
            p.split_text(),
            (xi, p.throughput),
            textcoords="offset points",
            xytext=(0, 6),
            ha="center",
            fontsize=8,
        )
    top.set_ylabel("predicted samples/s")
    top.set_title(title)
    base = [0.0] * len(results)
    for i, tier in enumerate(SPLIT_TIERS):
        share = [p.split.percent[i] for _, p in results]
        bottom.bar(x, share, bottom=base, label=tier)
        base = [b + s for b, s in zip(base, share, strict=True)]
    bottom.set_ylabel("cache split (%)")
    bottom.set_xticks(x, labels)
    bottom.set_xlabel(param)
    bottom.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
