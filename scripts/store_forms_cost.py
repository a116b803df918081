"""What a dataset kept as one shard of a ShardedStore would cost against one OdsStore, on the
loader's calls per batch: one job over ``--samples`` samples decides each batch of
``--batch`` (``decide``) and releases it (``release``), an epoch at a time, with values on
(payload-free metadata: the calls alone). The two forms run interleaved (A B B A), each
``--repeats`` times, against one redis-server started on a Unix socket; prints each run's
microseconds per batch and the ratio of the medians:

    .venv/bin/python scripts/store_forms_cost.py --samples 20000 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from ods.shards import ShardedStore
from ods.store import OdsStore


def _epoch(store: OdsStore | ShardedStore, job: str, epoch: int, batch: int) -> float:
    """Seconds per batch of one epoch of ``job``: decide, then release."""
    store.start_epoch(job, epoch)
    start, batches = time.perf_counter(), 0
    while True:
        decision = store.decide(job, batch)
        if not decision.indices:
            break
        store.release(job, decision)
        batches += 1
    return (time.perf_counter() - start) / max(1, batches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sock = Path(tmp, "redis.sock")
        argv = ["redis-server", "--port", "0", "--unixsocket", str(sock), "--save", ""]
        server = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
        try:
            client = redis.Redis(unix_socket_path=str(sock))
            for _ in range(100):
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    time.sleep(0.05)
            forms = {
                "OdsStore": OdsStore(client, "one", args.samples, values=True),
                "ShardedStore, one shard": ShardedStore(
                    client, "sharded", args.samples, shard_size=args.samples, values=True
                ),
            }
            for store in forms.values():
                store.join("job")
            times: dict[str, list[float]] = {name: [] for name in forms}
            order = list(forms)
            for r in range(args.repeats):
                for name in order if r % 2 == 0 else order[::-1]:
                    times[name].append(_epoch(forms[name], "job", r, args.batch))
            for name, ts in times.items():
                runs = ", ".join(f"{t * 1e6:.0f}" for t in ts)
                print(f"{name:24} us per batch: {runs} (median {statistics.median(ts) * 1e6:.0f})")
            a, b = (statistics.median(times[n]) for n in order)
            print(f"ShardedStore (one shard) / OdsStore: {b / a:.2f}")
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
