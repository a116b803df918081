"""The embedded cache: a private redis-server shared by the jobs on this machine.

With ``cache=None`` every SenecaLoader of this user asking for the same embedded cache name uses
one redis-server on a unix socket under the runtime directory::

    $SENECA_RUNTIME_DIR (default /tmp/seneca-<uid>)/embedded-<name>/
        lock            flock taken to join, leave, start and stop
        users/<pid>     one file per process using the cache (holds the process start time)
        watchdog.pid    the watchdog process (owner of redis-server) and its start time
        maxmemory       the server's maxmemory: the largest cache size asked, plus the rooms
        size            that cache size
        rooms/<hash>    the room a dataset (a hash of its key) needs beside the tiers
        idle            seconds the server outlives its last user (the latest user's setting)
        keep            present while the server outlives its users (``SENECA_KEEP_CACHE=1``)
        stop            present once ``seneca cache stop`` asked it to stop with its last user
        redis.sock      the server's socket

A watchdog process (forked off by ``python -m seneca._cache.embedded DIR``, which exits at once:
it is no user's child) starts redis-server as its child and stops it, then exits, once no
registered user process has been alive for the idle time (``$SENECA_CACHE_IDLE`` seconds,
default ``defaults.EMBEDDED_IDLE``: 10 minutes), so that the next job of a sweep run one after
another finds the cache warm. Users register on first use and
unregister at exit; a user killed by a signal is noticed as a dead pid. So no process outlives
the last user by more than the idle time, whatever way it ends, unless a user asked to keep the
cache (``SENECA_KEEP_CACHE=1``): then it runs until ``seneca cache stop``. ``seneca cache stop``
(:func:`stop_embedded`) stops it at once when no user is alive, else as soon as the last one
ends. Operators find it with :func:`embedded_url` (``seneca cache status`` without a URL).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

from ods.routing import CACHE_FAILURES
from seneca import defaults
from seneca._cache.client import one_server
from seneca._cache.server import redis_config, redis_server_binary
from seneca_base.errors import CacheError, ConfigError
from seneca_base.process import current
from seneca_base.units import format_seconds, format_size

__all__ = [
    "IDLE_ENV",
    "KEEP_ENV",
    "acquire_embedded",
    "embedded_url",
    "idle_seconds",
    "runtime_dir",
    "stop_embedded",
]

log = logging.getLogger("seneca")

RUNTIME_DIR_ENV = "SENECA_RUNTIME_DIR"
#: "1", "true" or "yes": the embedded cache outlives its jobs, until ``seneca cache stop``
KEEP_ENV = "SENECA_KEEP_CACHE"
#: seconds the embedded cache outlives its last job (0: it stops with it)
IDLE_ENV = "SENECA_CACHE_IDLE"
_registered: set[Path] = set()


def _state(name: str) -> Path:
    return runtime_dir() / f"embedded-{name}"


def runtime_dir() -> Path:
    """Where embedded caches keep their state (``$SENECA_RUNTIME_DIR`` or /tmp/seneca-<uid>)."""
    base = os.environ.get(RUNTIME_DIR_ENV) or f"/tmp/seneca-{os.getuid()}"
    return Path(base)


def _private_dir(path: Path) -> Path:
    """``path`` as a directory of this user that nobody else may enter (made with mode 0700
    when missing); CacheError names it when another user owns it or others may use it, as
    when someone else created it first in /tmp."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise CacheError(
            f"refusing the runtime directory {path}: it must be a directory owned by user "
            f"{os.getuid()} with mode 0700 (owner {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}); "
            f"remove it or set ${RUNTIME_DIR_ENV}"
        )
    return path


def _start_time(pid: int) -> str | None:
    """Process start time (clock ticks since boot), None when the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return None if fields[0] in ("Z", "X") else fields[19]


def _alive(record: Path) -> bool:
    """Whether the process recorded in ``record`` ("pid start") still runs."""
    try:
        pid, start = record.read_text().split()
    except (OSError, ValueError):
        return False
    return _start_time(int(pid)) == start


def _record(path: Path, pid: int) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{pid} {_start_time(pid)}")
    tmp.replace(path)


@contextlib.contextmanager
def _locked(state: Path):
    with open(state / "lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _live_users(state: Path) -> int:
    n = 0
    for record in (state / "users").iterdir():
        if _alive(record):
            n += 1
        else:
            record.unlink(missing_ok=True)
    return n


def _ping(sock: Path) -> bool:
    if not sock.exists():
        return False
    try:
        r = one_server(unix_socket_path=str(sock), socket_connect_timeout=0.2, socket_timeout=1)
        return bool(r.ping())
    except CACHE_FAILURES:
        return False


def _release(state: Path, pid: int) -> None:
    if current() != pid:  # a forked child running atexit handlers
        return
    with contextlib.suppress(OSError), _locked(state):
        (state / "users" / str(pid)).unlink(missing_ok=True)


def idle_seconds() -> float:
    """How long the embedded cache outlives its last job: ``$SENECA_CACHE_IDLE`` seconds, else
    ``defaults.EMBEDDED_IDLE``; ConfigError names the variable when it is not a number >= 0."""
    text = os.environ.get(IDLE_ENV, "").strip()
    if not text:
        return defaults.EMBEDDED_IDLE
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise ConfigError(f"${IDLE_ENV}: expected seconds (a number >= 0), got {text!r}")
    return value


def _after_last(state: Path) -> str:
    """What happens once the last job ends, in words."""
    if (state / "keep").exists():
        return "kept after the jobs until `seneca cache stop`"
    idle = _idle_of(state)
    if idle <= 0:
        return "it stops with the last job on this machine"
    return (
        f"it stops {format_seconds(idle)} after the last job on this machine, or at "
        "`seneca cache stop`"
    )


def acquire_embedded(
    maxmemory: int,
    name: str = defaults.EMBEDDED_NAME,
    room: int = 0,
    idle: float | None = None,
    key: str = "",
) -> str:
    """Join (starting it if needed) the embedded cache ``name`` for ``maxmemory`` bytes of
    tiers and ``room`` bytes more for the server's own memory and the metadata of dataset
    ``key``; returns its ``unix://`` URL. A running server grows to the largest size asked,
    plus every dataset's room (the datasets share its size: ``seneca._cache.shares``).

    The calling process stays a user until it exits; the server outlives the last user by
    ``idle`` seconds (None: :func:`idle_seconds`; the measurement tools' private caches: 0).
    """
    _private_dir(runtime_dir())
    state = _state(name)
    _private_dir(state)
    (state / "users").mkdir(exist_ok=True, mode=0o700)
    sock = state / "redis.sock"
    pid = os.getpid()
    keep = os.environ.get(KEEP_ENV, "").strip().lower() in ("1", "true", "yes")
    idle = idle_seconds() if idle is None else idle
    with _locked(state):
        _record(state / "users" / str(pid), pid)
        (state / "idle").write_text(str(idle))
        first = state not in _registered
        if first:
            _registered.add(state)
            atexit.register(_release, state, pid)
        if keep:
            (state / "keep").touch()
        started = not _alive(state / "watchdog.pid")
        if started:
            shutil.rmtree(state / "rooms", ignore_errors=True)
            (state / "size").write_text("0")
            (state / "maxmemory").unlink(missing_ok=True)
        before, after = _sized(state, maxmemory, key, room)
        if started:
            sock.unlink(missing_ok=True)
            out = open(state / "watchdog.log", "wb")  # noqa: SIM115 - handed to the child
            # the child starts the watchdog in a process of its own and exits (see _detached):
            # waited for here, no child of this process outlives the call
            try:
                status = subprocess.call(
                    [sys.executable, "-m", "seneca._cache.embedded", str(state)],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=out,
                    start_new_session=True,
                    close_fds=True,
                    timeout=defaults.EMBEDDED_START_TIMEOUT,
                )
            except subprocess.TimeoutExpired:  # (killed by call)
                status = -1
            finally:
                out.close()
            if status != 0:
                tail = (state / "watchdog.log").read_text(errors="replace")[-2000:]
                raise CacheError(f"embedded cache watchdog did not start; log:\n{tail}")
    deadline = time.monotonic() + defaults.EMBEDDED_START_TIMEOUT
    while not _ping(sock):
        if time.monotonic() > deadline or not _alive(state / "watchdog.pid"):
            tail = (state / "watchdog.log").read_text(errors="replace")[-2000:]
            raise CacheError(f"embedded cache at {sock} did not start; log:\n{tail}")
        time.sleep(0.02)
    if not started and after != before:
        _grow(sock, after)
        log.info(
            "the embedded cache unix://%s grows to %s of memory, for cache_size=%s",
            sock,
            format_size(after),
            format_size(maxmemory),
        )
    if first:
        log.info(
            "%s the embedded cache unix://%s (%s); `seneca cache status` shows it",
            "started" if started else "joined",
            sock,
            _after_last(state),
        )
    return f"unix://{sock}"


def _sized(state: Path, size: int, key: str, room: int) -> tuple[int, int]:
    """Note a user's ``size`` and its dataset's ``room`` (under the lock); returns the
    server's maxmemory before and after: the largest size plus every room."""
    rooms = state / "rooms"
    rooms.mkdir(exist_ok=True, mode=0o700)
    try:
        before = int((state / "maxmemory").read_text())
    except (OSError, ValueError):
        before = 0
    largest = max(size, int((state / "size").read_text() or 0))
    (state / "size").write_text(str(largest))
    mine = rooms / hashlib.sha1(key.encode()).hexdigest()[:16]  # any key as a file name
    mine.write_text(str(max(room, _int_of(mine))))
    after = largest + sum(_int_of(p) for p in rooms.iterdir())
    (state / "maxmemory").write_text(str(max(before, after)))
    return before, max(before, after)


def _int_of(path: Path) -> int:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return 0


def _grow(sock: Path, maxmemory: int) -> None:
    """Set the running server's maxmemory."""
    r = one_server(unix_socket_path=str(sock), socket_connect_timeout=1, socket_timeout=5)
    try:
        r.config_set("maxmemory", maxmemory)
    finally:
        r.close()


def embedded_url(name: str = defaults.EMBEDDED_NAME) -> str:
    """The ``unix://`` URL of this user's embedded cache ``name`` on this machine; CacheError
    when it does not run."""
    sock = _state(name) / "redis.sock"
    if not _ping(sock):
        raise CacheError(
            f"no URL given, and no embedded cache runs for this user here ({sock}): it stops "
            f"with the last job unless the jobs ran with {KEEP_ENV}=1; give the cache's URL"
        )
    return f"unix://{sock}"


def stop_embedded(name: str = defaults.EMBEDDED_NAME) -> int:
    """Stop this user's embedded cache ``name``: now when no job uses it, else as soon as the
    last one ends (it no longer outlives its jobs). Returns how many processes still use it
    (0: it has stopped; waits a few seconds for that)."""
    state = _state(name)
    if not state.is_dir() or not _alive(state / "watchdog.pid"):
        return 0
    with _locked(state):
        (state / "keep").unlink(missing_ok=True)
        (state / "stop").touch()
        users = _live_users(state)
    if users:
        return users
    deadline = time.monotonic() + defaults.EMBEDDED_START_TIMEOUT
    while _alive(state / "watchdog.pid"):
        if time.monotonic() > deadline:
            with _locked(state):
                return max(1, _live_users(state))
        time.sleep(defaults.EMBEDDED_POLL)
    return 0


def _watchdog(state: Path) -> int:
    """Own redis-server for ``state`` until no user is alive; returns the exit status."""
    with _locked(state):
        maxmemory = int((state / "maxmemory").read_text())
        config = redis_config(
            maxmemory=maxmemory, unixsocket=str(state / "redis.sock"), directory=str(state)
        )
        server = subprocess.Popen(
            [redis_server_binary(), "-"], stdin=subprocess.PIPE, close_fds=True
        )
        server.stdin.write(config.encode())
        server.stdin.close()
    idle_since: float | None = None  # when the last user ended (monotonic)
    try:
        while True:
            time.sleep(defaults.EMBEDDED_POLL)
            with _locked(state):
                if server.poll() is not None:
                    print(f"redis-server exited with status {server.returncode}", flush=True)
                    (state / "watchdog.pid").unlink(missing_ok=True)
                    return 1
                if _live_users(state) or (state / "keep").exists():
                    idle_since = None
                    continue
                now = time.monotonic()
                idle_since = now if idle_since is None else idle_since
                stop = state / "stop"
                if stop.exists() or now - idle_since >= _idle_of(state):
                    _stop(server)
                    for done in ("redis.sock", "watchdog.pid", "stop"):
                        (state / done).unlink(missing_ok=True)
                    return 0
    except OSError as e:  # the state directory is gone or unusable: nobody can join any more
        print(f"stopping: {e}", flush=True)
        _stop(server)
        return 1


def _idle_of(state: Path) -> float:
    try:
        return float((state / "idle").read_text())
    except (OSError, ValueError):
        return 0.0


def _stop(server: subprocess.Popen) -> None:
    if server.poll() is None:
        server.terminate()
        try:
            server.wait(timeout=5)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _detached(state: Path) -> int:
    """Start the watchdog of ``state`` in a process of its own (forked from this one, which
    records it and exits): the user process that started this one waits for it, so no child
    of that process runs on unwaited (a ``Popen`` of a running process, dropped, warns), and
    the watchdog outlives every user, as it must."""
    pid = os.fork()
    if pid == 0:
        return _watchdog(state)
    _record(state / "watchdog.pid", pid)
    return 0


if __name__ == "__main__":
    sys.exit(_detached(Path(sys.argv[1])))
