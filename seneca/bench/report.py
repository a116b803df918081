"""Reports of ``seneca bench``: a markdown table and PNG plots from ``results.json`` data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["markdown", "write_reports"]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _ratio(result: dict[str, Any], run: dict[str, Any], base: str) -> str:
    """``run``'s aggregate throughput over loader ``base``'s at the same K ("-": not run)."""
    for r in result["runs"]:
        if r["loader"] == base and r["jobs"] == run["jobs"]:
            return f"{run['aggregate_samples_per_s'] / r['aggregate_samples_per_s']:.2f}x"
    return "-"


def markdown(result: dict[str, Any]) -> str:
    """The results as a markdown table, with ratios to the DataLoader baselines at the same K
    (``pytorch-tuned``: DataLoader with SenecaLoader's non-cache tricks; ``pytorch``: as is)."""
    cfg = result["config"]
    lines = [
        f"`seneca bench`: {cfg['samples']:,} images ({cfg['encoded_bytes'] / 1e6:,.0f} MB), "
        f"cache {cfg['cache_frac']:.0%} of the encoded data ({cfg['cache_bytes'] / 1e6:,.0f} MB), "
        f"{cfg['epochs']} epochs, batch {cfg['batch_size']}, {cfg['workers']} worker(s) per job, "
        f"crop {cfg['crop']}, step {cfg['step_ms']:g} ms, storage "
        + (f"{cfg['storage_mbps']:g} MB/s (emulated)" if cfg["storage_mbps"] else "local disk"),
        "",
        "| jobs | loader | aggregate samples/s | vs pytorch-tuned | vs pytorch | makespan s |"
        " first-epoch samples/s (mean/job) | stable samples/s (mean/job) | hit aug / dec / enc"
        " | decodes per sample-epoch | CPU |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["runs"]:
        jobs = r["per_job"]
        hit = [_mean([j["hit_rate"][t] for j in jobs]) for t in ("augmented", "decoded", "encoded")]
        ratios = [_ratio(result, r, base) for base in ("pytorch-tuned", "pytorch")]
        lines.append(
            f"| {r['jobs']} | {r['loader']} | {r['aggregate_samples_per_s']:,.1f} | "
            + " | ".join(ratios)
            + f" | {r['makespan_s']:.1f} | "
            f"{_mean([j['first_epoch_samples_per_s'] for j in jobs]):,.1f} | "
            f"{_mean([j['stable_samples_per_s'] for j in jobs]):,.1f} | "
            f"{hit[0]:.2f} / {hit[1]:.2f} / {hit[2]:.2f} | "
            f"{r['decodes_per_sample_epoch']:.2f} | {r['cpu_utilisation']:.0%} |"
        )
    return "\n".join(lines) + "\n"


def write_reports(result: dict[str, Any], out: str) -> None:
    """Write ``results.md``, ``throughput.png`` and ``decodes.png`` to ``out``."""
    Path(out, "results.md").write_text(markdown(result))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = result["runs"]
    ks = sorted({r["jobs"] for r in runs})
    loaders = list(dict.fromkeys(r["loader"] for r in runs))
    for name, key, label in (
        ("throughput.png", "aggregate_samples_per_s", "aggregate samples/s"),
        ("decodes.png", "decodes_per_sample_epoch", "decodes per sample-epoch (all jobs)"),
    ):
        fig, ax = plt.subplots(figsize=(7, 4))
        width = 0.8 / max(len(loaders), 1)
        for i, loader in enumerate(loaders):
            values = {r["jobs"]: r[key] for r in runs if r["loader"] == loader}
            xs = [k + (i - (len(loaders) - 1) / 2) * width for k in ks]
            ax.bar(xs, [values.get(k, 0) for k in ks], width, label=loader)
        ax.set_xticks(ks, [f"{k} job{'s' if k > 1 else ''}" for k in ks])
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(Path(out, name), dpi=120)
        plt.close(fig)
