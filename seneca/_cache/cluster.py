"""A Redis Cluster of cache nodes on this machine (``seneca cache-node --cluster N``), for tests
and demos; a real deployment runs one node per machine with the same configuration.

Each node runs with Seneca's settings and cluster mode (``seneca._cache.server.redis_config``,
``CLUSTER_LINES``).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import redis

from seneca._cache.client import one_server
from seneca._cache.server import redis_config, redis_server_binary
from seneca_base.errors import CacheError, ConfigError

__all__ = ["LocalCluster", "run_cache_cluster", "start_cluster"]

_START_TIMEOUT = 30.0


@dataclass
class LocalCluster:
    """Cluster nodes running here: one redis-server per port."""

    ports: list[int]
    directory: Path
    procs: list[subprocess.Popen] = field(default_factory=list)
    own_directory: bool = False

    @property
    def url(self) -> str:
        """A URL of the cluster (any node's serves)."""
        return f"redis://127.0.0.1:{self.ports[0]}"

    def node(self, port: int) -> redis.Redis:
        return one_server(port=port, socket_connect_timeout=1)

    def kill(self, port: int) -> None:
        """SIGKILL the node on ``port`` (its values are lost)."""
        proc = self.procs[self.ports.index(port)]
        proc.kill()
        proc.wait(timeout=10)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        if self.own_directory:
            shutil.rmtree(self.directory, ignore_errors=True)


def _state(client: redis.Redis) -> str:
    info = client.execute_command("CLUSTER INFO")
    if isinstance(info, dict):
        return str(info.get("cluster_state", ""))
    text = info.decode() if isinstance(info, bytes) else str(info)
    return "ok" if "cluster_state:ok" in text else "fail"


def _wait(cluster: LocalCluster, ready: Callable[[redis.Redis], bool], what: str) -> None:
    """Return once ``ready`` holds for every node; stop the cluster and raise if a node exits
    or the start timeout passes."""
    deadline = time.monotonic() + _START_TIMEOUT
    while True:
        try:
            if all(ready(cluster.node(p)) for p in cluster.ports):
                return
        except redis.RedisError:
            pass
        if time.monotonic() > deadline or any(p.poll() is not None for p in cluster.procs):
            cluster.stop()
            raise CacheError(f"the cache cluster on ports {cluster.ports} did not {what}")
        time.sleep(0.05)


def start_cluster(
    ports: Sequence[int], maxmemory: int, directory: str | Path | None = None
) -> LocalCluster:
    """Start one node per port on 127.0.0.1 and form a cluster of them (no replicas); returns
    once every node reports ``cluster_state:ok``."""
    if len(ports) < 3:
        raise ConfigError(f"--cluster: Redis Cluster needs at least 3 primaries, got {len(ports)}")
    own = directory is None
    root = Path(tempfile.mkdtemp(prefix="seneca-cluster-") if own else directory)
    cluster = LocalCluster(list(ports), root, own_directory=own)
    binary = redis_server_binary()
    for port in ports:
        node_dir = root / str(port)
        node_dir.mkdir(parents=True, exist_ok=True)
        conf = redis_config(
            maxmemory=maxmemory,
            port=port,
            bind="127.0.0.1",
            directory=str(node_dir),
            cluster=True,
        )
        (node_dir / "redis.conf").write_text(conf)
        cluster.procs.append(
            subprocess.Popen(  # its own process group: a Ctrl-C reaches it once, from stop()
                [binary, str(node_dir / "redis.conf")], stdout=subprocess.DEVNULL, process_group=0
            )
        )
    cli = shutil.which("redis-cli")
    if cli is None:
        cluster.stop()
        raise CacheError("redis-cli not found on PATH (it comes with redis-server)")
    _wait(cluster, lambda node: bool(node.ping()), "start")
    addresses = [f"127.0.0.1:{p}" for p in ports]
    done = subprocess.run(
        [cli, "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        cluster.stop()
        raise CacheError(f"redis-cli --cluster create failed: {done.stdout[-500:]}")
    _wait(cluster, lambda node: _state(node) == "ok", "form a cluster")
    return cluster


def run_cache_cluster(nodes: int, port: int, maxmemory: int) -> None:
    """``seneca cache-node --cluster N``: N nodes on ports port..port+N-1, each with
    ``maxmemory`` bytes, until interrupted."""
    if port + nodes > 65536 or port <= 0:
        raise ConfigError(f"--port: {nodes} ports from {port} do not fit in 1..65535")
    stop: list[int] = []  # a SIGTERM from the moment the nodes start stops them
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    cluster = start_cluster(range(port, port + nodes), maxmemory)
    try:
        print(
            f"cache cluster of {nodes} nodes: {cluster.url} (ports {port}-{port + nodes - 1})",
            flush=True,
        )
        while not stop and all(p.poll() is None for p in cluster.procs):
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
