"""``seneca accuracy``: does training through Seneca reach the accuracy torch's DataLoader does?

The data is scikit-learn's handwritten digits (1,797 labelled 8x8 images that ship inside the
scikit-learn package), written out as 32x32 JPEGs in ImageFolder layout, 80% train / 20% test
(stratified, fixed seed). A small CNN trains on it K times concurrently (separate processes,
seeds 0..K-1) with torch's DataLoader, then K times concurrently with SenecaLoader under ODS
sharing one cache; both report the test accuracies (the test set is read with a plain
DataLoader). The goal: the mean accuracies within 1 point.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from seneca.bench.spawn import ProcessGroup
from seneca_base.errors import ConfigError

__all__ = ["run_accuracy", "write_digits"]

_SIZE = 32


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


def _train(
    kind: str, root: str, seed: int, epochs: int, cache: str, barrier: Any, out: Any
) -> None:
    """One training job (a separate process); reports its test accuracy."""
    try:
        import torch
        from torch.utils.data import DataLoader
        from torchvision import transforms as T
        from torchvision.datasets import ImageFolder

        from seneca import SenecaLoader

        torch.set_num_threads(1)
        torch.manual_seed(seed)
        random.seed(seed)
        norm = T.Normalize([0.5] * 3, [0.5] * 3)
        train_tf = T.Compose([T.RandomResizedCrop(_SIZE, scale=(0.8, 1.0)), T.ToTensor(), norm])
        train = ImageFolder(str(Path(root, "train")), transform=train_tf)
        test = ImageFolder(str(Path(root, "test")), transform=T.Compose([T.ToTensor(), norm]))
        if kind == "pytorch":
            loader = DataLoader(train, batch_size=32, shuffle=True)
        else:
            loader = SenecaLoader(
                train, batch_size=32, shuffle=True, cache=cache, job=f"accuracy-{seed}"
            )
        model = _model()
        opt = torch.optim.Adam(model.parameters(), lr=2e-3)
        barrier.wait()
        for _ in range(epochs):
            model.train()
            for x, y in loader:
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for x, y in DataLoader(test, batch_size=256):
                correct += int((model(x).argmax(1) == y).sum())
                total += len(y)
        report = {"loader": kind, "seed": seed, "accuracy": correct / total}
        if kind == "seneca":
            report["substitutions"] = loader.stats()["substitutions"]
        out.put(report)
    except BaseException as e:
        barrier.abort()
        out.put({"error": f"{type(e).__name__}: {e}"})


def run_accuracy(
    data: str, jobs: int = 3, epochs: int = 15, cache: str | None = None, out: str | None = None
) -> dict[str, Any]:
    """Write the digits (unless ``data`` has them), train, print and return the accuracies."""
    if jobs < 1 or epochs < 1:
        raise ConfigError(f"--jobs and --epochs must be positive, got {jobs} and {epochs}")
    if not Path(data, "train").is_dir():
        write_digits(data)
    if cache is None:
        from seneca import defaults
        from seneca.cache.embedded import acquire_embedded

        cache = acquire_embedded(defaults.CACHE_SIZE, name="accuracy")
    result: dict[str, Any] = {"jobs": jobs, "epochs": epochs}
    for kind in ("pytorch", "seneca"):
        args = [(kind, data, seed, epochs, cache) for seed in range(jobs)]
        group = ProcessGroup(_train, args)
        reports = sorted(group.reports(3600, f"accuracy {kind}"), key=lambda r: r["seed"])
        accs = [r["accuracy"] for r in reports]
        result[kind] = {"accuracies": accs, "mean": sum(accs) / len(accs), "runs": reports}
    result["difference_points"] = 100 * (result["seneca"]["mean"] - result["pytorch"]["mean"])
    if out:
        Path(out).write_text(json.dumps(result, indent=2) + "\n")
    return result
