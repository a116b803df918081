"""Two costs behind the workers table of docs/benchmarks.md, measured on this machine.

``processes``: the same CPU-bound work (decode, RandomResizedCrop 224, flip and PILToTensor of
the dataset's JPEGs, one torch thread per process) in 2, 3, 6, 9 and 15 processes at once for 8
seconds each, two rounds: total images/s. 3 jobs with 0, 1, 2 and 4 workers each run 3, 6, 9
and 15 processes.

``admission``: what a worker spends offering a batch's new augmented values: the cache value
of a 224 x 224 crop (``codec.encode_image_chw``, header and pixels in one pass) against
PILToTensor alone, and ``OdsStore.admit`` of 11 values of that size (a batch of 32 at a hit rate
of 0.66: the staged SETs and the ``admit`` call in one round trip, the renames sent after) over
a private embedded cache's unix socket: the median of 100 batches, three times.

Run from the repository root:
``.venv/bin/python scripts/worker_costs.py --data data/bench5k``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import time
from collections.abc import Callable

import numpy as np
import redis
import torch
from PIL import Image
from torchvision import transforms as T
from torchvision.transforms.functional import pil_to_tensor

from ods.store import OdsStore
from seneca._cache.embedded import acquire_embedded
from seneca.pipeline import codec

SECONDS = 8
PROCESSES = (2, 3, 6, 9, 15)


def _work(files: list[str], seconds: float, out: mp.Queue) -> None:
    torch.set_num_threads(1)
    transform = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.PILToTensor()])
    done, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        with Image.open(files[done % len(files)]) as image:
            transform(image.convert("RGB"))
        done += 1
    out.put(done)


def processes(root: str) -> None:
    files = []
    for label in sorted(os.listdir(root)):
        folder = os.path.join(root, label)
        files += [os.path.join(folder, f) for f in sorted(os.listdir(folder))[:40]]
    ctx = mp.get_context("fork")
    for turn in range(2):
        for count in PROCESSES:
            out = ctx.Queue()
            procs = [
                ctx.Process(target=_work, args=(files[k::count], SECONDS, out))
                for k in range(count)
            ]
            for p in procs:
                p.start()
            total = sum(out.get() for _ in procs)
            for p in procs:
                p.join()
            print(f"round {turn + 1}: {count:2d} processes: {total / SECONDS:7.1f} images/s")


def _median_ms(f: Callable[[], object], n: int) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def admission() -> None:
    client = redis.Redis.from_url(acquire_embedded(1_000_000_000, name="worker-costs"))
    store = OdsStore(client, "worker-costs", 100_000, capacity={"augmented": 10**12}, values=True)
    for job in ("a", "b"):
        store.join(job)
        store.start_epoch(job, 0)
    pixels = np.random.default_rng(0).integers(0, 255, (224, 224, 3), dtype=np.uint8)
    image = Image.fromarray(pixels)
    tensor_ms = _median_ms(lambda: pil_to_tensor(image).contiguous(), 200)
    value_ms = _median_ms(lambda: codec.encode_image_chw(image), 200)
    print(f"PILToTensor: {tensor_ms:.3f} ms; the cache value (encode_image_chw): {value_ms:.3f} ms")
    value = codec.encode_image_chw(image)
    first = [0]

    def admit() -> None:
        base, first[0] = first[0], first[0] + 11
        store.admit("a", [(base + k, "augmented", len(value), value) for k in range(11)], False)
        store.outbox.settle()

    try:
        runs = [_median_ms(admit, 100) for _ in range(3)]
    finally:
        store.clear()
    print(
        f"admit 11 values of {len(value):,} B: {min(runs):.2f}-{max(runs):.2f} ms a batch "
        "(median of 100 batches, 3 runs)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="ImageFolder dataset directory")
    args = parser.parse_args()
    processes(args.data)
    admission()


if __name__ == "__main__":
    main()
