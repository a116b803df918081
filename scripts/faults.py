"""What a frozen or restarted cache node costs training: two jobs (one worker each, batches of
24, a cache of 25% of the dataset) against a redis-server on loopback TCP.

    python scripts/faults.py --data data/bench1500 [--freeze 8] [--epochs 4]

``freeze``: the node is stopped (SIGSTOP) at batch 8 of the second epoch for ``--freeze``
seconds; prints the median and longest gaps between batches and the batches delivered during
the freeze. ``restart``: the node is killed at batch 8 of the second epoch and restarted empty
on the same port a second later; prints each epoch's hits per job. Both print the ``seneca``
logger's warnings and info lines about the outage.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import signal
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import redis
from torchvision import transforms as T
from torchvision.datasets import ImageFolder

from seneca import SenecaLoader
from seneca._cache.server import redis_config, redis_server_binary

TIERS = ("augmented", "decoded", "encoded")


def _node(port: int, maxmemory: int) -> subprocess.Popen:
    conf = Path(tempfile.mkdtemp(prefix="faults-")) / "redis.conf"
    conf.write_text(redis_config(maxmemory=maxmemory, port=port, bind="127.0.0.1"))
    proc = subprocess.Popen([redis_server_binary(), str(conf)], stdout=subprocess.DEVNULL)
    client = redis.Redis(port=port)
    for _ in range(200):
        try:
            client.ping()
            return proc
        except redis.ConnectionError:
            time.sleep(0.02)
    raise RuntimeError("redis-server did not start")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _log_outages() -> None:
    """The ``seneca`` logger's lines about the cache, on stdout (forked workers inherit it)."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(relativeCreated)8.0f ms %(levelname)s %(message)s"))
    handler.addFilter(lambda record: "cache" in record.getMessage())
    logging.getLogger("seneca").addHandler(handler)
    logging.getLogger("seneca").setLevel(logging.INFO)


def run(data: str, scenario: str, freeze: float, epochs: int) -> None:
    root = Path(data)
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) // 4
    port = _free_port()
    node = _node(port, 4 * size)
    _log_outages()
    transform = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor()])
    jobs = [
        SenecaLoader(
            ImageFolder(str(root), transform=transform),
            batch_size=24,
            shuffle=True,
            cache=f"redis://127.0.0.1:{port}",
            cache_size=size,
            num_workers=1,
        )
        for _ in range(2)
    ]
    arrivals: list[float] = []
    window: list[float] = []
    events: list[threading.Thread] = []

    def restart() -> None:
        nonlocal node
        node.kill()
        node.wait()
        time.sleep(1.0)
        node = _node(port, 4 * size)
        window.append(time.monotonic())

    try:
        for epoch in range(epochs):
            for job in jobs:
                job.reset_stats()
            for k, _ in enumerate(zip(*jobs, strict=True)):
                arrivals.append(time.monotonic())
                if epoch == 1 and k == 8 and scenario == "freeze":
                    os.kill(node.pid, signal.SIGSTOP)
                    window.append(time.monotonic())
                    timer = threading.Timer(freeze, os.kill, (node.pid, signal.SIGCONT))
                    timer.start()
                    events.append(timer)
                    window.append(window[0] + freeze)
                elif epoch == 1 and k == 8:
                    events.append(threading.Thread(target=restart))
                    events[-1].start()
            hits = [sum(j.stats()[t]["hits"] for t in TIERS) for j in jobs]
            print(f"epoch {epoch}: hits per job {hits} of {jobs[0].stats()['samples']}")
    finally:
        for event in events:
            event.join()
        for job in jobs:
            job.close()
        node.terminate()
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    median, longest = statistics.median(gaps), max(gaps)
    print(f"gaps between batches: median {median:.3f} s, longest {longest:.3f} s")
    if window:
        worst = sorted(range(len(gaps)), key=gaps.__getitem__)[-5:]
        at = ", ".join(f"{gaps[k]:.3f} s at {arrivals[k] - window[0]:+.1f} s" for k in worst)
        print(f"longest gaps (time from the {scenario}): {at}")
    if scenario == "freeze":
        during = sum(1 for t in arrivals if window[0] < t < window[1])
        print(f"batches delivered during the {freeze:g} s freeze: {during}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="ImageFolder dataset directory")
    parser.add_argument("--scenario", choices=("freeze", "restart"), default="freeze")
    parser.add_argument("--freeze", type=float, default=8.0, help="seconds the node is stopped")
    parser.add_argument("--epochs", type=int, default=4)
    args = parser.parse_args()
    run(args.data, args.scenario, args.freeze, args.epochs)


if __name__ == "__main__":
    main()
