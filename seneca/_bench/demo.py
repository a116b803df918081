"""``make demo``: two concurrent training jobs over one embedded cache, next to DataLoader.

Each job is its own process training a small torchvision model on the CPU. The demo runs the two
jobs with a DataLoader given every non-cache trick SenecaLoader uses (the transform's trailing
dtype/normalise once per batch, glibc's malloc tuned: ``pytorch-tuned`` in ``seneca bench``),
and with SenecaLoader sharing one embedded cache (emptied before each of its runs). ``rounds``
rounds alternate which loader goes first; the demo prints per job samples/s, hit rate per tier
and decodes per sample (counted where they happen, for both loaders), and the aggregate ratio of
each round with its median and range.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from seneca._bench.spawn import ProcessGroup
from seneca_base.errors import ConfigError

__all__ = ["order_of", "run_demo"]

BATCH = 32
CROP = 32
CLASSES = 10
CACHE_SIZE = "1.5GB"
SPLIT = {"encoded": 0.25, "decoded": 0.55, "augmented": 0.2}
KINDS = ("pytorch-tuned", "seneca")
#: how long a run of the jobs may take before the demo gives up on it (seconds)
_JOB_TIMEOUT = 3600


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


def _loader(kind: str, data: str, rank: int, cache_url: str | None) -> Any:
    from seneca import SenecaLoader
    from seneca._bench.torch_loaders import Counted, CountedDataLoader, counted_folder

    common = {"batch_size": BATCH, "shuffle": True, "num_workers": 1, "persistent_workers": True}
    if kind == "seneca":
        from torchvision.datasets import ImageFolder

        ds = ImageFolder(data, transform=_transform())
        return ds, SenecaLoader(
            ds, **common, cache=cache_url, cache_size=CACHE_SIZE, split=SPLIT, job=f"demo-{rank}"
        )
    counted = Counted()
    ds, tail = counted_folder(data, _transform(), counted, tuned=True)
    return ds, CountedDataLoader(ds, counted, tail, tuned=True, **common)


def _model(classes: int) -> Any:
    """A small CNN: its step is short next to loading a batch, as a fast GPU's would be."""
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(32 * 16, classes),
    )


def _job(
    kind: str, rank: int, data: str, iterations: int, cache_url: str | None, barrier, out
) -> None:
    """One training job (a process of its own): reports its samples, time and counters, or
    the error that ended it (the other jobs stop waiting for it)."""
    try:
        out.put(_train(kind, rank, data, iterations, cache_url, barrier))
    except BaseException as e:
        barrier.abort()
        out.put({"error": f"{type(e).__name__}: {e}"})


def _train(
    kind: str, rank: int, data: str, iterations: int, cache_url: str | None, barrier
) -> dict[str, Any]:
    import torch
    from tqdm import tqdm

    torch.set_num_threads(1)
    torch.manual_seed(rank)
    ds, loader = _loader(kind, data, rank, cache_url)
    model = _model(len(ds.classes))
    barrier.wait()  # both jobs start training together
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    bar = tqdm(total=iterations, desc=f"{kind:>13} job {rank}", position=rank, leave=False)
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
            if steps == iterations:
                break
    elapsed = time.perf_counter() - start
    bar.close()
    stats = loader.stats()
    return {"kind": kind, "rank": rank, "samples": samples, "seconds": elapsed, "stats": stats}


def _run(kind: str, data: str, iterations: int, cache_url: str, jobs: int = 2) -> list[dict]:
    """Both jobs of ``kind``; SenecaError names the first one that failed or died."""
    group = ProcessGroup(_job, [(kind, r, data, iterations, cache_url) for r in range(jobs)])
    results = group.reports(_JOB_TIMEOUT, f"demo {kind}")
    return sorted(results, key=lambda r: r["rank"])


def _table(rows: list[dict]) -> str:
    head = (
        f"{'round':>5} {'loader':<14}{'job':>4}{'samples/s':>11}{'hit aug':>9}{'hit dec':>9}"
        f"{'hit enc':>9}{'decodes/sample':>16}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        rate = r["samples"] / r["seconds"]
        s = r["stats"]
        hits = [f"{s[t]['hit_rate']:.2f}" for t in ("augmented", "decoded", "encoded")]
        decodes = s["decodes"] / max(1, s["samples"])
        lines.append(
            f"{r['round']:>5} {r['kind']:<14}{r['rank']:>4}{rate:>11.1f}{hits[0]:>9}{hits[1]:>9}"
            f"{hits[2]:>9}{decodes:>16.2f}"
        )
    return "\n".join(lines)


def order_of(rnd: int) -> tuple[str, ...]:
    """The loaders in the order round ``rnd`` (from 1) runs them: odd rounds DataLoader first."""
    return KINDS if rnd % 2 else KINDS[::-1]


def _ratios(rows: list[dict], rounds: int) -> list[float]:
    """Per round: Seneca's aggregate samples/s over the tuned DataLoader's."""
    out = []
    for rnd in range(1, rounds + 1):
        agg = {
            k: sum(
                r["samples"] / r["seconds"] for r in rows if r["kind"] == k and r["round"] == rnd
            )
            for k in KINDS
        }
        out.append(agg["seneca"] / agg["pytorch-tuned"])
    return out


def run_demo(
    data: str = "data/demo", images: int = 2000, iterations: int = 250, rounds: int = 2
) -> list[float]:
    """Make the dataset if missing, run both loaders with 2 concurrent jobs ``rounds`` times
    (alternating which goes first), print the table and the ratios; returns the ratios."""
    from seneca._bench.harness import clear_cache
    from seneca._bench.synthetic import make_dataset
    from seneca._cache.embedded import acquire_embedded
    from seneca._cache.shares import server_room
    from seneca_base.units import parse_size

    if iterations < 1 or rounds < 1:
        raise ConfigError(f"--iterations and --rounds must be positive, got {iterations}, {rounds}")
    root = Path(data)
    if not root.is_dir() or not any(root.iterdir()):
        print(f"making a {images}-image demo dataset in {root} (once)")
        make_dataset(root, images, CLASSES)
    n = sum(1 for _ in root.rglob("*.jpg"))
    print(
        f"dataset {root}: {n} images; 2 concurrent jobs x {iterations} iterations of batch "
        f"{BATCH}, a small CNN at {CROP}x{CROP} on the CPU, 1 loader worker per job, "
        f"{rounds} rounds"
    )
    # Hold the embedded cache for the whole demo so both Seneca jobs join one server, sized as
    # a loader sizes it: the tiers get CACHE_SIZE beside the server's own memory and metadata.
    size = parse_size(CACHE_SIZE, "cache_size")
    url = acquire_embedded(size, room=server_room(size, n), key=str(root))
    rows = []
    for rnd in range(1, rounds + 1):
        for kind in order_of(rnd):
            if kind == "seneca":
                clear_cache(url)  # every Seneca run starts from an empty cache
            t = time.perf_counter()
            rows += [{**r, "round": rnd} for r in _run(kind, str(root), iterations, url)]
            print(f"round {rnd}, {kind}: both jobs done in {time.perf_counter() - t:.0f} s")
    print()
    print(_table(rows))
    ratios = _ratios(rows, rounds)
    each = ", ".join(f"{r:.2f}x" for r in ratios)
    print(
        f"\naggregate samples/s, Seneca / DataLoader with the same non-cache tuning: median "
        f"{statistics.median(ratios):.2f}x, range {min(ratios):.2f}-{max(ratios):.2f}x "
        f"(per round: {each})"
    )
    return ratios
