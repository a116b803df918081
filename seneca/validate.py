"""``seneca validate-model``: the MDP models against measured throughput (the paper's Fig. 8).

For each dataset size relative to the cache (``--sizes``: encoded dataset bytes / cache bytes;
the cache is resized, the data stays) and each of six splits (encoded, decoded, augmented
alone; the three 50/50 pairs) it measures the stable-epoch throughput of K concurrent
SenecaLoader jobs (``seneca bench``'s machinery; aggregate samples/s over the jobs) and
predicts it with both MDP models from a spec (``--spec``, or this machine's ``mdp profile``).
It prints Pearson r and the mean absolute percentage error per model and writes the points
(``points.json``, ``validation.png``).

With one job the augmented tier stays empty by design (a job never gets an augmented copy
back), so augmented splits measure the storage path there; use ``--jobs 2`` or more to let
jobs share augmented copies.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from seneca.errors import ConfigError

__all__ = ["SPLITS", "pearson", "run_validation"]

#: The six splits (E, D, A in percent) of the paper's validation.
SPLITS = ((100, 0, 0), (0, 100, 0), (0, 0, 100), (50, 50, 0), (50, 0, 50), (0, 50, 50))


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


def run_validation(
    data: str,
    out: str,
    spec: str | None = None,
    sizes: tuple[float, ...] = (0.5, 1.0, 2.0),
    jobs: int = 2,
    epochs: int = 2,
    crop: int = 224,
    workers: int = 1,
    progress: bool = True,
) -> dict[str, Any]:
    """Measure and predict every (size, split); see the module docstring."""
    from tqdm import tqdm

    from mdp.planner import predict
    from mdp.spec import load_spec
    from seneca.bench import BenchConfig, clear_cache, run_configuration
    from seneca.storage import Storage

    if not sizes or any(s <= 0 for s in sizes):
        raise ConfigError(f"--sizes: expected positive ratios such as 0.5,1,2, got {sizes}")
    storage = Storage.from_folder(data)
    n = len(storage)
    encoded = sum(os.path.getsize(storage.path(i)) for i in range(n))
    Path(out).mkdir(parents=True, exist_ok=True)
    if spec is None:
        from seneca.profile import profile_command

        spec = str(Path(out, "spec.toml"))
        profile_command(data, spec, seconds=1.0)
    base = load_spec(spec).replace("dataset.samples", n)
    base = base.replace("dataset.sample_kb", encoded / n / 1e3)
    from seneca.embedded import acquire_embedded

    url = acquire_embedded(int(encoded / min(sizes) * 1.5) + 64_000_000, name="validate")
    points = []
    todo = [(r, split) for r in sizes for split in SPLITS]
    for r, split in tqdm(todo, desc="validate-model", unit="run", disable=not progress):
        cache_bytes = max(1, int(encoded / r))
        cfg = BenchConfig(
            data=data,
            out=out,
            epochs=epochs,
            crop=crop,
            workers=workers,
            split=tuple(v / 100 for v in split),
        )
        clear_cache(url)
        run = run_configuration(cfg, "seneca", jobs, url, cache_bytes, n)
        measured = sum(j["stable_samples_per_s"] for j in run["per_job"])
        sized = base.replace("cache.size_gb", cache_bytes / 1e9)
        points.append(
            {
                "size_ratio": r,
                "split": "-".join(map(str, split)),
                "measured": measured,
                "paper": predict(sized, split, "paper").throughput,
                "shared": predict(sized, split, "shared").throughput,
            }
        )
    clear_cache(url)
    measured = [p["measured"] for p in points]
    result: dict[str, Any] = {"jobs": jobs, "epochs": epochs, "spec": spec, "points": points}
    for model in ("paper", "shared"):
        predicted = [p[model] for p in points]
        result[model] = {
            "pearson_r": pearson(measured, predicted),
            "mape": _mape(measured, predicted),
        }
    Path(out, "points.json").write_text(json.dumps(result, indent=2) + "\n")
    _plot(result, Path(out, "validation.png"))
    return result


def _plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, model in zip(axes, ("paper", "shared"), strict=True):
        for k, split in enumerate(dict.fromkeys(p["split"] for p in result["points"])):
            pts = [p for p in result["points"] if p["split"] == split]
            xs = [p["size_ratio"] for p in pts]
            color = f"C{k}"
            ax.plot(xs, [p[model] for p in pts], color=color, label=split)
            ax.scatter(xs, [p["measured"] for p in pts], color=color, marker="o")
        r = result[model]["pearson_r"]
        ax.set_title(f"{model} model (lines) vs measured (dots), r = {r:.2f}")
        ax.set_xlabel("encoded dataset size / cache size")
    axes[0].set_ylabel("samples/s")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
