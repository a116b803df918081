"""Reports of ``seneca bench``: a markdown table and PNG plots from ``results.json`` data."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

__all__ = ["by_configuration", "format_targets", "groups", "markdown", "targets", "write_reports"]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _setting(result: dict[str, Any], run: dict[str, Any], name: str) -> Any:
    """The ``cache_frac`` or ``workers`` ``run`` ran with (results of one value may not record
    it in the run)."""
    value = run.get(name, result.get("config", {}).get(name, 0))
    return value[0] if isinstance(value, list) else value


Key = tuple[float, int, int, str]  # cache fraction, workers per job, jobs, loader


def groups(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The runs of each (cache fraction, workers, jobs, loader): their aggregate throughputs
    (every round), the median and the run whose throughput is the median (its other figures
    stand for the group)."""
    out: dict[Key, dict[str, Any]] = {}
    for r in result["runs"]:
        frac, workers = _setting(result, r, "cache_frac"), _setting(result, r, "workers")
        key = (frac, workers, r["jobs"], r["loader"])
        g = out.setdefault(
            key, dict(zip(("cache_frac", "workers", "jobs", "loader"), key, strict=True))
        )
        g.setdefault("runs", []).append(r)
    for g in out.values():
        ranked = sorted(g["runs"], key=lambda r: r["aggregate_samples_per_s"])
        g["rates"] = [r["aggregate_samples_per_s"] for r in g["runs"]]
        g["median_run"] = ranked[(len(ranked) - 1) // 2]
        g["median"] = statistics.median(g["rates"])
    return sorted(out.values(), key=lambda g: (g["cache_frac"], g["workers"], g["jobs"]))


def key_of(g: dict[str, Any], loader: str | None = None) -> Key:
    """The key of group ``g`` (of ``loader`` in the same setting, when given)."""
    return (g["cache_frac"], g["workers"], g["jobs"], loader or g["loader"])


def by_configuration(result: dict[str, Any]) -> dict[Key, dict[str, Any]]:
    """:func:`groups` by (cache fraction, workers, jobs, loader)."""
    return {key_of(g): g for g in groups(result)}


def _ratio(by: dict[Key, dict[str, Any]], g: dict[str, Any], base: str) -> str:
    """``g``'s median throughput over loader ``base``'s in the same setting ("-": not run)."""
    other = by.get(key_of(g, base))
    return f"{g['median'] / other['median']:.2f}x" if other else "-"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _listed(value: Any) -> str:
    return " / ".join(str(v) for v in value) if isinstance(value, list) else str(value)


def _cache_text(cfg: dict[str, Any]) -> str:
    fracs, sizes = (
        v if isinstance(v, list) else [v] for v in (cfg["cache_frac"], cfg["cache_bytes"])
    )
    return (
        f"cache {' / '.join(f'{f:.0%}' for f in fracs)} of the encoded data "
        f"({' / '.join(f'{b / 1e6:,.0f}' for b in sizes)} MB)"
    )


def _header(cfg: dict[str, Any]) -> str:
    return (
        f"`seneca bench`: {cfg['samples']:,} images ({cfg['encoded_bytes'] / 1e6:,.0f} MB), "
        f"{_cache_text(cfg)}, "
        f"{cfg['epochs']} epochs, batch {cfg['batch_size']}, "
        f"{_listed(cfg['workers'])} worker(s) per job"
        + (
            f" loading {cfg['prefetch_factor']} batch(es) ahead, "
            if cfg.get("prefetch_factor")
            else ", "
        )
        + f"crop {cfg['crop']}, "
        + _step_text(cfg)
        + ", storage "
        + (f"{cfg['storage_mbps']:g} MB/s (emulated)" if cfg["storage_mbps"] else "local disk")
        + f"; {cfg.get('repeats', 1)} round(s), each in its own shuffled order; page cache "
        + ("dropped" if cfg.get("page_cache") == "drop" else "warmed")
        + " before each configuration"
    )


def _at_least(bound: dict | None) -> str:
    """A run's decode ceiling, beside its decodes (nothing without one)."""
    return "" if not bound else f" (ceiling {bound['decodes_per_sample_epoch']:.2f})"


def _cores(cpu: dict[str, float] | None) -> str:
    """A run's cache server CPU: all threads (main thread), in cores."""
    return "-" if not cpu else f"{cpu['cores']:.2f} ({cpu['main_thread']:.2f})"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _step_text(cfg: dict[str, Any]) -> str:
    """What each job does per batch."""
    if cfg.get("model"):
        return f"a {cfg['model']} training step on {cfg.get('device') or 'cpu'}"
    step = f"step {cfg['step_ms']:g} ms"
    if cfg.get("step_gil_ms"):
        step += f" ({cfg['step_gil_ms']:g} ms of it holding the GIL)"
    if cfg.get("speeds"):
        step += f" at speeds {':'.join(f'{v:g}' for v in cfg['speeds'])} (divided by each job's)"
    return step + (f", batches on {cfg['device']}" if cfg.get("device") else "")


def markdown(result: dict[str, Any]) -> str:
    """The results as a markdown table: per (jobs, loader) the median aggregate throughput over
    the rounds with its range, ratios of the medians to the DataLoader baselines at the same K
    (``pytorch-tuned``: DataLoader with SenecaLoader's non-cache tricks; ``pytorch``: as is),
    and the median run's other figures."""
    gs = groups(result)
    by = by_configuration(result)
    # a column for a setting that differs between configurations
    shown = [n for n in ("cache_frac", "workers") if len({g[n] for g in gs}) > 1]
    idle = bool(result["config"].get("step_ms"))  # the emulated GPU's idle share
    busy = any(r.get("gpu_busy") is not None for r in result["runs"])  # measured by NVML
    ceiling = any(g["loader"] == "none" for g in gs)
    served = any(r.get("cache_cpu") for r in result["runs"])  # the server's cores
    loop = any(
        j.get("loop_cpu_ms_per_batch") is not None for r in result["runs"] for j in r["per_job"]
    )
    lines = [
        _header(result["config"]),
        "",
        "".join(f"| {'cache' if n == 'cache_frac' else n} " for n in shown)
        + "| jobs | loader | aggregate samples/s (median, min-max) | vs pytorch-tuned | vs pytorch"
        + (" | of the ceiling (none)" if ceiling else "")
        + " | makespan s | first-epoch samples/s (mean/job) | stable samples/s (mean/job) |"
        " hit aug / dec / enc | crops made by another job (per job) | decodes per sample-epoch"
        " | CPU |"
        + (" GPU idle (per job) |" if idle else "")
        + (" GPU busy |" if busy else "")
        + (" loop CPU ms/batch (per job) |" if loop else "")
        + (" cache server CPU (main thread) |" if served else ""),
        "|---" * (len(shown) + 12 + idle + busy + ceiling + loop + served) + "|",
    ]
    for g in gs:
        r, jobs = g["median_run"], g["median_run"]["per_job"]
        hit = [_mean([j["hit_rate"][t] for j in jobs]) for t in ("augmented", "decoded", "encoded")]
        rates = g["rates"]
        spread = f" ({min(rates):,.1f}-{max(rates):,.1f})" if len(rates) > 1 else ""
        ratios = [_ratio(by, g, base) for base in ("pytorch-tuned", "pytorch")]
        if ceiling:
            ratios.append(_ratio(by, g, "none").replace("x", "") if g["loader"] != "none" else "1")
        cells = "".join(f"| {g[n]:.0%} " if n == "cache_frac" else f"| {g[n]} " for n in shown)
        lines.append(
            cells
            + f"| {g['jobs']} | {g['loader']} | {g['median']:,.1f}{spread} | "
            + " | ".join(ratios)
            + f" | {r['makespan_s']:.1f} | "
            f"{_mean([j['first_epoch_samples_per_s'] for j in jobs]):,.1f} | "
            f"{_mean([j['stable_samples_per_s'] for j in jobs]):,.1f} | "
            f"{hit[0]:.2f} / {hit[1]:.2f} / {hit[2]:.2f} | "
            + " / ".join(f"{j.get('crops_from_other_jobs', 0.0):.2f}" for j in jobs)
            + f" | {r['decodes_per_sample_epoch']:.2f}{_at_least(r.get('ceiling'))}"
            + f" | {r['cpu_utilisation']:.0%} |"
            + (
                " " + " / ".join(f"{j.get('gpu_idle') or 0:.0%}" for j in jobs) + " |"
                if idle
                else ""
            )
            + (f" {_percent(r.get('gpu_busy'))} |" if busy else "")
            + (
                " " + " / ".join(_ms(j.get("loop_cpu_ms_per_batch")) for j in jobs) + " |"
                if loop
                else ""
            )
            + (f" {_cores(r.get('cache_cpu'))} |" if served else "")
        )
    return "\n".join(lines) + "\n"


def _round_ratios(seneca: dict[str, Any], bases: list[dict[str, Any]]) -> list[float]:
    """Seneca's throughput over the best of ``bases`` in each round where all of them ran (the
    pairs measured side by side), in the order of the rounds."""
    rates: dict[int, list[float]] = {}
    for g in bases:
        for r in g["runs"]:
            rates.setdefault(r.get("round", 0), []).append(r["aggregate_samples_per_s"])
    out = []
    for r in sorted(seneca["runs"], key=lambda r: r.get("round", 0)):
        base = rates.get(r.get("round", 0), [])
        if len(base) == len(bases) and max(base) > 0:
            out.append(r["aggregate_samples_per_s"] / max(base))
    return out


def targets(result: dict[str, Any], jobs: int = 3) -> list[dict[str, Any]]:
    """Seneca's headline targets at ``jobs`` concurrent jobs, from the medians: aggregate
    throughput >= 2.0x ``pytorch-tuned``, >= 2.5x ``pytorch`` and >= 1.5x the better of MINIO
    and Quiver; decodes per sample-epoch (the median run's) <= 1.2. Only those whose loaders
    ran are listed, each with ``target``, ``measured``, ``goal`` and ``met``; a throughput
    target also with ``rounds``, its ratio in each round (:func:`_round_ratios`)."""
    by = {(k, loader): g for (_, _, k, loader), g in by_configuration(result).items()}
    seneca = by.get((jobs, "seneca"))
    if seneca is None or len({key_of(g)[:2] for g in groups(result)}) > 1:
        return []  # stated for one cache size and one number of workers
    out = []
    for name, bases, goal in (
        ("vs pytorch-tuned", ["pytorch-tuned"], 2.0),
        ("vs pytorch", ["pytorch"], 2.5),
        ("vs the better of minio and quiver", ["minio", "quiver"], 1.5),
    ):
        ran = [by[(jobs, b)] for b in bases if (jobs, b) in by]
        if ran:
            ratio = seneca["median"] / max(g["median"] for g in ran)
            out.append(
                {"target": name, "measured": ratio, "goal": goal, "met": ratio >= goal,
                 "rounds": _round_ratios(seneca, ran)}
            )  # fmt: skip
    decodes = seneca["median_run"]["decodes_per_sample_epoch"]
    out.append(
        {
            "target": "decodes per sample-epoch",
            "measured": decodes,
            "goal": 1.2,
            "met": decodes <= 1.2,
        }
    )
    return out


def _rounds_text(target: dict[str, Any]) -> str:
    """``; rounds 2.12, 2.03 (2 of 2 >= 2)`` for a target measured in more than one round."""
    rounds = target.get("rounds") or []
    if len(rounds) < 2:
        return ""
    met = sum(r >= target["goal"] for r in rounds)
    listed = ", ".join(f"{r:.2f}" for r in rounds)
    return f"; rounds {listed} ({met} of {len(rounds)} >= {target['goal']:g})"


def format_targets(result: dict[str, Any], jobs: int = 3) -> str:
    """:func:`targets` as markdown lines, each saying met or missed (and, over several rounds,
    each round's ratio)."""
    return "\n".join(
        f"- Seneca {t['target']}: {t['measured']:.2f} (goal "
        f"{'<=' if t['target'].startswith('decodes') else '>='} {t['goal']:g}): "
        f"{'met' if t['met'] else 'MISSED'}{_rounds_text(t)}"
        for t in targets(result, jobs)
    )


def _cell_label(cell: tuple[float, int, int], several: list[bool]) -> str:
    frac, workers, k = cell
    return (
        f"{k} job{'s' if k > 1 else ''}"
        + (f"\ncache {frac:.0%}" if several[0] else "")
        + (f"\n{workers} workers" if several[1] else "")
    )


def write_reports(result: dict[str, Any], out: str) -> None:
    """Write ``results.md``, ``throughput.png`` and ``decodes.png`` to ``out``."""
    Path(out, "results.md").write_text(markdown(result))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gs = groups(result)  # the median run of each configuration stands for it
    cells = sorted({key_of(g)[:3] for g in gs})
    several = [len({c[i] for c in cells}) > 1 for i in range(2)]
    loaders = list(dict.fromkeys(r["loader"] for r in result["runs"]))
    for name, key, label in (
        ("throughput.png", "aggregate_samples_per_s", "aggregate samples/s"),
        ("decodes.png", "decodes_per_sample_epoch", "decodes per sample-epoch (all jobs)"),
    ):
        fig, ax = plt.subplots(figsize=(max(7, 1.6 * len(cells)), 4))
        width = 0.8 / max(len(loaders), 1)
        for i, loader in enumerate(loaders):
            values = {key_of(g)[:3]: g["median_run"][key] for g in gs if g["loader"] == loader}
            xs = [c + (i - (len(loaders) - 1) / 2) * width for c in range(len(cells))]
            ax.bar(xs, [values.get(cell, 0) for cell in cells], width, label=loader)
        ax.set_xticks(range(len(cells)), [_cell_label(c, several) for c in cells])
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(Path(out, name), dpi=120)
        plt.close(fig)
