"""``seneca accuracy``: does training through Seneca reach the accuracy torch's DataLoader does,
and does sharing augmented crops between jobs change it?

The data is scikit-learn's handwritten digits (1,797 labelled 8x8 images that ship inside the
scikit-learn package), written out as 32x32 JPEGs in ImageFolder layout, 80% train / 20% test
(stratified, fixed seed). A small CNN trains on it K times concurrently (separate processes,
seeds 0..K-1) in each of three configurations, one after another:

- ``pytorch``: torch's DataLoader;
- ``seneca-shared``: SenecaLoader under ODS, the whole cache in the augmented tier: jobs train on
  crops other jobs made (a job never reads a crop it made), so their augmentations are
  correlated while each job's per-sample augmentation distribution is unchanged;
- ``seneca-unshared``: the same with the augmented tier off (encoded and decoded tiers only):
  every crop a job trains on is its own.

Each configuration starts from an empty cache (its keys are deleted afterwards). All report
the test accuracies (the test set is read with a plain DataLoader), their mean and spread, and
the Seneca runs the share of samples that were crops another job made, as counted.
"""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path
from typing import Any

from seneca._bench.provenance import provenance
from seneca._bench.spawn import ProcessGroup
from seneca_base.errors import ConfigError

__all__ = [
    "CONFIGS",
    "accuracy_of",
    "digit_sets",
    "fit",
    "format_accuracy",
    "run_accuracy",
    "summarise",
    "write_digits",
]

_SIZE = 32

#: The configurations, in the order they run: name -> the loader's split (None: DataLoader).
CONFIGS: dict[str, tuple[float, float, float] | None] = {
    "pytorch": None,
    "seneca-shared": (0.0, 0.0, 1.0),
    "seneca-unshared": (0.5, 0.5, 0.0),
}


def write_digits(root: str | Path, seed: int = 0) -> dict[str, int]:
    """Write the digits as JPEGs under ``root/train/<digit>/`` and ``root/test/<digit>/``."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise ConfigError("seneca accuracy needs scikit-learn: pip install scikit-learn") from None
    import numpy as np
    from PIL import Image

    digits = load_digits()
    by_class: dict[int, list[int]] = {}
    for i, y in enumerate(digits.target):
        by_class.setdefault(int(y), []).append(i)
    rng = random.Random(seed)
    counts = {"train": 0, "test": 0}
    for label, items in by_class.items():
        rng.shuffle(items)
        cut = int(len(items) * 0.8)
        for part, chosen in (("train", items[:cut]), ("test", items[cut:])):
            folder = Path(root, part, str(label))
            folder.mkdir(parents=True, exist_ok=True)
            for i in chosen:
                pixels = (digits.images[i] * (255 / 16)).clip(0, 255).astype(np.uint8)
                img = Image.fromarray(pixels, mode="L").resize((_SIZE, _SIZE), Image.BILINEAR)
                img.convert("RGB").save(folder / f"{i:04d}.jpg", quality=95)
                counts[part] += 1
    return counts


def _model() -> Any:
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * (_SIZE // 4) ** 2, 64),
        nn.ReLU(),
        nn.Linear(64, 10),
    )


def _loader(kind: str, train: Any, seed: int, cache: str) -> Any:
    from torch.utils.data import DataLoader

    from seneca import SenecaLoader

    split = CONFIGS[kind]
    if split is None:
        return DataLoader(train, batch_size=32, shuffle=True)
    return SenecaLoader(
        train, batch_size=32, shuffle=True, cache=cache, split=split, job=f"accuracy-{seed}"
    )


def _report(kind: str, seed: int, accuracy: float, loader: Any) -> dict[str, Any]:
    report: dict[str, Any] = {"loader": kind, "seed": seed, "accuracy": accuracy}
    if CONFIGS[kind] is not None:
        s = loader.stats()
        report["samples"] = s["samples"]
        report["substitutions"] = s["substitutions"]
        # the engine never gives a job a crop it made: its augmented hits are other jobs' crops
        report["crops_from_other_jobs"] = s["augmented"]["hits"] / max(s["samples"], 1)
        report["dataset"] = loader.store.keys.dataset
        report["prefix"] = loader.store.keys.prefix
    return report


def digit_sets(root: str | Path) -> tuple[Any, Any]:
    """The train set (RandomResizedCrop, ToTensor, Normalize) and test set of the digits."""
    from torchvision import transforms as T
    from torchvision.datasets import ImageFolder

    norm = T.Normalize([0.5] * 3, [0.5] * 3)
    train_tf = T.Compose([T.RandomResizedCrop(_SIZE, scale=(0.8, 1.0)), T.ToTensor(), norm])
    train = ImageFolder(str(Path(root, "train")), transform=train_tf)
    test = ImageFolder(str(Path(root, "test")), transform=T.Compose([T.ToTensor(), norm]))
    return train, test


def fit(loader: Any, epochs: int) -> Any:
    """A fresh model (from torch's global RNG) trained on ``loader`` for ``epochs``."""
    import torch

    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    for _ in range(epochs):
        model.train()
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    return model


def accuracy_of(model: Any, test: Any) -> float:
    """The share of ``test`` that ``model`` classifies right (read with a plain DataLoader)."""
    import torch
    from torch.utils.data import DataLoader

    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in DataLoader(test, batch_size=256):
            correct += int((model(x).argmax(1) == y).sum())
            total += len(y)
    return correct / total


def _train(
    kind: str, root: str, seed: int, epochs: int, cache: str, barrier: Any, out: Any
) -> None:
    """One training job (a separate process); reports its test accuracy."""
    try:
        import torch

        torch.set_num_threads(1)
        torch.manual_seed(seed)
        random.seed(seed)
        train, test = digit_sets(root)
        loader = _loader(kind, train, seed, cache)
        barrier.wait()
        model = fit(loader, epochs)
        out.put(_report(kind, seed, accuracy_of(model, test), loader))
        if hasattr(loader, "close"):  # a SenecaLoader leaves its job now
            loader.close()
    except BaseException as e:
        barrier.abort()
        out.put({"error": f"{type(e).__name__}: {e}"})


def summarise(values: list[float]) -> dict[str, float]:
    """Mean, sample standard deviation (0 for one value), min and max of ``values``."""
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": statistics.fmean(values), "std": std, "min": min(values), "max": max(values)}


def _forget(cache: str, reports: list[dict[str, Any]]) -> None:
    """Delete the keys of the datasets a configuration's jobs cached (the next starts empty)."""
    from seneca._cache.client import CacheClient
    from seneca._cache.maintenance import clear_datasets

    client = CacheClient(cache)
    try:
        for prefix in {r["prefix"] for r in reports}:
            names = sorted({r["dataset"] for r in reports if r["prefix"] == prefix})
            clear_datasets(client.redis, names, force=True, prefix=prefix)
    finally:
        client.close()


def _run_config(kind: str, data: str, jobs: int, epochs: int, cache: str) -> dict[str, Any]:
    args = [(kind, data, seed, epochs, cache) for seed in range(jobs)]
    reports = ProcessGroup(_train, args).reports(3600, f"accuracy {kind}")
    reports.sort(key=lambda r: r["seed"])
    accs = [r["accuracy"] for r in reports]
    result: dict[str, Any] = {"accuracies": accs, **summarise(accs), "runs": reports}
    if CONFIGS[kind] is not None:
        _forget(cache, reports)
        crops = [r["crops_from_other_jobs"] for r in reports]
        result["crops_from_other_jobs"] = crops
    return result


def run_accuracy(
    data: str, jobs: int = 3, epochs: int = 15, cache: str | None = None, out: str | None = None
) -> dict[str, Any]:
    """Write the digits (unless ``data`` has them), train every configuration of
    :data:`CONFIGS`, return (and write to ``out``) the accuracies."""
    if jobs < 1 or epochs < 1:
        raise ConfigError(f"--jobs and --epochs must be positive, got {jobs} and {epochs}")
    if not Path(data, "train").is_dir():
        write_digits(data)
    if cache is None:
        from seneca import defaults
        from seneca._cache.embedded import acquire_embedded

        cache = acquire_embedded(defaults.CACHE_SIZE, name="accuracy", idle=0)
    from tqdm import tqdm

    result: dict[str, Any] = {"jobs": jobs, "epochs": epochs, "provenance": provenance()}
    # a bar of the configurations on a terminal only (None: tqdm decides)
    for kind in tqdm(CONFIGS, desc="seneca accuracy", unit="config", disable=None, leave=False):
        result[kind] = _run_config(kind, data, jobs, epochs, cache)
    base = result["pytorch"]["mean"]
    result["difference_points"] = {
        kind: 100 * (result[kind]["mean"] - base) for kind in CONFIGS if kind != "pytorch"
    }
    if out:
        Path(out).write_text(json.dumps(result, indent=2) + "\n")
    return result


def format_accuracy(result: dict[str, Any]) -> str:
    """The table ``seneca accuracy`` prints."""
    lines = [
        f"{result['jobs']} concurrent jobs per configuration, {result['epochs']} epochs",
        "loader            test accuracy per job (%)     mean    std  min-max  "
        "vs pytorch  crops made by another job",
    ]
    for kind in CONFIGS:
        r = result[kind]
        accs = " ".join(f"{100 * a:.2f}" for a in r["accuracies"])
        diff = result["difference_points"].get(kind)
        crops = r.get("crops_from_other_jobs")
        lines.append(
            f"{kind:<17} {accs:<28} {100 * r['mean']:6.2f} {100 * r['std']:6.2f}"
            f"  {100 * r['min']:.2f}-{100 * r['max']:.2f}"
            f"  {'' if diff is None else f'{diff:+.2f} pts':>10}"
            f"  {'' if crops is None else ' '.join(f'{c:.2f}' for c in crops)}"
        )
    lines.append("goal: each Seneca configuration's mean within 1 point of pytorch's")
    return "\n".join(lines)
