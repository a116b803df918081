"""No tensor is made over read-only memory on any path: a unix socket, TLS and a Redis Cluster,
with and without workers, every tier hit (torch would warn that the buffer is not writable)."""

import shutil
import sys
from pathlib import Path

import pytest
from conftest import RedisProcess
from helpers import warm
from helpers.tls import self_signed

HELPER = Path(__file__).parents[1] / "helpers" / "tensor_first.py"


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
@pytest.mark.slow
def test_no_tensor_over_read_only_memory(
    tiny_dataset, redis_url, redis_cluster, tmp_path, free_port
):
    cert, key = self_signed(tmp_path)
    port = free_port
    args = ["--tls-port", str(port), "--tls-cert-file", str(cert), "--tls-key-file", str(key)]
    tls = RedisProcess(*args, "--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no")
    try:
        urls = [redis_url, f"rediss://127.0.0.1:{port}?ssl_ca_certs={cert}", redis_cluster.url]
        cmd = [sys.executable, str(HELPER), str(tiny_dataset), *urls]
        done = warm.run(cmd, capture_output=True, text=True, timeout=300)
    finally:
        tls.stop()
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"
