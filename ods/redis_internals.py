"""The one place Seneca uses redis-py's private attributes, or an API that differs between
the redis-py versions the package accepts.

redis-py has no public way to reach a connection's socket, and the cache-hit path needs it: a
reply read straight into its own buffers (``seneca._cache.resp``), a deadline per call and a
check that a kept connection is still open (``ods.routing``). Every such use goes through this
module, and each names what it relies on. :data:`CHECKED` lists the redis-py versions it was
checked against: the oldest the package accepts (CI runs the loader's tests with it,
``scripts/oldest.sh``) and the one in ``constraints.txt``; a test keeps them in step with both.
"""

from __future__ import annotations

import socket
from typing import Any

import redis

__all__ = ["CHECKED", "connection_of", "disown", "socket_of"]

#: redis-py versions these uses were checked against
CHECKED = ("5.0.0", "8.1.0")

#: ``ConnectionPool.get_connection`` takes a command name before 5.3 (unused there), and
#: warns when given one from 5.3 on
_NAMED = tuple(int(p) for p in redis.__version__.split(".")[:2]) < (5, 3)


def socket_of(conn: Any) -> socket.socket | None:
    """The socket of a redis-py ``Connection`` (None: not connected). redis-py keeps it in
    ``Connection._sock`` (5.0-8.1), set by ``connect()`` and cleared by ``disconnect()``."""
    return conn._sock


def connection_of(pool: Any) -> Any:
    """A connection from redis-py ``pool`` (``ConnectionPool.get_connection``)."""
    return pool.get_connection("PING") if _NAMED else pool.get_connection()


#: clients this process inherited over a fork: kept, so never closed or collected here
_INHERITED: list[Any] = []


def disown(client: Any) -> None:
    """Never close or collect ``client`` (a ``Redis`` or ``RedisCluster``) in this process,
    which inherited it over a fork. redis-py closes a collected client's pool, and resets a pool
    inherited over a fork under the pool's lock (``ConnectionPool.reset``, 8.1; 5.0 waits 5 s on
    its fork lock, then raises): a lock that a thread of the parent may have held at the fork,
    so the child would wait forever. The sockets are the parent's; the child makes its own
    client."""
    _INHERITED.append(client)
