"""One cache node against a 3-node Redis Cluster on this machine: `seneca bench` against each
(rounds interleaved), the values' bytes and reads per node, and the cost of reading one batch of
cached values as the number of nodes grows (docs/cluster.md).

    .venv/bin/python scripts/scaleout.py --data data/bench5k --rounds 2 --out /tmp/scaleout

(it writes scaleout.json there; docs/cluster/ holds the copy docs/cluster.md cites)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from ods import routing
from seneca._bench.harness import BenchConfig, run_bench
from seneca._bench.provenance import provenance
from seneca._cache.client import CacheClient
from seneca._cache.cluster import start_cluster
from seneca._cache.resp import execute
from seneca._cache.server import redis_config, redis_server_binary

VALUE = 150_528  # a 224x224 RGB crop, uint8


def free_ports(count: int) -> list[int]:
    """Free loopback ports whose cluster bus ports (+10000) are free too."""
    rng, ports = random.Random(), []
    while len(ports) < count:
        port = rng.randrange(20000, 45000)
        try:
            for p in (port, port + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        if port not in ports:
            ports.append(port)
    return ports


def _single(port: int, maxmemory: int) -> subprocess.Popen:
    d = Path(tempfile.mkdtemp(prefix="seneca-single-"))
    (d / "redis.conf").write_text(redis_config(maxmemory=maxmemory, port=port, directory=str(d)))
    proc = subprocess.Popen([redis_server_binary(), str(d / "redis.conf")])
    time.sleep(0.5)
    return proc


def _node_stats(ports: list[int]) -> dict[int, dict[str, int]]:
    out = {}
    for port in ports:
        r = redis.Redis(port=port)
        stats = r.info("stats")
        calls = r.info("commandstats")
        out[port] = {
            "bytes_out": int(stats["total_net_output_bytes"]),
            "gets": int(calls.get("cmdstat_get", {}).get("calls", 0))
            + int(calls.get("cmdstat_mget", {}).get("calls", 0)),
            "sets": int(calls.get("cmdstat_set", {}).get("calls", 0)),
            "fcalls": int(calls.get("cmdstat_fcall", {}).get("calls", 0)),
        }
    return out


def _delta(after: dict, before: dict) -> dict:
    return {p: {k: after[p][k] - before[p][k] for k in after[p]} for p in after}


def _bench(data: str, url: str, out: Path) -> dict:
    cfg = BenchConfig(
        data=data,
        out=str(out),
        jobs=[3],
        loaders=["seneca"],
        cache_frac=0.25,
        epochs=2,
        split=(0.0, 0.0, 1.0),
        cache=url,
    )
    run = run_bench(cfg)["runs"][0]
    return {
        "aggregate_samples_per_s": run["aggregate_samples_per_s"],
        "samples_per_job": [j["samples"] for j in run["per_job"]],
        "hit_rate_augmented": statistics.mean(j["hit_rate"]["augmented"] for j in run["per_job"]),
        "decodes_per_sample_epoch": run["decodes_per_sample_epoch"],
    }


def _read_cost(urls: dict[str, str], values: int, batches: int, batch: int) -> dict[str, float]:
    """Median ms to read one batch of ``batch`` cached values (the loader's reader), per URL,
    batches interleaved between the URLs."""
    clients = {name: CacheClient(url).redis for name, url in urls.items()}
    keys = [f"seneca:v:{{scaleout:a:{i}}}" for i in range(values)]
    payload = os.urandom(VALUE)
    for client in clients.values():
        for first in range(0, values, 100):
            routing.run(client, [("SET", k, payload) for k in keys[first : first + 100]])
    times: dict[str, list[float]] = {name: [] for name in clients}
    rng = random.Random(0)
    for _ in range(batches):
        chosen = rng.sample(keys, batch)
        for name, client in clients.items():
            start = time.perf_counter()
            [got] = execute(client, [("MGET", *chosen)])
            times[name].append(time.perf_counter() - start)
            assert all(v is not None and len(v) == VALUE for v in got)
    for client in clients.values():
        for first in range(0, values, 100):
            routing.run(client, [("UNLINK", *keys[first : first + 100])])
    return {name: 1000 * statistics.median(t) for name, t in times.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ports = free_ports(4)
    single = _single(ports[0], 2_000_000_000)
    cluster = start_cluster(ports[1:], 1_000_000_000)
    urls = {"1 node": f"redis://127.0.0.1:{ports[0]}", "3-node cluster": cluster.url}
    result: dict = {
        "bench": {name: [] for name in urls},
        "per_node": [],
        "provenance": provenance(),
    }
    try:
        for r in range(args.rounds):
            for name, url in urls.items():
                before = _node_stats(cluster.ports)
                result["bench"][name].append(_bench(args.data, url, out / f"bench-{r}-{name[0]}"))
                if name != "1 node":
                    result["per_node"].append(_delta(_node_stats(cluster.ports), before))
        result["batch_read_ms"] = _read_cost(urls, 2000, 300, 32)
    finally:
        cluster.stop()
        single.terminate()
    (out / "scaleout.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
