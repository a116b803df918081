"""Big replies read straight into their own buffers (the cache-hit path's round trip).

redis-py with hiredis copies a big value three times on its way in (socket chunks, the
parser's buffer, the reply object; docs/benchmarks.md, The cache-hit path, has what it costs).
This module sends commands on a connection borrowed from the client's pool, then reads the RESP
replies itself: each bulk string is received with ``recv_into`` into a ``bytearray`` of its exact
size, so the only copy is the kernel's. The values are writable, so ``torch.frombuffer`` views of
them need no read-only caveat.

Errors map to redis-py's: a timeout to ``redis.TimeoutError``, a broken socket to
``redis.ConnectionError`` (the connection is dropped either way), an error reply to
``redis.ResponseError`` after every reply was read (the connection stays in step).
"""

from __future__ import annotations

import socket
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from ods import routing
from ods.redis_internals import socket_of
from seneca.pipeline import codec

__all__ = ["Pending", "Place", "Placed", "execute", "post"]

_CHUNK = 1 << 16

#: Called with a TENSOR value's index in its array reply, its header and its total size:
#: where its payload goes, or None (read it as usual).
Place = Callable[[int, bytes, int], memoryview | None]


@dataclass(frozen=True)
class Placed:
    """Stands in a reply for a value whose payload went where its placer said; ``size`` is the
    value's whole size, header included."""

    size: int


_ZEROS = [memoryview(b"")]

#: each connection's reader, of its current socket (a connection reconnects with a new one)
_READERS: weakref.WeakKeyDictionary[Any, _Reader] = weakref.WeakKeyDictionary()


def _warm(dest: memoryview) -> None:
    """Write zeros over ``dest`` before a unix socket fills it. A placed value's destination
    (a row of a batch tensor) is mostly out of the CPU's caches, and a unix socket's copy into
    such memory was measured slower than zeroing it first and then copying; over TCP it was
    not, so it is not done there (``docs/benchmarks.md``, the hit path's small costs). A value
    read into a new ``bytearray`` needs nothing: it is zeroed when made."""
    zeros = _ZEROS[0]
    if len(zeros) < len(dest):
        zeros = _ZEROS[0] = memoryview(bytes(len(dest)))
    dest[:] = zeros[: len(dest)]


class _Reader:
    """RESP2/RESP3 replies of the kinds our commands get: bulk and simple strings, integers,
    nulls, arrays and errors."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray(2 * _CHUNK)  # bytes [pos, end) are received and not yet read
        self.pos = self.end = 0
        self._last: tuple[bytes, int] | None = None  # the last TENSOR header placed, its size
        self._warm = getattr(sock, "family", None) == socket.AF_UNIX  # see _warm

    def _fill(self) -> None:
        """Receive what the socket has, up to ``_CHUNK`` bytes, after the buffered ones."""
        pos, end = self.pos, self.end
        if pos == end:
            pos = end = 0
        elif len(self.buf) - end < _CHUNK:  # the unread bytes move to the front
            n = end - pos
            if n + _CHUNK > len(self.buf):  # a long line: a bigger buffer
                self.buf = self.buf[pos:end] + bytearray(_CHUNK)
            else:
                self.buf[:n] = self.buf[pos:end]
            pos, end = 0, n
        with memoryview(self.buf) as free:
            got = self.sock.recv_into(free[end : end + _CHUNK])
        if not got:
            raise redis.ConnectionError("the cache closed the connection mid-reply")
        self.pos, self.end = pos, end + got

    def _line(self) -> bytes:
        while True:
            end = self.buf.find(b"\r\n", self.pos, self.end)
            if end >= 0:
                line = bytes(self.buf[self.pos : end])
                self.pos = end + 2
                return line
            self._fill()

    def _into(self, view: memoryview, warm: bool = False) -> None:
        """Fill ``view`` from the buffered bytes, then straight from the socket (``warm``:
        into zeroed memory, see :func:`_warm`)."""
        have = min(len(view), self.end - self.pos)
        with memoryview(self.buf) as buffered:  # released before the buffer is resized
            view[:have] = buffered[self.pos : self.pos + have]
        self.pos += have
        if warm and self._warm and have < len(view):
            _warm(view[have:])
        while have < len(view):
            got = self.sock.recv_into(view[have:])
            if not got:
                raise redis.ConnectionError("the cache closed the connection mid-reply")
            have += got

    def _want(self, n: int) -> None:
        """Have at least ``n`` bytes buffered."""
        while self.end - self.pos < n:
            self._fill()

    def _header(self, size: int) -> bytes | None:
        """The header of the TENSOR value of ``size`` bytes that starts at the read position
        (buffered by then), or None for any other value."""
        last = self._last  # the values of a batch mostly share one header
        if last and last[1] == size and self.buf.startswith(last[0], self.pos, self.end):
            return last[0]
        self._want(codec.FIXED_SIZE)  # the header is looked at where it is buffered
        hsize = codec.tensor_header_size(self.buf, self.pos)
        if hsize is None or hsize > size:
            return None
        self._want(hsize)
        header = bytes(self.buf[self.pos : self.pos + hsize])
        self._last = (header, size)
        return header

    def _bulk(self, size: int, place: Place | None = None, index: int = -1) -> Any:
        if place is not None and size >= codec.FIXED_SIZE:
            header = self._header(size)
            dest = place(index, header, size) if header is not None else None
            if dest is not None:
                self.pos += len(header)
                self._into(dest, warm=True)
                self._line()  # the CRLF after the payload
                return Placed(size)
        out = bytearray(size)
        self._into(memoryview(out))
        self._line()  # the CRLF after the payload
        return out

    def reply(self, place: Place | None = None, index: int = -1) -> Any:
        """One reply; bulk strings go through ``place`` (in an array reply: with their index in
        it; alone: with ``index``)."""
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"$":
            size = int(rest)
            return None if size < 0 else self._bulk(size, place, index)
        if kind in (b"*", b"~", b">"):
            size = int(rest)
            if size < 0:
                return None
            return [self.reply(place, k) for k in range(size)]
        if kind == b":":
            return int(rest)
        if kind == b"+":
            return rest
        if kind == b"_":
            return None
        if kind in (b"-", b"!"):
            text = rest.decode(errors="replace")
            if text.startswith("NOSCRIPT"):
                return redis.exceptions.NoScriptError(text)
            return redis.ResponseError(text)
        raise redis.ConnectionError(f"unexpected reply from the cache: {line[:40]!r}")


def _reader_of(conn: Any) -> _Reader:
    """The reader of ``conn``'s socket, kept while the connection lives: its buffer is made
    once per socket. Every reply a reader receives is read, or the connection is dropped
    (``ods.routing`` disconnects it on any failure mid-reply), so a kept reader has nothing
    left buffered."""
    reader, sock = _READERS.get(conn), socket_of(conn)
    if reader is None or reader.sock is not sock:
        reader = _READERS[conn] = _Reader(sock)
    return reader


class Pending:
    """Commands sent by :func:`post` whose replies are not read yet: the server works on them
    while the caller does something else. Read them once with :meth:`replies`, or
    :meth:`abandon` them (their connections are closed, not read to the end)."""

    def __init__(self, client: Any, commands: Sequence[Sequence[Any]]) -> None:
        self.sent = routing.send(client, commands)
        self.done = False

    def replies(self, raise_on_error: bool = True, place: Place | None = None) -> list[Any]:
        """The replies, as :func:`execute` returns them."""
        if self.done:
            raise RuntimeError("the replies of these commands were read already")
        self.done = True
        sent = self.sent
        name, first, count = sent.spans[0] if sent.spans else ("", 0, 0)

        def read(conn: Any, k: int) -> Any:
            reader = _reader_of(conn)
            if place is None or not first <= k < first + count:
                return reader.reply()
            return reader.reply(place, k - first) if name == "MGET" else reader.reply(place)

        replies = routing.receive(sent, read)
        if raise_on_error:
            for r in replies:
                if isinstance(r, redis.RedisError):
                    raise r
        return replies

    def abandon(self) -> None:
        """Drop the replies unread: the connections they would arrive on are closed."""
        if not self.done:
            self.done = True
            routing.abandon(self.sent)


def post(client: Any, commands: Sequence[Sequence[Any]]) -> Pending:
    """Send ``commands`` as :func:`execute` does, and return without reading the replies."""
    return Pending(client, commands)


def execute(
    client: Any,
    commands: Sequence[Sequence[Any]],
    raise_on_error: bool = True,
    place: Place | None = None,
) -> list[Any]:
    """Send ``commands`` (each ``(name, *args)``) in one round trip (to each node of a cluster:
    ``ods.routing``) and return their replies: bulk strings as ``bytearray``, integers as int,
    nulls as None, arrays as lists. An error reply is raised after every reply was read, or with
    ``raise_on_error=False`` returned in its place as a ``redis.ResponseError``
    (``redis.exceptions.NoScriptError`` for NOSCRIPT); so is a cluster node that cannot be
    reached (a ``redis.ConnectionError``), while one server that cannot be reached raises.

    ``place`` (for the first command's array reply) is called for element k that is a TENSOR
    value with k, its header and its total size; the memoryview it returns gets the payload (a
    :class:`Placed` stands in the reply), None reads the value as usual."""
    return post(client, commands).replies(raise_on_error, place)
