"""Cache URLs and fail-fast Redis clients.

Clients are never created at import or construction time: a :class:`CacheClient` holds only the
URL and makes its redis-py client lazily in the process that first uses it, so it pickles cleanly
into fork or spawn DataLoader workers. Timeouts are short and redis-py's retries are off, so an
unreachable cache costs well under a second per call instead of seconds of retries: a loader's
calls wait their measured deadline (``ods.routing.deadline``), and its client's other waits (a new
connection's handshake) ``ods.defaults.DEADLINE_FLOOR``; operators' commands wait up to
``defaults.SOCKET_TIMEOUT``. A new connection sends nothing before the first command (no
``CLIENT SETINFO``), so connecting to a frozen server costs no extra wait.

How the operator tools read plain replies: as text (:func:`text_of`), and the server's clock
(:func:`server_ms`).
"""

from __future__ import annotations

import socket
import ssl
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from ods.redis_internals import disown
from ods.routing import UNREACHABLE
from seneca import defaults
from seneca_base.errors import CacheUnavailableError, ConfigError
from seneca_base.process import Made

__all__ = ["CacheClient", "one_server", "redact_url", "server_ms", "text_of", "validate_url"]

_SCHEMES = ("redis", "rediss", "unix")

try:  # redis-py >= 8: no CLIENT SETINFO on connect
    import redis.driver_info

    _NO_SETINFO: dict = {"driver_info": None}
except ImportError:
    _NO_SETINFO = {"lib_name": None, "lib_version": None}


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    if parts.password is None and "password=" not in parts.query:
        return url
    netloc = parts.netloc
    if parts.password is not None:
        user = parts.username or ""
        netloc = f"{user}:***@{netloc.rsplit('@', 1)[1]}"
    query = "&".join(
        "password=***" if q.startswith("password=") else q for q in parts.query.split("&") if q
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def validate_url(url: str) -> str:
    """Check the form of a cache URL (``redis://``, ``rediss://`` or ``unix://``)."""
    if not isinstance(url, str) or not url:
        raise ConfigError(f"cache: expected a URL such as redis://host:6379, got {url!r}")
    try:
        parts = urlsplit(url)
        _ = parts.port
    except ValueError as e:
        raise ConfigError(f"cache: malformed URL {redact_url(url)}: {e}") from None
    if parts.scheme not in _SCHEMES:
        raise ConfigError(
            f"cache: URL scheme must be one of {', '.join(s + '://' for s in _SCHEMES)}, "
            f"got {redact_url(url)}"
        )
    if parts.scheme == "unix" and not parts.path:
        raise ConfigError(f"cache: unix:// URL needs a socket path, got {redact_url(url)}")
    if parts.scheme != "unix" and not parts.hostname:
        raise ConfigError(f"cache: URL needs a host, got {redact_url(url)}")
    return url


def _options(timeout: float, retries: int = 0) -> dict:
    """Options of every client: fail fast (short timeouts, no retries by redis-py; a cluster
    client's ``retries`` after cluster errors), no handshake beyond a login."""
    return {
        "socket_connect_timeout": min(defaults.CONNECT_TIMEOUT, timeout),
        "socket_timeout": timeout,
        "retry": Retry(NoBackoff(), retries),
        "health_check_interval": 0,
        **_NO_SETINFO,
    }


def one_server(**kwargs: Any) -> redis.Redis:
    """A client of one server for Seneca's own checks (is it up, has the cluster formed):
    each command tried once, as by every client of Seneca's (redis-py 6 and later retry a
    connection error 10 times with backoff by default: about 5 s per refused try)."""
    return redis.Redis(retry=Retry(NoBackoff(), 0), **kwargs)


def _cluster_enabled(client: redis.Redis) -> bool | None:
    """Whether the server runs in cluster mode (None: it did not answer; asked again later)."""
    try:
        return str(client.info("cluster").get("cluster_enabled", 0)) == "1"
    except UNREACHABLE:
        return None
    except redis.ResponseError:  # INFO refused (an ACL): not a cluster Seneca can route
        return False


#: ``getaddrinfo`` errors that mean the host name does not exist (a configuration error), not
#: that name resolution failed for now (an outage)
_NO_SUCH_HOST = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}


class CacheClient:
    """A lazily connected, fail-fast Redis client for one cache URL (picklable); ``timeout``:
    seconds any socket may wait (default ``defaults.SOCKET_TIMEOUT``)."""

    def __init__(self, url: str, timeout: float | None = None) -> None:
        self.url = validate_url(url)
        self.timeout = defaults.SOCKET_TIMEOUT if timeout is None else float(timeout)
        self._redis: redis.Redis | None = None
        self._cluster: bool | None = None
        self._made = Made()  # the process whose client _redis is

    def __getstate__(self) -> dict:
        return {"url": self.url, "timeout": self.timeout, "cluster": self._cluster}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["url"], state.get("timeout"))
        self._cluster = state.get("cluster")

    @property
    def redacted(self) -> str:
        return redact_url(self.url)

    @property
    def local(self) -> bool:
        """Whether the cache runs on this machine (a unix socket or a loopback host)."""
        if self.url.startswith("unix:"):
            return True
        return urlsplit(self.url).hostname in ("localhost", "127.0.0.1", "::1")

    @property
    def redis(self) -> redis.Redis:
        """The redis-py client of this process (re-created after a fork): a ``RedisCluster``
        when the server is a node of a Redis Cluster (asked once, with ``INFO cluster``)."""
        if self._redis is None or self._made.inherited:
            if self._redis is not None:  # the parent's, inherited over a fork
                disown(self._redis)
            self._redis = redis.Redis.from_url(self.url, **_options(self.timeout))
            self._made.take()
            if self._cluster is None:
                self._cluster = _cluster_enabled(self._redis)
            if self._cluster:
                self._redis.close()
                self._redis = RedisCluster.from_url(
                    self.url,
                    require_full_coverage=False,  # a dead primary's values are misses
                    **_options(self.timeout, defaults.CLUSTER_RETRIES),
                )
        return self._redis

    @property
    def cluster(self) -> bool:
        """Whether the cache is a Redis Cluster (connects to find out)."""
        _ = self.redis
        return bool(self._cluster)

    def memory(self) -> tuple[int, int]:
        """The server's ``maxmemory`` and its own memory (``used_memory_overhead``: what it
        uses besides the keys' data) in bytes, from ``INFO memory`` (a loader's ACL user may
        not run CONFIG); a cluster's summed over its primaries (maxmemory 0: no limit on some
        node)."""
        nodes = self._info("memory")
        limits = [int(n.get("maxmemory", 0)) for n in nodes]
        used = sum(int(n.get("used_memory_overhead", 0)) for n in nodes)
        return (0 if not limits or 0 in limits else sum(limits)), used

    def cpu_seconds(self) -> tuple[float, float] | None:
        """The CPU seconds the server has used, all its threads and its main thread (which
        runs every command), from ``INFO cpu``; a cluster's summed over its primaries. None
        when the server does not tell (an ACL user without INFO, an older server)."""
        try:
            nodes = self._info("cpu")
        except redis.RedisError:
            return None
        try:
            total = sum(float(n["used_cpu_sys"]) + float(n["used_cpu_user"]) for n in nodes)
            main = sum(
                float(n["used_cpu_sys_main_thread"]) + float(n["used_cpu_user_main_thread"])
                for n in nodes
            )
        except KeyError:
            return None
        return total, main

    def _info(self, section: str) -> list[dict]:
        """``INFO section`` of the server, or of every primary of a cluster."""
        client = self.redis
        if isinstance(client, RedisCluster):
            return list(client.info(section, target_nodes=RedisCluster.PRIMARIES).values())
        return [client.info(section)]

    def maxmemory(self) -> int:
        """The server's ``maxmemory`` in bytes (see :meth:`memory`)."""
        return self.memory()[0]

    def ping(self) -> None:
        """Check that the server answers. A refused login, a command the ACL user may not run
        or a certificate that fails verification is a ConfigError (the configuration is wrong:
        training must not go on uncached); an unreachable or failing server is a
        CacheUnavailableError. Both name the URL, its password redacted."""
        try:
            self.redis.ping()
        except (redis.AuthenticationError, redis.exceptions.NoPermissionError) as e:
            raise ConfigError(
                f"cache: {self.redacted} refused the login: {self._hint(e)}"
            ) from None
        except UNREACHABLE as e:
            if isinstance(e.__context__, ssl.SSLCertVerificationError):
                raise ConfigError(f"cache: {self.redacted} failed TLS verification: {e}") from None
            cause = e.__context__
            if isinstance(cause, socket.gaierror) and cause.errno in _NO_SUCH_HOST:
                host = urlsplit(self.url).hostname
                raise ConfigError(
                    f"cache: the host {host!r} of {self.redacted} does not exist ({cause.strerror})"
                ) from None
            raise CacheUnavailableError(f"cache {self.redacted} is unreachable: {e}") from None
        except redis.ResponseError as e:
            raise CacheUnavailableError(f"cache {self.redacted} answered an error: {e}") from None

    def _hint(self, err: Exception) -> str:
        """``err`` of a refused login, with what to change in the URL."""
        parts = urlsplit(self.url)
        if parts.password is None:
            return (
                f"{err} (the node asks for a login: a node started with --password-file logs "
                "loaders in as the user 'loader': redis://loader:PASSWORD@host:port)"
            )
        if not parts.username:
            return (
                f"{err} (a node started with --password-file logs loaders in as the user "
                "'loader': redis://loader:PASSWORD@host:port)"
            )
        return str(err)

    def close(self) -> None:
        if self._redis is not None and not self._made.inherited:
            self._redis.close()
        elif self._redis is not None:  # the parent's, inherited over a fork
            disown(self._redis)
        self._redis = None


def text_of(v: Any) -> str:
    """A reply (bytes or str) as text."""
    return v.decode() if isinstance(v, bytes | bytearray) else str(v)


def server_ms(client: Any) -> int:
    """The server's clock in ms (a cluster answers from one of its nodes)."""
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000
