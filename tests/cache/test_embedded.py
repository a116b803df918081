import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
import redis
from conftest import wait_for_ping

from seneca.cache.embedded import acquire_embedded

USER = textwrap.dedent(
    """
    import sys, time
    import redis
    from torchvision.datasets import ImageFolder
    from seneca import SenecaLoader
    loader = SenecaLoader(ImageFolder(sys.argv[1]), batch_size=8, collate_fn=lambda b: b,
                          cache_size="20MB")
    for _ in loader:
        pass
    pid = loader.store.client.info()["process_id"]
    print(pid, flush=True)
    if sys.argv[2] == "-":  # a user until told to go (a line on stdin)
        sys.stdin.readline()
    else:
        time.sleep(float(sys.argv[2]))
    """
)


def _servers(runtime_dir):
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if str(runtime_dir) in cmd:
            out.append(p)
    return out


def _wait_gone(runtime_dir, timeout=10.0):
    deadline = time.monotonic() + timeout
    while _servers(runtime_dir):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _user(dataset, hold):
    """A process that trains an epoch through the default embedded cache, prints the
    redis-server's pid, and stays a user ``hold`` seconds ("-": until a line on its stdin)."""
    return subprocess.Popen(
        [sys.executable, "-c", USER, str(dataset), str(hold)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )


def _go(user):
    user.stdin.write("\n")
    user.stdin.flush()


@pytest.mark.slow
def test_jobs_share_one_server_and_it_stops_after_the_last(tiny_dataset, runtime_dir):
    a = _user(tiny_dataset, "-")
    b = _user(tiny_dataset, "-")  # (each stays a user until told to go, however late it starts)
    pid_a, pid_b = a.stdout.readline().strip(), b.stdout.readline().strip()
    assert pid_a == pid_b  # one shared redis-server
    _go(b)
    assert b.wait(timeout=60) == 0
    time.sleep(1.0)  # (longer than the watchdog's poll)
    assert psutil.pid_exists(int(pid_a))  # a still uses it
    _go(a)
    assert a.wait(timeout=60) == 0
    assert _wait_gone(runtime_dir), "embedded server or watchdog leaked"
    assert not (runtime_dir / "embedded-default" / "redis.sock").exists()


def test_server_stops_when_its_only_user_is_killed(tiny_dataset, runtime_dir):
    a = _user(tiny_dataset, 60)
    pid = int(a.stdout.readline())
    assert psutil.pid_exists(pid)
    a.send_signal(signal.SIGKILL)
    a.wait()
    assert _wait_gone(runtime_dir), "embedded server survived its killed user"


def test_in_process_acquire_is_reused(runtime_dir):
    url = acquire_embedded(10_000_000)
    assert acquire_embedded(10_000_000) == url
    r = redis.Redis.from_url(url)
    assert r.config_get("maxmemory")["maxmemory"] == "10000000"
    assert r.config_get("save")["save"] == ""
    with pytest.warns(UserWarning, match="does not resize"):
        acquire_embedded(20_000_000)


@pytest.mark.slow
def test_cache_node_with_password_file(tmp_path, free_port):
    pw = tmp_path / "pw"
    pw.write_text("s3cret-pass\n")
    node = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "seneca.cli.main",
            "cache-node",
            "--port",
            str(free_port),
            "--maxmemory",
            "64MB",
            "--password-file",
            str(pw),
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        ok = redis.Redis(port=free_port, password="s3cret-pass", socket_connect_timeout=0.2)
        wait_for_ping(ok, node)
        assert ok.config_get("maxmemory")["maxmemory"] == "64000000"
        assert ok.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=free_port).ping()
        assert "s3cret" not in " ".join(psutil.Process(node.pid).cmdline())
    finally:
        node.terminate()
        node.wait(timeout=10)


def test_cache_node_bad_password_file(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "seneca.cli.main",
            "cache-node",
            "--maxmemory",
            "1GB",
            "--password-file",
            str(tmp_path / "missing"),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "missing" in r.stderr


def test_server_stops_when_its_state_directory_is_removed(runtime_dir):
    import shutil

    acquire_embedded(10_000_000)
    assert _servers(runtime_dir)
    shutil.rmtree(runtime_dir)
    assert _wait_gone(runtime_dir), "watchdog left redis-server behind"


def test_a_runtime_directory_others_may_use_is_refused(runtime_dir):
    from seneca.cache.embedded import acquire_embedded
    from seneca_base.errors import CacheError

    runtime_dir.chmod(0o777)  # as if another user had made it first, open to all
    with pytest.raises(CacheError, match=f"refusing the runtime directory {runtime_dir}"):
        acquire_embedded(10_000_000, name="mode")
    assert not (runtime_dir / "embedded-mode").exists()
