"""``seneca validate-model``: the MDP models against measured throughput (the paper's Fig. 8).

For each dataset size relative to the cache (``--sizes``: encoded dataset bytes / cache bytes;
the cache is resized, the data stays) and each of six splits (encoded, decoded, augmented
alone; the three 50/50 pairs), plus the split the default model plans for that size, it
measures the stable-epoch throughput of K concurrent jobs (``seneca bench``'s machinery;
aggregate samples/s over the jobs) and predicts it with both MDP models from a spec (``--spec``,
or this machine's ``mdp profile``). The spec is set to the run: its dataset, the K jobs, the
cache size, the crop's bytes (``dataset.augmented_ratio``), ``node.pipelined`` (false without
workers: one sample in flight per job), with ``--storage-mbps`` the emulated storage bandwidth,
and GPU, NIC and PCIe rates of 1e12 (the jobs run no GPU step and read a local cache).

The loader measured is ``mdp`` by default: the cache split as planned, plain random sampling.
That is what the models describe; ODS (``--loader seneca``) raises hit rates beyond the tiers'
sizes, which no MDP model predicts.

Reported per model: Pearson r and the mean absolute percentage error over all points, and
Pearson r per split over the sizes (the paper's figure: one line per split, r >= 0.90 for each).
Per size: the planned split's measured throughput relative to the best measured split. Writes
``points.json`` and ``validation.png``.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from seneca._bench.provenance import provenance
from seneca._bench.splits import SPLITS
from seneca_base.errors import ConfigError
from seneca_base.split import Split

__all__ = ["SPLITS", "pearson", "run_validation", "summarise"]

_MODELS = ("paper", "shared")
#: What the measured jobs do not pass through: no GPU step, no NIC (a local cache), no PCIe.
_ABSENT = {
    "node.gpu_samples_per_s": 1e12,
    "node.nic_gbit_per_s": 1e12,
    "node.pcie_gbyte_per_s": 1e12,
}


def pearson(xs: list[float], ys: list[float]) -> float:
    """Pearson's correlation coefficient (nan when either side is constant)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sx = math.sqrt(sum((x - mx) ** 2 for x in xs))
    sy = math.sqrt(sum((y - my) ** 2 for y in ys))
    return sxy / (sx * sy) if sx > 0 and sy > 0 else float("nan")


def _mape(measured: list[float], predicted: list[float]) -> float:
    return (
        100 * sum(abs(p - m) / m for m, p in zip(measured, predicted, strict=True)) / len(measured)
    )


def summarise(points: list[dict[str, Any]]) -> dict[str, Any]:
    """Per model: pooled Pearson r and MAPE, Pearson r per split over the sizes; per size: the
    planned split's measured throughput over the best measured one (``planned_vs_best``)."""
    six = {"-".join(map(str, s)) for s in SPLITS}
    fig = [p for p in points if p["split"] in six]
    measured = [p["measured"] for p in fig]
    out: dict[str, Any] = {}
    for model in _MODELS:
        per_split = {}
        for split in dict.fromkeys(p["split"] for p in fig):
            line = [p for p in fig if p["split"] == split]
            per_split[split] = pearson([p["measured"] for p in line], [p[model] for p in line])
        out[model] = {
            "pearson_r": pearson(measured, [p[model] for p in fig]),
            "mape": _mape(measured, [p[model] for p in fig]),
            "pearson_r_per_split": per_split,
        }
    out["planned_vs_best"] = {}
    for r in dict.fromkeys(p["size_ratio"] for p in points):
        here = [p for p in points if p["size_ratio"] == r]
        planned = [p for p in here if p.get("planned")]
        if planned:
            best = max(p["measured"] for p in here)
            out["planned_vs_best"][str(r)] = planned[0]["measured"] / best
    return out


def _check_options(sizes: tuple[float, ...], loader: str, epochs: int) -> None:
    if not sizes or any(s <= 0 for s in sizes):
        raise ConfigError(f"--sizes: expected positive ratios such as 0.5,1,2, got {sizes}")
    if loader not in ("mdp", "seneca"):
        raise ConfigError(f"--loader: expected mdp or seneca, got {loader!r}")
    if epochs < 2:
        raise ConfigError(f"--epochs: need 2 or more (the first fills the cache), got {epochs}")


def run_validation(
    data: str,
    out: str,
    spec: str | None = None,
    sizes: tuple[float, ...] = (0.5, 1.0, 2.0),
    jobs: int = 2,
    epochs: int = 3,
    crop: int = 224,
    workers: int = 0,
    loader: str = "mdp",
    storage_mbps: float | None = None,
    progress: bool = True,
    splits: tuple[tuple[int, int, int], ...] = SPLITS,
) -> dict[str, Any]:
    """Measure and predict every (size, split); see the module docstring. ``splits``: the
    fixed splits measured at each size (default: the six of the figure)."""
    from tqdm import tqdm

    from mdp.planner import predict
    from seneca._bench.harness import BenchConfig, clear_cache, run_configuration
    from seneca._cache.embedded import acquire_embedded
    from seneca.pipeline.storage import Storage

    _check_options(sizes, loader, epochs)
    run = dict(epochs=epochs, crop=crop, workers=workers, storage_mbps=storage_mbps)
    cfg = BenchConfig(data=data, out=out, loaders=(loader,), jobs=(jobs,), **run)
    cfg.check()
    storage = Storage.from_folder(data)
    n = len(storage)
    encoded = sum(os.path.getsize(storage.path(i)) for i in range(n))
    Path(out).mkdir(parents=True, exist_ok=True)
    spec = spec or _profiled(data, out)
    base = _validation_spec(spec, n, encoded, jobs, crop, workers, storage_mbps)
    url = acquire_embedded(int(encoded / min(sizes) * 1.5) + 64_000_000, name="validate", idle=0)
    points = []
    for r, sized, split, is_plan in tqdm(
        _runs(base, sizes, encoded, splits), desc="validate-model", unit="run", disable=not progress
    ):
        cfg.split = tuple(Split.from_percent(split).fractions.values())
        clear_cache(url)
        run = run_configuration(cfg, loader, jobs, url, max(1, int(encoded / r)), n)
        point = {"size_ratio": r, "split": "-".join(map(str, split)), "planned": is_plan}
        point["measured"] = sum(j["stable_samples_per_s"] for j in run["per_job"])
        point.update({m: predict(sized, split, m).throughput for m in _MODELS})
        points.append(point)
    clear_cache(url)
    result: dict[str, Any] = {
        "jobs": jobs,
        "epochs": epochs,
        "loader": loader,
        "storage_mbps": storage_mbps,
        "spec": spec,
        "points": points,
        **summarise(points),
        "provenance": provenance(),
    }
    Path(out, "points.json").write_text(json.dumps(result, indent=2) + "\n")
    _plot(result, Path(out, "validation.png"))
    return result


def _profiled(data: str, out: str) -> str:
    """A spec of this machine, profiled now (``mdp profile``) into ``out``."""
    from seneca._bench.profile import profile_command

    spec = str(Path(out, "spec.toml"))
    profile_command(data, spec, seconds=1.0)
    return spec


def _validation_spec(
    spec: str,
    n: int,
    encoded: int,
    jobs: int,
    crop: int,
    workers: int,
    storage_mbps: float | None,
) -> Any:
    """``spec`` with the dataset, jobs and loader of the measurements."""
    from mdp.spec import load_spec

    base = load_spec(spec)
    changes: dict[str, Any] = {
        "dataset.samples": n,
        "dataset.sample_kb": encoded / n / 1e3,
        "cluster.jobs": jobs,
        "dataset.augmented_ratio": crop * crop * 3 / (base.inflation * encoded / n),
        "node.pipelined": workers > 0,
        **_ABSENT,
    }
    if storage_mbps:
        changes["storage.bandwidth_mbyte_per_s"] = storage_mbps
    for name, value in changes.items():
        base = base.replace(name, value)
    return base


def _runs(base: Any, sizes: tuple[float, ...], encoded: int, splits: tuple) -> list[tuple]:
    """(size ratio, spec at that cache size, split, whether planned) per measurement: the
    fixed ``splits`` and, when it is another, the planned one."""
    from mdp.planner import DEFAULT_MODEL, plan

    todo = []
    for r in sizes:
        sized = base.replace("cache.size_gb", encoded / r / 1e9)
        planned = plan(sized, DEFAULT_MODEL).split.percent
        todo += [(r, sized, s, s == planned) for s in splits]
        if planned not in splits:
            todo.append((r, sized, planned, True))
    return todo


def _plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    six = ["-".join(map(str, s)) for s in SPLITS]
    planned = [p for p in result["points"] if p["planned"]]
    for ax, model in zip(axes, _MODELS, strict=True):
        for k, split in enumerate(six):
            pts = [p for p in result["points"] if p["split"] == split]
            xs = [p["size_ratio"] for p in pts]
            color = f"C{k}"
            ax.plot(xs, [p[model] for p in pts], color=color, label=split)
            ax.scatter(xs, [p["measured"] for p in pts], color=color, marker="o")
        ax.scatter(
            [p["size_ratio"] for p in planned],
            [p["measured"] for p in planned],
            color="black",
            marker="*",
            s=80,
            label="planned split, measured",
        )
        r = result[model]["pearson_r"]
        ax.set_title(f"{model} model (lines) vs measured (dots), r = {r:.3f}", fontsize=10)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("encoded dataset size / cache size")
    axes[0].set_ylabel("samples/s")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
