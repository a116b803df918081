"""Fixtures: real redis-server processes on unix sockets or free ports, a tiny dataset."""

from __future__ import annotations

import importlib.util
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import redis
from helpers import warm
from redis.backoff import NoBackoff
from redis.retry import Retry

from ods import defaults as ods_defaults
from seneca._bench.spawn import job_context
from seneca._bench.synthetic import make_dataset
from seneca._cache.cluster import start_cluster

# The suite's processes, and the interpreters they start, keep compiled bytecode even where the
# environment says not to (PYTHONDONTWRITEBYTECODE): otherwise each fresh interpreter compiles
# seneca again (0.3 s of CPU) and a second run rewrites every test module again in each process.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# Workers started by "forkserver" (Python 3.14's default start method on Linux) fork from the
# server the benchmarks start theirs from (a fresh interpreter that imported torch and seneca):
# set here, whichever test starts it first (one per process), so that the benchmarks' processes
# get their fresh seeds. Such a worker unpickles its dataset as a spawned one does, without a
# spawned one's 4 s of torch import.
job_context()

REDIS_SERVER = shutil.which("redis-server")

# tests/ecosystem: the tests with the frameworks users train with (PyTorch Lightning, Hugging
# Face datasets, timm; the extras [lightning,hf,timm]), run by `make test-ecosystem` in
# .venv-ecosystem. The core environment has none of them: it collects none of these tests
# (and `make test` deselects their marker, ``ecosystem``).
FRAMEWORKS = ("lightning", "datasets", "timm")
if not all(importlib.util.find_spec(name) for name in FRAMEWORKS):
    collect_ignore_glob = ["ecosystem/*"]


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, the controller starts the run's one fork server for the jobs its
    workers start (helpers/warm.py): torch imported once for the run, not once per worker."""
    workers = getattr(config.option, "numprocesses", None)
    if not hasattr(config, "workerinput") and workers and not config.option.collectonly:
        warm.share()


#: the slowest tests (fresh interpreters by the dozen), run before the other slow ones
_SLOWEST = ("tests/loader/test_ddp.py", "tests/faults/test_jobs.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order the tests so that the suite's processes end together: pytest-xdist's
    ``worksteal`` gives each of its N processes one N-th of the list, and an idle one takes from
    the end of another's queue, so each share starts with its part of the slow tests (the
    slowest first, dealt to the shortest share) and the quick ones come after."""

    def weight(item: pytest.Item) -> int:
        if item.get_closest_marker("slow") is None:
            return 0
        return 2 if item.nodeid.startswith(_SLOWEST) else 1

    # the processes pytest-xdist runs, as each of them is told (its own numprocesses is None)
    workers = getattr(config, "workerinput", {}).get("workercount")
    n = workers if isinstance(workers, int) and workers > 0 else 1
    slow = sorted((i for i in items if weight(i)), key=weight, reverse=True)
    quick = [i for i in items if not weight(i)]
    # the tests with forkserver workers in one share: one process starts a forkserver for them
    # (a fresh interpreter importing torch), not each process
    shares: list[list[pytest.Item]] = [[] for _ in range(n)]
    shares[0] = [i for i in slow if "forkserver" in i.nodeid]
    for item in (i for i in slow if "forkserver" not in i.nodeid):
        min(shares, key=len).append(item)
    ordered: list[pytest.Item] = []
    for k, dealt in enumerate(shares):
        share = len(quick) if k == n - 1 else max(0, len(items) // n - len(dealt))
        ordered += sorted(dealt, key=weight, reverse=True) + quick[:share]
        quick = quick[share:]
    items[:] = ordered


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_ports(count: int, consecutive: bool = False) -> list[int]:
    """Free ports whose cluster bus ports (port + 10000) are free too (``consecutive``: a run
    of ``count`` ports). The ports are drawn below 30000 and so never one node's bus port."""
    rng = random.Random()
    ports: list[int] = []
    while len(ports) < count:
        port = ports[-1] + 1 if consecutive and ports else rng.randrange(20000, 30000 - count)
        if port not in ports and _bindable(port) and _bindable(port + 10000):
            ports.append(port)
        elif consecutive:
            ports = []
    return ports


def once(client: redis.Redis) -> redis.Redis:
    """``client``, made to try each command once, as redis-py 5 did: redis-py 6 and later retry
    a connection error (a refused login is one) 10 times with backoff, about 5 s, before
    raising it."""
    client.set_retry(Retry(NoBackoff(), 0))
    return client


def wait_for_ping(client: redis.Redis, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    """Return once ``client`` gets an answer; fail if ``proc`` exits or ``timeout`` passes.
    ``client`` tries each command :func:`once` from then on."""
    once(client)
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.ping()
            return
        except redis.ConnectionError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"server {proc.args[:3]} did not start") from None
            time.sleep(0.02)


class RedisProcess:
    """A redis-server child process; ``url`` connects to it."""

    def __init__(self, *args: str, port: int | None = None, password: str | None = None) -> None:
        assert REDIS_SERVER, "redis-server must be installed (make test installs it)"
        self.dir = Path(tempfile.mkdtemp(prefix="sn-redis-"))
        self.sock = self.dir / "redis.sock"
        self.port = port
        cmd = [REDIS_SERVER, "--port", str(port or 0), "--unixsocket", str(self.sock)]
        cmd += ["--save", "", "--appendonly", "no", "--dir", str(self.dir), *args]
        if password:
            cmd += ["--requirepass", password]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"unix://{self.sock}" + (f"?password={password}" if password else "")
        self.client = redis.Redis(unix_socket_path=str(self.sock), password=password)
        try:
            wait_for_ping(self.client, self.proc)
        except BaseException:  # a server that did not start (or was interrupted) is not left
            self.stop()
            raise

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def redis_proc():
    server = RedisProcess()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_proc) -> str:
    return redis_proc.url


@pytest.fixture
def redis_cluster(tmp_path):
    """A Redis Cluster of 3 primaries (no replicas) on loopback ports."""
    cluster = start_cluster(cluster_ports(3), 200_000_000, tmp_path / "cluster")
    yield cluster
    cluster.stop()


@pytest.fixture
def free_port() -> int:
    return _free_port()


@pytest.fixture(autouse=True)
def patient_deadlines(request, monkeypatch):
    """Calls to the tests' healthy servers wait as long as a busy machine makes them. The
    deadlines that abandon a call to a frozen server (``ods.routing.deadline``, half a second
    at most by default) are for frozen servers, which only the tests marked ``deadlines`` make;
    in any other test a stall of the machine past the deadline (two busy processes beside the
    suite's four) would fail the test for its timing, not its behaviour. Job scripts run in
    fresh interpreters keep the defaults."""
    if request.node.get_closest_marker("deadlines") is None:
        monkeypatch.setattr(ods_defaults, "DEADLINE_FLOOR", 60.0)
        monkeypatch.setattr(ods_defaults, "DEADLINE_CEILING", 60.0)


@pytest.fixture(autouse=True)
def runtime_dir(monkeypatch):
    """Each test gets its own embedded-cache directory (short path: unix sockets are <108),
    whose server stops with its last job unless the test sets SENECA_CACHE_IDLE."""
    path = Path(tempfile.mkdtemp(prefix="sn-rt-"))
    monkeypatch.setenv("SENECA_RUNTIME_DIR", str(path))
    monkeypatch.setenv("SENECA_CACHE_IDLE", "0")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory) -> Path:
    """48 small JPEGs in 3 classes."""
    root = tmp_path_factory.mktemp("tiny") / "data"
    make_dataset(root, 48, 3, size=(64, 48), progress=False, workers=2)
    return root
