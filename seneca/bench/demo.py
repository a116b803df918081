"""``make demo``: two concurrent training jobs over one embedded cache, next to DataLoader.

Each job is its own process training a small torchvision model on the CPU. The demo runs the two
jobs with torch's DataLoader, then with SenecaLoader sharing one embedded cache, and prints per
job samples/s, hit rate per tier and decodes per sample.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path

from seneca import defaults

__all__ = ["run_demo"]

BATCH = 32
CROP = 32
CLASSES = 10
CACHE_SIZE = "1.5GB"
SPLIT = {"encoded": 0.25, "decoded": 0.55, "augmented": 0.2}


def _transform():
    import torch
    from torchvision.transforms import v2

    from seneca import CacheBoundary

    return v2.Compose(
        [
            v2.RandomResizedCrop(CROP, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.PILToTensor(),
            CacheBoundary(),  # cache uint8 crops; dtype and normalisation run after the fetch
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize([0.5, 0.5, 0.5], [0.25, 0.25, 0.25]),
        ]
    )


def _job(kind: str, rank: int, data: str, iterations: int, cache_url: str | None, out) -> None:
    import torch
    import torchvision
    from torch.utils.data import DataLoader
    from torchvision.datasets import ImageFolder
    from tqdm import tqdm

    from seneca import SenecaLoader

    torch.set_num_threads(1)
    torch.manual_seed(rank)
    ds = ImageFolder(data, transform=_transform())
    common = {"batch_size": BATCH, "shuffle": True, "num_workers": 1, "persistent_workers": True}
    if kind == "seneca":
        loader = SenecaLoader(
            ds,
            **common,
            cache=cache_url,
            cache_size=CACHE_SIZE,
            split=SPLIT,
            job=f"demo-job-{rank}",
        )
    else:
        loader = DataLoader(ds, **common)
    model = torchvision.models.resnet18(num_classes=len(ds.classes))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    bar = tqdm(total=iterations, desc=f"{kind:>10} job {rank}", position=rank, leave=False)
    steps = samples = 0
    start = time.perf_counter()
    loss = torch.tensor(0.0)
    while steps < iterations:
        for x, y in loader:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            steps += 1
            samples += len(y)
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.2f}")
            if steps == iterations:
                break
    elapsed = time.perf_counter() - start
    bar.close()
    result = {
        "kind": kind,
        "rank": rank,
        "samples": samples,
        "seconds": elapsed,
        "loss": float(loss.item()),
    }
    result["stats"] = loader.stats() if kind == "seneca" else None
    out.put(result)


def _run(kind: str, data: str, iterations: int, cache_url: str | None, jobs: int = 2) -> list[dict]:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_job, args=(kind, r, data, iterations, cache_url, out))
        for r in range(jobs)
    ]
    for p in procs:
        p.start()
    results = [out.get() for _ in procs]
    for p in procs:
        p.join()
    return sorted(results, key=lambda r: r["rank"])


def _table(rows: list[dict]) -> str:
    head = (
        f"{'loader':<11}{'job':>4}{'samples/s':>11}{'hit aug':>9}{'hit dec':>9}"
        f"{'hit enc':>9}{'decodes/sample':>16}{'final loss':>12}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        rate = r["samples"] / r["seconds"]
        s = r["stats"]
        if s is None:
            hits = ["-", "-", "-"]
            decodes = 1.0
        else:
            hits = [f"{s[t]['hit_rate']:.2f}" for t in ("augmented", "decoded", "encoded")]
            decodes = s["decodes"] / max(1, s["samples"])
        lines.append(
            f"{r['kind']:<11}{r['rank']:>4}{rate:>11.1f}{hits[0]:>9}{hits[1]:>9}"
            f"{hits[2]:>9}{decodes:>16.2f}{r['loss']:>12.2f}"
        )
    return "\n".join(lines)


def run_demo(data: str = "data/demo", images: int = 2000, iterations: int = 150) -> None:
    """Make the dataset if missing, run both loaders with 2 concurrent jobs, print the table."""
    from seneca.bench.synthetic import make_dataset
    from seneca.cache.embedded import acquire_embedded
    from seneca_base.units import parse_size

    root = Path(data)
    if not root.is_dir() or not any(root.iterdir()):
        print(f"making a {images}-image demo dataset in {root} (once)")
        make_dataset(root, images, CLASSES)
    n = sum(1 for _ in root.rglob("*.jpg"))
    print(
        f"dataset {root}: {n} images; 2 concurrent jobs x {iterations} iterations of batch "
        f"{BATCH}, ResNet-18 at {CROP}x{CROP} on the CPU, 1 loader worker per job"
    )
    # Hold the embedded cache for the whole demo so both Seneca jobs join one server.
    url = acquire_embedded(parse_size(CACHE_SIZE, "cache_size"), defaults.EMBEDDED_NAME)
    rows = []
    for kind in ("pytorch", "seneca"):
        t = time.perf_counter()
        rows += _run(kind, str(root), iterations, url if kind == "seneca" else None)
        print(f"{kind}: both jobs done in {time.perf_counter() - t:.0f} s")
    print()
    print(_table(rows))
    agg = {
        k: sum(r["samples"] / r["seconds"] for r in rows if r["kind"] == k)
        for k in ("pytorch", "seneca")
    }
    print(
        f"\naggregate samples/s: DataLoader {agg['pytorch']:.1f}, Seneca {agg['seneca']:.1f} "
        f"({agg['seneca'] / agg['pytorch']:.2f}x)"
    )
    print("decodes/sample: DataLoader decodes every sample it serves (1.00 per job).")
