"""The cache server's CPU per gigabyte of hits it serves, measured on this machine.

A private ``redis-server`` (started here, nothing saved) holds ``--values`` values of a 224 x 224
x 3 crop's size (150,528 B, random bytes); ``--clients`` processes each read random batches of
``--batch`` of them with MGET for ``--seconds``, as loaders read a batch's hits. Printed: the
bytes served per second, the server's CPU over the run in cores (``INFO cpu``; its main thread,
which serves every command, in brackets) and that CPU per gigabyte served. Each transport
(the unix socket of an embedded cache, loopback TCP as a cache node is reached) runs in turn,
``--rounds`` times.

Run from the repository root:
``.venv/bin/python scripts/hit_server_cpu.py --clients 1,3``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis

SIZE = 150_528


def _client(address: str, keys: int, batch: int, seconds: float) -> int:
    """Bytes read by random MGETs of ``batch`` of ``keys`` values for ``seconds``."""
    r = _connect(address)
    names = [f"v:{i}" for i in range(keys)]
    rng = random.Random(os.getpid())
    end, got = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        got += sum(len(v) for v in r.mget(rng.sample(names, batch)))
    return got


def _connect(address: str) -> redis.Redis:
    if address.startswith("/"):
        return redis.Redis(unix_socket_path=address)
    return redis.Redis(port=int(address))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server(workdir: Path, transport: str) -> tuple[subprocess.Popen, str]:
    sock, port = workdir / f"{transport}.sock", _free_port()
    args = ["redis-server", "--save", "", "--appendonly", "no", "--dir", str(workdir)]
    if transport == "unix":
        args += ["--port", "0", "--unixsocket", str(sock)]
        address = str(sock)
    else:
        args += ["--port", str(port), "--bind", "127.0.0.1"]
        address = str(port)
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL)
    for _ in range(100):
        try:
            _connect(address).ping()
            return proc, address
        except redis.ConnectionError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"redis-server on {transport} did not start")


def _cpu(r: redis.Redis) -> tuple[float, float]:
    c = r.info("cpu")
    main = c.get("used_cpu_user_main_thread", 0.0) + c.get("used_cpu_sys_main_thread", 0.0)
    return c["used_cpu_user"] + c["used_cpu_sys"], main


def measure(address: str, clients: int, args: argparse.Namespace) -> str:
    r = _connect(address)
    task = (address, args.values, args.batch, args.seconds)
    with mp.Pool(clients) as pool:
        (cpu0, main0), t0 = _cpu(r), time.monotonic()
        served = sum(pool.starmap(_client, [task] * clients))
        (cpu1, main1), t1 = _cpu(r), time.monotonic()
    gb, wall = served / 1e9, t1 - t0
    return (
        f"{clients} client(s): {gb / wall:.2f} GB/s; server CPU {(cpu1 - cpu0) / wall:.2f} cores "
        f"({(main1 - main0) / wall:.2f}); {(cpu1 - cpu0) / gb:.3f} CPU-s per GB "
        f"({(main1 - main0) / gb:.3f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", default="1,3", help="client processes, e.g. 1,3")
    parser.add_argument("--values", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    if shutil.which("redis-server") is None:
        raise SystemExit("redis-server is not on PATH")
    blob = os.urandom(SIZE)
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for transport in ("unix", "tcp"):
                proc, address = _server(Path(tmp), transport)
                try:
                    pipe = _connect(address).pipeline()
                    for i in range(args.values):
                        pipe.set(f"v:{i}", blob)
                    pipe.execute()
                    for clients in (int(c) for c in args.clients.split(",")):
                        print(f"{transport}: {measure(address, clients, args)}", flush=True)
                finally:
                    proc.terminate()
                    proc.wait(timeout=10)


if __name__ == "__main__":
    main()
