"""Whether a cache node whose ``maxmemory`` is the loader's cache size refuses writes: starts a
``redis-server`` with ``--maxmemory`` (default: Seneca's default cache size, 1 GB) and
``noeviction`` on a free port, trains ``--jobs`` SenecaLoaders side by side (default cache
size, ``--workers`` workers each, batches of 64, a random crop to 224) on a folder of
JPEGs for ``--epochs`` epochs, and prints after each epoch the writes the server refused
(``INFO errorstats``, by command), its memory, and each job's hits and cache errors.

    python scripts/node_fit.py data/fit --images 3000 --workers 2 --jobs 1
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time

import redis
import torch
from torchvision.datasets import ImageFolder
from torchvision.transforms import v2

from seneca import SenecaLoader, defaults
from seneca._bench.synthetic import make_dataset


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", help="the dataset's folder (made when missing)")
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--maxmemory", type=int, default=defaults.CACHE_SIZE)
    args = parser.parse_args()
    try:
        ImageFolder(args.root)
    except (FileNotFoundError, OSError):
        make_dataset(args.root, args.images, 10, progress=False, workers=2)
    port = _free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no",
         "--maxmemory", str(args.maxmemory), "--maxmemory-policy", "noeviction"],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis(port=port)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    sys.exit("redis-server did not start")
                time.sleep(0.05)
        crop = v2.Compose(
            [v2.PILToTensor(), v2.RandomResizedCrop(224, antialias=True),
             v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32, scale=True)]
        )  # fmt: skip
        dataset = ImageFolder(args.root, transform=crop)
        loaders = [
            SenecaLoader(dataset, batch_size=64, shuffle=True, num_workers=args.workers,
                         cache=f"redis://127.0.0.1:{port}", job=f"job{k}")
            for k in range(args.jobs)
        ]  # fmt: skip
        for epoch in range(args.epochs):
            start = time.perf_counter()
            for _ in zip(*loaders, strict=True):
                pass
            stats = client.info("commandstats").items()
            refused = {k[8:]: v["rejected_calls"] for k, v in stats if v.get("rejected_calls")}
            memory = client.info("memory")
            print(
                f"epoch {epoch}: {time.perf_counter() - start:.1f} s, refused so far {refused}, "
                f"used {memory['used_memory'] / 1e6:.0f} MB of {memory['maxmemory'] / 1e6:.0f}",
                flush=True,
            )
            for loader in loaders:
                s = loader.stats()
                hits = "/".join(str(s[t]["hits"]) for t in ("encoded", "decoded", "augmented"))
                print(f"  {loader.job}: hits E/D/A {hits}, cache errors {s['cache_errors']}")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
