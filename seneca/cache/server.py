"""Running redis-server with Seneca's settings: config text, standalone cache node."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from seneca import defaults
from seneca_base.errors import CacheError, ConfigError

__all__ = ["redis_config", "redis_server_binary", "run_cache_node"]


def redis_server_binary() -> str:
    """Path of redis-server; CacheError says how to install it when it is missing."""
    path = shutil.which("redis-server")
    if path is None:
        raise CacheError(
            "redis-server not found on PATH: install it (Debian/Ubuntu: apt-get install "
            "redis-server) or pass cache='redis://host:port' to use a running cache node"
        )
    return path


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def redis_config(
    *,
    maxmemory: int,
    port: int = 0,
    bind: str | None = None,
    unixsocket: str | None = None,
    password: str | None = None,
    directory: str | None = None,
) -> str:
    """redis.conf text for a cache: no persistence, ``maxmemory`` bytes, no eviction by Redis
    (Seneca enforces its per-tier budgets itself), no password on any command line."""
    lines = [
        f"port {port}",
        f"maxmemory {maxmemory}",
        "maxmemory-policy noeviction",
        'save ""',
        "appendonly no",
        "daemonize no",
        "loglevel warning",
        "lazyfree-lazy-user-del yes",
    ]
    if bind:
        lines.append(f"bind {bind}")
    if unixsocket:
        lines += [f"unixsocket {_quote(unixsocket)}", "unixsocketperm 700"]
    if directory:
        lines.append(f"dir {_quote(directory)}")
    if password:
        lines.append(f"requirepass {_quote(password)}")
    else:
        lines.append("protected-mode yes")
    return "\n".join(lines) + "\n"


def exec_redis_server(config: str) -> None:
    """Replace this process by redis-server reading ``config`` from a pipe on stdin."""
    binary = redis_server_binary()
    read_end, write_end = os.pipe()
    os.write(write_end, config.encode())
    os.close(write_end)
    os.dup2(read_end, 0)
    os.close(read_end)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(binary, [binary, "-"])


def read_password_file(path: str | os.PathLike) -> str:
    """The first line of a password file; ConfigError names the file when it is unusable."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ConfigError(f"--password-file: cannot read {p}: {e.strerror}") from None
    password = text.splitlines()[0].strip() if text.strip() else ""
    if not password:
        raise ConfigError(f"--password-file: {p} is empty")
    return password


def run_cache_node(
    *,
    port: int = defaults.CACHE_NODE_PORT,
    maxmemory: int,
    password_file: str | None = None,
    bind: str = defaults.CACHE_NODE_BIND,
) -> None:
    """Run a standalone cache node in the foreground (does not return)."""
    if not 0 < port < 65536:
        raise ConfigError(f"--port: must be 1..65535, got {port}")
    password = read_password_file(password_file) if password_file else None
    if password is None and bind not in ("127.0.0.1", "::1", "localhost"):
        print(
            f"warning: cache node on {bind} without --password-file; Redis protected mode "
            "will refuse non-loopback clients",
            file=sys.stderr,
        )
    config = redis_config(maxmemory=maxmemory, port=port, bind=bind, password=password)
    exec_redis_server(config)
