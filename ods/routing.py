"""Commands sent to the node that serves their keys: one Redis, or the primaries of a Redis
Cluster, in one round trip either way.

A batch of commands is grouped per node; every node's commands are written before any reply is
read, and the replies come back in the commands' order. On a cluster, a command whose keys may
span slots (MGET, UNLINK, DEL, EXISTS: values live in slots of their own) is split into one
command per key, and the replies are merged again (MGET: the list; the others: the sum). A
function call goes to the node of its first declared key (a dataset's metadata shares one slot).
A MOVED reply refreshes the slot map and sends that command again; an ASK reply (a slot being
migrated, the key already on the importing node) sends ``ASKING`` and the command to the node it
names, once, leaving the slot map as it is.

A write takes a connection kept by this module after every reply on it was read (a few per
pool and process), else one from the client's pool; commands are packed by hiredis directly
where it takes their arguments.

Every socket a call uses waits at most the call's deadline (:func:`deadline`) for the server to
take a write or send a byte of a reply, or the call fails with ``redis.TimeoutError`` and its
connection is closed (its replies are never read). A frozen or partitioned server then costs
one deadline, not a socket timeout of seconds. The deadline is measured per kind of call
(:func:`kind_of`: its first command's name, a function call's function), from the waits of the
calls of that kind while the cache is healthy (``ods.defaults.DEADLINE_*``): the wait of each
node's replies is measured for the deadlines of later calls of that kind.

Error replies come back in place as exceptions. A node that cannot be reached fails the batch on
a single server (the exception is raised); on a cluster its commands get the exception in place,
so the other nodes' replies are still used (its values become misses).

Replies are read once. An exception while they are read that is not the connection's (Ctrl-C's
KeyboardInterrupt, raised wherever the main thread is) closes the connections whose replies were
not read yet; asked for again, those replies are a ConnectionError, a cache failure. No
connection is ever given back twice (two callers would share it, and read each other's replies).
"""

from __future__ import annotations

import select
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import ClusterDownError, ReadOnlyError, RedisClusterException, TryAgainError

from ods import defaults
from ods.redis_internals import connection_of, socket_of
from seneca_base.errors import CacheError
from seneca_base.process import current

__all__ = [
    "CACHE_FAILURES",
    "OUTAGES",
    "UNREACHABLE",
    "Sent",
    "abandon",
    "client_of",
    "deadline",
    "is_cluster",
    "kept",
    "kind_of",
    "measured",
    "primaries",
    "receive",
    "run",
    "send",
]

#: What a call to the cache raises when the cache fails: the one definition of a cache failure
#: (a loader reads around it, unless ``strict``). Any error of the connection or of a reply,
#: Seneca's errors of the cache's replies (CacheError), and a Redis Cluster none of whose
#: nodes answers (RedisClusterException, not a RedisError). :data:`OUTAGES` and
#: :data:`UNREACHABLE` are parts of it.
CACHE_FAILURES: tuple[type[BaseException], ...] = (
    redis.RedisError,
    OSError,
    RedisClusterException,
    CacheError,
)
#: What a call raises when its connection failed: the server could not be reached, or the
#: connection broke or timed out.
UNREACHABLE: tuple[type[BaseException], ...] = (redis.ConnectionError, redis.TimeoutError, OSError)
#: What a call to a cache that cannot serve now raises: the caller goes on from storage (never
#: an error of the call itself). A Redis Cluster none of whose nodes answers raises
#: RedisClusterException, not a ConnectionError; one that lost the primaries of some slots
#: refuses every command (CLUSTERDOWN, MASTERDOWN); one resharding may refuse a call
#: (TRYAGAIN); a write that reaches a replica (after a failover, or a URL naming one) is refused
#: (READONLY).
OUTAGES: tuple[type[BaseException], ...] = (
    *UNREACHABLE,
    RedisClusterException,
    ClusterDownError,
    TryAgainError,
    ReadOnlyError,
)


def client_of(source: Any) -> redis.Redis:
    """The redis-py client of this process from ``source``: a client, or an object whose
    ``redis`` attribute gives one per process (how stores, outboxes and the node's shares are
    given theirs, so that they pickle into DataLoader workers)."""
    return source.redis if hasattr(source, "redis") else source


_KEYLESS = {"TIME", "PING", "INFO", "SLOWLOG", "FUNCTION", "CONFIG", "CLUSTER", "MEMORY"}
_SPLIT = {"MGET": "GET", "UNLINK": "UNLINK", "DEL": "DEL", "EXISTS": "EXISTS"}
_REDIRECTS = 2
_JOIN = 1 << 16  # packed commands up to this size are sent as one piece
#: per pool, {pid: connections kept for the next writes}
_KEPT: weakref.WeakKeyDictionary[Any, dict[int, list[Any]]] = weakref.WeakKeyDictionary()
_KEEP = 4

try:
    from hiredis import pack_command as _pack
except ImportError:  # redis-py packs
    _pack = None

#: reads the reply of command ``position`` from ``conn``
Read = Callable[[Any, int], Any]


def is_cluster(client: Any) -> bool:
    """Whether ``client`` talks to a Redis Cluster."""
    return isinstance(client, RedisCluster)


def primaries(client: Any) -> list[redis.Redis]:
    """A client of each server that holds keys: a cluster's primaries, or ``client`` itself."""
    if not is_cluster(client):
        return [client]
    return [_connection(client, node) for node in client.get_primaries()]


def _name(command: Sequence[Any]) -> str:
    head = command[0]
    return (head.decode() if isinstance(head, bytes) else str(head)).upper()


def routing_key(command: Sequence[Any]) -> Any:
    """The key whose slot serves ``command`` (None: any node)."""
    name = _name(command)
    if name in ("FCALL", "FCALL_RO", "EVAL", "EVALSHA"):
        return command[3] if int(command[2]) > 0 else None
    if name in _KEYLESS or len(command) < 2:
        return None
    return command[1]


_SLOW: dict[str, float] = {}  # kind -> the slowest recent wait (s), older ones decayed


def kind_of(commands: Sequence[Sequence[Any]]) -> str:
    """The kind of a call made of ``commands``: its first command's name (FCALL: the
    function's name)."""
    if not commands:
        return ""
    first = commands[0]
    name = first[1] if str(first[0]).upper() in ("FCALL", "FCALL_RO") else first[0]
    return name.decode() if isinstance(name, bytes | bytearray) else str(name)


def deadline(of: str) -> float:
    """Seconds a call of kind ``of`` may wait for the server without progress."""
    slow = _SLOW.get(of)
    if slow is None:
        return defaults.DEADLINE_CEILING
    wait = defaults.DEADLINE_FACTOR * slow
    return min(max(wait, defaults.DEADLINE_FLOOR), defaults.DEADLINE_CEILING)


def measured(of: str, seconds: float) -> None:
    """A call of kind ``of`` got its replies after waiting ``seconds``."""
    _SLOW[of] = max(seconds, _SLOW.get(of, 0.0) * defaults.DEADLINE_DECAY)


@dataclass
class Sent:
    """Commands written to their nodes; their replies not read yet."""

    client: Any
    commands: list[tuple]  # as sent (multi-key commands split on a cluster)
    spans: list[tuple[str, int, int]]  # per command asked: (name, first, count) in commands
    groups: list[tuple[Any, Any, list[int]]] = field(default_factory=list)  # pool, conn, where
    failed: dict[int, BaseException] = field(default_factory=dict)
    kind: str = ""  # the call's kind (:func:`kind_of`) ...
    deadline: float = 0.0  # ... and how long its sockets may wait for the server (s)


def _expand(client: Any, commands: Sequence[Sequence[Any]]) -> tuple[list, list]:
    flat: list[tuple] = []
    spans = []
    for command in commands:
        name = _name(command)
        if is_cluster(client) and name in _SPLIT and len(command) > 2:
            spans.append((name, len(flat), len(command) - 1))
            flat += [(_SPLIT[name], key) for key in command[1:]]
        else:
            spans.append(("", len(flat), 1))
            flat.append(tuple(command))
    return flat, spans


def _connection(client: Any, node: Any) -> redis.Redis:
    """The client of a cluster ``node`` (made on first use)."""
    return node.redis_connection or client.get_redis_connection(node)


def _node(client: Any, command: Sequence[Any]) -> redis.Redis:
    key = routing_key(command)
    node = client.get_node_from_key(key) if key is not None else client.get_default_node()
    return _connection(client, node)


def send(client: Any, commands: Sequence[Sequence[Any]]) -> Sent:
    """Write ``commands`` to the nodes that serve them (all writes before any read)."""
    flat, spans = _expand(client, commands)
    of = kind_of(flat)
    sent = Sent(client, flat, spans, kind=of, deadline=deadline(of))
    try:
        if is_cluster(client):
            by_node: dict[int, tuple[redis.Redis, list[int]]] = {}
            for k, command in enumerate(flat):
                node = _node(client, command)
                by_node.setdefault(id(node), (node, []))[1].append(k)
            _write(sent, list(by_node.values()))
        else:
            _write(sent, [(client, list(range(len(flat))))])
    except BaseException:  # (a failure on a single server, an interrupt): none left checked out
        abandon(sent)
        raise
    return sent


def _packed(conn: Any, commands: list[tuple]) -> Any:
    """``commands`` in the protocol: packed by hiredis directly when every argument is of a
    type it takes (redis-py's own packing of the same bytes costs several times more a call;
    a ``bytearray`` value is handed to hiredis as a memoryview of it); otherwise (a command
    name with a space, an argument of another type) by redis-py."""
    if _pack is not None:
        try:
            if not any(_spaced(c[0]) for c in commands):
                pieces = [_pack_one(c) for c in commands]
                return [b"".join(pieces)] if sum(map(len, pieces)) <= _JOIN else pieces
        except TypeError:
            pass
    return conn.pack_commands(commands)


def _pack_one(command: tuple) -> bytes:
    try:
        return _pack(command)
    except TypeError:  # hiredis takes no bytearray, but a memoryview of one
        return _pack(tuple(memoryview(a) if isinstance(a, bytearray) else a for a in command))


def _spaced(name: Any) -> bool:
    """Whether a command name holds a space (``"CONFIG GET"``): redis-py splits those."""
    return (" " in name) if isinstance(name, str) else isinstance(name, bytes) and b" " in name


def _take(pool: Any) -> Any:
    """A connection of ``pool`` to write on: one kept by :func:`_keep` in this process, else
    one from the pool. A kept one is checked with one ``poll`` (the pool's own check of a
    connection costs several system calls): one the server closed, or with anything to read,
    is connected again when it is written on (as the pool would)."""
    try:
        conn = _kept(pool).pop()
    except IndexError:  # none kept (or taken by another thread meanwhile)
        return connection_of(pool)
    try:
        sock = socket_of(conn)
        if sock is not None and _readable(sock):
            conn.disconnect()  # closed by the server (or anything else on it): a new one
    except BaseException:  # an interrupt: the connection goes back to the pool, closed
        _close(pool, conn)
        raise
    return conn


def _kept(pool: Any) -> list[Any]:
    """This process's list of ``pool``'s kept connections (a forked child has its own)."""
    return _KEPT.setdefault(pool, {}).setdefault(current(), [])


def kept(pool: Any) -> list[Any]:
    """The connections of ``pool`` kept in this process for the next writes (checked out of
    the pool, in step: every reply on them was read)."""
    return list(_kept(pool))


def _readable(sock: Any) -> bool:
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


def _keep(pool: Any, conn: Any) -> None:
    """Keep ``conn``, every reply on which was read, for the next :func:`_take` (at most
    ``_KEEP`` of a pool per process; any more go back to the pool)."""
    kept = _kept(pool)
    if len(kept) < _KEEP:
        kept.append(conn)
    else:
        pool.release(conn)


def _write(sent: Sent, targets: list[tuple[redis.Redis, list[int]]]) -> None:
    for node, where in targets:
        pool = node.connection_pool
        conn = None
        try:
            conn = _take(pool)
            if socket_of(conn) is None:
                conn.connect()
            socket_of(conn).settimeout(sent.deadline)
            conn.send_packed_command(_packed(conn, [sent.commands[k] for k in where]))
            sent.groups.append((pool, conn, where))
        except CACHE_FAILURES as err:
            _fail(sent, pool, conn, where, err)
        except BaseException:  # an interrupt: a connection not in ``sent`` yet is given back
            if conn is not None and all(group[1] is not conn for group in sent.groups):
                _close(pool, conn)
            raise


def _fail(sent: Sent, pool: Any, conn: Any, where: list[int], err: BaseException) -> None:
    if conn is not None:
        _close(pool, conn)
    if not is_cluster(sent.client):
        raise err
    for k in where:
        sent.failed[k] = err


_UNREAD = object()


def _as_redis_error(err: BaseException) -> BaseException:
    if isinstance(err, TimeoutError):  # socket.timeout
        return redis.TimeoutError(f"cache reply timed out: {err}")
    if isinstance(err, OSError):
        return redis.ConnectionError(f"cache connection failed: {err}")
    return err


def _read_group(sent: Sent, groups: list, read: Read, out: list) -> None:
    """Read the replies of the first of ``groups`` into ``out``; its connection is kept or
    given back. The group leaves ``groups`` before its connection does (a statement with no
    call between, where no signal handler runs): an interrupt (Ctrl-C) lands either before,
    and :func:`receive` gives it back, or after, where at worst it is lost; never given back
    twice, which would hand one connection, and its replies, to two callers."""
    pool, conn, where = groups[0]
    try:
        start = time.monotonic()
        for k in where:
            try:
                out[k] = read(conn, k)
            except redis.ResponseError as err:  # read whole: the connection is in step
                # a reply, kept without the frames it was read in: the list holding it is
                # theirs, and the cycle would keep them (and their callers') until collected
                out[k] = err.with_traceback(None)
        measured(sent.kind, time.monotonic() - start)
        socket_of(conn).settimeout(conn.socket_timeout)
    except CACHE_FAILURES as err:
        del groups[0]
        _close(pool, conn)
        _fail(sent, pool, None, [k for k in where if out[k] is _UNREAD], _as_redis_error(err))
        return
    del groups[0]
    _keep(pool, conn)


def _drop(groups: list) -> None:
    """Close the connections of ``groups`` (their replies unread) and give them back."""
    while groups:
        pool, conn, _ = groups.pop()
        _close(pool, conn)


def _close(pool: Any, conn: Any) -> None:
    """Close ``conn`` (what is unread on it goes) and give it back to ``pool``."""
    conn.disconnect()
    pool.release(conn)


def abandon(sent: Sent) -> None:
    """Drop the replies of ``sent`` unread: each connection they would arrive on is closed and
    given back to its pool (a new one is made when it is next used)."""
    groups, sent.groups = sent.groups, []
    _drop(groups)


def _redirect(reply: Any) -> tuple[str, str, int] | None:
    """``(kind, host, port)`` of a MOVED or ASK reply, as redis-py's parser gives it
    (MovedError, AskError: the word stripped) or as our reader does (a ResponseError with it);
    None for any other reply."""
    if isinstance(reply, redis.exceptions.MovedError):  # (a subclass of AskError)
        return "MOVED", reply.host, reply.port
    if isinstance(reply, redis.exceptions.AskError):
        return "ASK", reply.host, reply.port
    if not isinstance(reply, redis.ResponseError):
        return None
    words = str(reply).split(" ")
    if len(words) != 3 or words[0] not in ("MOVED", "ASK"):
        return None
    host, _, port = words[2].rpartition(":")
    return words[0], host, int(port)


def receive(sent: Sent, read: Read | None = None, depth: int = 0) -> list[Any]:
    """The replies of ``sent``, in the order the commands were given (see the module
    docstring); ``read(conn, position)`` reads one (default: redis-py's parser)."""
    read = read or (lambda conn, _k: conn.read_response())
    out: list[Any] = [_UNREAD] * len(sent.commands)
    groups, sent.groups = sent.groups, []  # read once (no call between: no handler runs)
    try:
        while groups:
            _read_group(sent, groups, read, out)
    except BaseException:  # not the connection's failure (handled): an interrupt, or a bug
        _drop(groups)
        raise
    unread = [k for k, reply in enumerate(out) if reply is _UNREAD and k not in sent.failed]
    if unread:  # read before, or their read was interrupted: no reply to give
        gone = redis.ConnectionError("the replies were read already, or their read was cut off")
        _fail(sent, None, None, unread, gone)
    for k, err in sent.failed.items():
        out[k] = err
    redirects = {k: to for k, reply in enumerate(out) if (to := _redirect(reply))}
    if redirects and depth < _REDIRECTS:
        moved = [k for k, to in redirects.items() if to[0] == "MOVED"]
        if moved:
            sent.client.nodes_manager.initialize()  # the slot map changed: read it again
            again = receive(send(sent.client, [sent.commands[k] for k in moved]), None, depth + 1)
            for k, reply in zip(moved, again, strict=True):
                out[k] = reply
        asked = {k: to[1:] for k, to in redirects.items() if to[0] == "ASK"}
        for k, reply in zip(asked, _ask(sent, asked, depth) if asked else [], strict=True):
            out[k] = reply
    return _merge(out, sent.spans)


def _ask(sent: Sent, asked: dict[int, tuple[str, int]], depth: int) -> list[Any]:
    """The replies of commands ``asked`` sent again, each after ``ASKING``, to the node its
    ASK reply named (a slot in migration: the slot map is not changed)."""
    client = sent.client
    flat: list[tuple] = []
    by_node: dict[tuple[str, int], list[int]] = {}
    for k, (host, port) in asked.items():
        by_node.setdefault((host, port), []).extend((len(flat), len(flat) + 1))
        flat += [("ASKING",), sent.commands[k]]
    spans = [("", k, 1) for k in range(len(flat))]
    again = Sent(client, flat, spans, kind=sent.kind, deadline=sent.deadline)
    targets = []
    for (host, port), where in by_node.items():
        node = client.get_node(host=host, port=port)
        if node is None:
            for k in where:
                again.failed[k] = redis.ConnectionError(f"ASK to unknown node {host}:{port}")
            continue
        targets.append((_connection(client, node), where))
    _write(again, targets)
    return receive(again, None, depth + 1)[1::2]


def _merge(flat: list[Any], spans: list[tuple[str, int, int]]) -> list[Any]:
    out = []
    for name, first, count in spans:
        part = flat[first : first + count]
        if not name:
            out.append(part[0])
        elif name == "MGET":
            out.append(part)
        else:
            errors = [r for r in part if isinstance(r, BaseException)]
            out.append(errors[0] if errors else sum(int(r) for r in part))
    return out


def run(client: Any, commands: Sequence[Sequence[Any]]) -> list[Any]:
    """Send ``commands`` and read their replies (errors in place; see the module docstring)."""
    return receive(send(client, commands))
