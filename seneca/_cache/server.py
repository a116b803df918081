"""Running redis-server with Seneca's settings: config text, standalone cache node."""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from ods.defaults import KEY_PREFIX
from ods.keys import Keys
from seneca import defaults
from seneca_base.errors import CacheError, ConfigError

log = logging.getLogger("seneca")

__all__ = [
    "CLUSTER_LINES",
    "LOADER_REFUSED",
    "LOADER_RULES",
    "acl_lines",
    "cache_node_config",
    "node_url",
    "redis_config",
    "redis_server_binary",
    "serve_redis_server",
    "tls_lines",
]


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


#: redis.conf lines of a node of a Redis Cluster. A cluster whose primary died keeps serving the
#: slots of the others: that node's values become misses, and training goes on.
CLUSTER_LINES = [
    "cluster-enabled yes",
    "cluster-config-file nodes.conf",
    "cluster-node-timeout 2000",
    "cluster-require-full-coverage no",
    "cluster-allow-reads-when-down yes",
]

#: What the ``loader`` ACL user may do: read and write Seneca's keys (``<prefix>:*``), call and
#: load the engine's functions, read the server's clock, memory and maxmemory and a cluster's
#: slot map; nothing that flushes, reconfigures or lists the whole keyspace.
LOADER_RULES = (
    "resetchannels -@all +@read +@write +@keyspace +@connection +@scripting +@transaction "
    "-@dangerous +function|load +time +info -eval -evalsha -script -config -acl "
    "-function|flush -function|delete -function|restore -function|kill "
    "+cluster|slots +cluster|shards +cluster|nodes +cluster|info +cluster|myid +asking +readonly"
)
#: Commands the ``loader`` user is refused (``tests/cache/test_acl.py`` runs each).
LOADER_REFUSED = (
    "KEYS", "CONFIG", "FLUSHALL", "FLUSHDB", "SCRIPT", "EVAL", "MODULE", "ACL", "SAVE",
    "BGSAVE", "DEBUG", "SHUTDOWN", "FUNCTION FLUSH", "FUNCTION DELETE", "CLIENT KILL",
)  # fmt: skip


def acl_lines(users: Mapping[str, str], prefix: str = KEY_PREFIX) -> list[str]:
    """redis.conf ``user`` directives: ``admin`` (everything) and ``loader`` (Seneca's keys,
    :data:`LOADER_RULES`); the default user is off. Passwords are stored as SHA-256 hashes."""
    unknown = set(users) - {"admin", "loader"}
    if unknown or not users:
        raise ConfigError(f"users: expected 'admin' and/or 'loader', got {sorted(users)}")

    def secret(name: str) -> str:
        return "#" + hashlib.sha256(users[name].encode()).hexdigest()

    lines = ["user default off"]
    if "admin" in users:
        lines.append(f"user admin on {secret('admin')} ~* &* +@all")
    if "loader" in users:
        lines.append(
            f"user loader on {secret('loader')} resetkeys ~{Keys.everything(prefix)} {LOADER_RULES}"
        )
    return lines


def tls_lines(port: int, cert: str, key: str, ca: str | None) -> list[str]:
    """redis.conf lines serving TLS only, on ``port``. Clients need not present certificates;
    with a CA, those that do are verified against it."""
    lines = ["port 0", f"tls-port {port}", f"tls-cert-file {_quote(cert)}"]
    lines.append(f"tls-key-file {_quote(key)}")
    if ca:
        lines += [f"tls-ca-cert-file {_quote(ca)}", "tls-auth-clients optional"]
    else:
        lines.append("tls-auth-clients no")
    return lines


def redis_config(
    *,
    maxmemory: int,
    port: int = 0,
    bind: str | None = None,
    unixsocket: str | None = None,
    directory: str | None = None,
    users: Mapping[str, str] | None = None,
    tls: tuple[str, str, str | None] | None = None,
    cluster: bool = False,
) -> str:
    """redis.conf text for a cache: no persistence, ``maxmemory`` bytes, no eviction by Redis
    (Seneca enforces its per-tier budgets itself), no password on any command line. ``users``:
    ACL users (:func:`acl_lines`; without them, protected mode); ``tls``: (certificate, key, CA)
    to serve TLS only on ``port``; ``cluster``: a node of a Redis Cluster (:data:`CLUSTER_LINES`;
    its nodes.conf goes in ``directory``)."""
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
    if tls:
        lines = [x for x in lines if not x.startswith("port ")] + tls_lines(port, *tls)
    if cluster:
        lines += CLUSTER_LINES
    if users:
        lines += acl_lines(users)
    else:
        lines.append("protected-mode yes")
    return "\n".join(lines) + "\n"


def node_url(port: int, bind: str, tls: bool, user: str | None) -> str:
    """The URL loaders use for a cache node on ``port`` listening on ``bind`` (its first
    address; a wildcard: this host's name), the password shown as ``***``."""
    host = bind.split()[0]
    if host in ("0.0.0.0", "::", "*"):
        host = socket.gethostname()
    login = f"{user}:***@" if user else ""
    return f"{'rediss' if tls else 'redis'}://{login}{host}:{port}"


def serve_redis_server(config: str, port: int, bind: str, url: str) -> int:
    """Run redis-server on ``config`` (given on a pipe, so no password is on a command line)
    in the foreground: print one line with ``url`` once it accepts connections on ``port`` of
    ``bind``'s first address, pass SIGINT and SIGTERM on to it, and return its exit status.
    The server runs in a process group of its own, so a Ctrl-C at the terminal reaches it once,
    passed on from here (twice, redis-server would stop without saving what it was doing)."""
    binary = redis_server_binary()
    proc = subprocess.Popen([binary, "-"], stdin=subprocess.PIPE, process_group=0)
    assert proc.stdin is not None
    proc.stdin.write(config.encode())
    proc.stdin.close()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: proc.send_signal(signum))
    host = bind.split()[0]
    host = "127.0.0.1" if host in ("0.0.0.0", "*") else "::1" if host == "::" else host
    deadline = time.monotonic() + defaults.EMBEDDED_START_TIMEOUT
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=0.2).close()
        except OSError:
            time.sleep(0.05)
            continue
        print(f"cache node ready: {url}", flush=True)
        break
    return proc.wait()


def read_password_file(path: str | os.PathLike, option: str = "--password-file") -> str:
    """The first line of a password file; ConfigError names the file when it is unusable."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ConfigError(f"{option}: cannot read {p}: {e.strerror}") from None
    password = text.splitlines()[0].strip() if text.strip() else ""
    if not password:
        raise ConfigError(f"{option}: {p} is empty")
    return password


def _users(
    loader_file: str | None, admin_file: str | None, option: str = "--password-file"
) -> dict[str, str]:
    """ACL users: ``loader`` from its password file, ``admin`` from its own, or with a password
    generated into ``<loader's file>.admin`` (kept there for the next start)."""
    if loader_file is None:
        raise ConfigError("--admin-password-file needs --password-file (the loader's login)")
    loader = read_password_file(loader_file, option)
    if admin_file is None:
        admin_file = f"{loader_file}.admin"
        if not os.path.exists(admin_file):
            try:
                fd = os.open(admin_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except OSError as e:
                raise ConfigError(
                    f"--admin-password-file: none given, and {admin_file} cannot be written "
                    f"for a generated one: {e.strerror}"
                ) from None
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(24) + "\n")
            log.warning(  # said once, when the operator most needs to know where it is
                "generated the admin user's password into %s (--admin-password-file chooses one)",
                admin_file,
            )
    admin = read_password_file(admin_file, "--admin-password-file")
    if admin == loader:
        raise ConfigError("--admin-password-file: the admin's password must not be the loader's")
    return {"loader": loader, "admin": admin}


def _tls(cert: str | None, key: str | None, ca: str | None) -> tuple[str, str, str | None] | None:
    """(certificate, key, CA) after checking the files can be read."""
    if cert is None and key is None and ca is None:
        return None
    if cert is None or key is None:
        raise ConfigError("--tls-cert and --tls-key: give both to serve TLS")
    for option, path in (("--tls-cert", cert), ("--tls-key", key), ("--tls-ca", ca)):
        if path is not None and not os.access(path, os.R_OK):
            raise ConfigError(f"{option}: cannot read {path}")
    return str(Path(cert).resolve()), str(Path(key).resolve()), ca and str(Path(ca).resolve())


def cache_node_config(
    *,
    port: int = defaults.CACHE_NODE_PORT,
    maxmemory: int,
    password_file: str | None = None,
    bind: str = defaults.CACHE_NODE_BIND,
    loader_password_file: str | None = None,
    admin_password_file: str | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    tls_ca: str | None = None,
    cluster: bool = False,
) -> str:
    """The redis.conf text of ``seneca cache-node`` (and of the compose files' cache nodes):
    checks the options and reads the password files. A password file (``password_file``, or
    the same as ``loader_password_file``) makes the node least-privilege: ACL users ``loader``
    (:data:`LOADER_RULES`) and ``admin`` (the admin's file, else a generated password in
    ``<password file>.admin``), the default user off."""
    if not 0 < port < 65536:
        raise ConfigError(f"--port: must be 1..65535, got {port}")
    if password_file is not None and loader_password_file is not None:
        raise ConfigError("give --password-file or --loader-password-file (the same), not both")
    loader_file, option = password_file, "--password-file"
    if loader_password_file is not None:
        loader_file, option = loader_password_file, "--loader-password-file"
    users = None
    if loader_file is not None or admin_password_file is not None:
        users = _users(loader_file, admin_password_file, option)
    if users is None and bind not in ("127.0.0.1", "::1", "localhost"):
        log.warning(
            "cache node on %s without a password file: Redis protected mode will refuse "
            "non-loopback clients",
            bind,
        )
    tls = _tls(tls_cert, tls_key, tls_ca)
    return redis_config(
        maxmemory=maxmemory,
        port=port,
        bind=bind,
        users=users,
        tls=tls,
        cluster=cluster,
    )
