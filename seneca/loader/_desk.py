"""Late decisions: a batch's samples are decided when a worker starts its part.

DataLoader hands a worker its part of a batch ``prefetch_factor`` x ``num_workers`` batches
before the loop takes the batch. Decided then, the batch's misses could not become hits on the
copies that other jobs make meanwhile: at an epoch's start every job's first batches were all
misses, decoded once per job. So with the bypass (``seneca.loader._bypass``) a worker is handed
a *ticket*, a :class:`~seneca.loader._bypass.Tag` with no samples, and when it starts the part
it asks the loader process's :class:`Desk` for them. The desk decides the batch then (ODS, in
ticket order: a ticket asked for before an earlier one decides the earlier one first), reads
its augmented hits in the loader process, and answers with the samples the worker makes.

The wire, on a Unix socket the desk listens on (each worker process connects once): a request
is the ticket's iteration and tag (12 bytes); the answer is a count, then that many picks
(index, tier code, pin bucket: 17 bytes each). A count of :data:`NO_BATCH` means the ticket has
no batch (the epoch was served before it, or deciding failed: the loop then raises the error).
No pickle crosses.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import shutil
import socket
import struct
import tempfile
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from ods.decision import Pick
from seneca_base.errors import SenecaError
from seneca_base.tiers import TIERS

__all__ = ["NO_BATCH", "Desk", "DeskClient"]

log = logging.getLogger("seneca")

_REQUEST = struct.Struct("<IQ")  # iteration, tag
_COUNT = struct.Struct("<i")
_PICK = struct.Struct("<qbq")  # index, tier code, pin bucket
#: a tier's code on the wire: its position here (None: read from storage)
_CODES: tuple[str | None, ...] = (None, *TIERS)
#: the count of an answer for a ticket with no batch
NO_BATCH = -1

#: what the desk calls for a ticket: (iteration, tag) -> the worker's picks (None: no batch)
Decide = Callable[[int, int], Sequence[Pick] | None]

_DESKS: weakref.WeakSet[Desk] = weakref.WeakSet()


class Desk:
    """Answers the workers' tickets with ``decide``, then calls ``answered``, from a daemon
    thread of this process."""

    def __init__(self, decide: Decide, answered: Callable[[], None]) -> None:
        # weakly: the thread keeps this desk, which must not keep the splitter of a loader gone
        self._decide = _weakly(decide)
        #: called once a worker has its answer: the work that need not hold it up
        self._answered = _weakly(answered)
        self._dir = tempfile.mkdtemp(prefix="seneca-desk-")
        #: the socket's path, which a :class:`DeskClient` connects to
        self.address = os.path.join(self._dir, "desk")
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.address)
        self._listener.listen(64)
        self._listener.setblocking(False)
        self._wake, self._woken = socket.socketpair()  # a write ends the thread
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._selector.register(self._woken, selectors.EVENT_READ)
        self._conns: dict[socket.socket, bytearray] = {}
        self._closed = False
        #: tickets answered
        self.answered = 0
        self._thread = threading.Thread(target=self._serve, name="seneca-desk", daemon=True)
        self._thread.start()
        _DESKS.add(self)

    def client(self) -> DeskClient:
        """What a worker asks this desk through."""
        return DeskClient(self.address)

    def close(self) -> None:
        """Stop answering; the workers' connections close. Safe in a finalizer."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError):
            self._wake.send(b"x")
        shutil.rmtree(self._dir, ignore_errors=True)

    def forked(self) -> None:
        """In a forked child: the parent's sockets are not the child's to serve or hold."""
        self._closed = True
        for sock in [self._listener, self._wake, self._woken, *self._conns]:
            sock.close()
        self._conns = {}

    def _serve(self) -> None:
        try:
            while not self._closed:
                for key, _ in self._selector.select():
                    sock = key.fileobj
                    if sock is self._listener:
                        self._accept()
                    elif sock is not self._woken:
                        self._read(sock)  # type: ignore[arg-type]
        finally:
            for sock in [self._listener, self._wake, self._woken, *self._conns]:
                sock.close()
            self._selector.close()

    def _accept(self) -> None:
        with contextlib.suppress(BlockingIOError):
            conn, _ = self._listener.accept()
            conn.setblocking(True)
            self._conns[conn] = bytearray()
            self._selector.register(conn, selectors.EVENT_READ)

    def _read(self, conn: socket.socket) -> None:
        buffer = self._conns[conn]
        try:
            data = conn.recv(4096)
        except OSError:
            data = b""
        if not data:  # the worker went
            self._selector.unregister(conn)
            del self._conns[conn]
            conn.close()
            return
        buffer += data
        while len(buffer) >= _REQUEST.size:
            iteration, tag = _REQUEST.unpack_from(buffer)
            del buffer[: _REQUEST.size]
            self._answer(conn, iteration, tag)

    def _answer(self, conn: socket.socket, iteration: int, tag: int) -> None:
        decide = self._decide()
        try:
            picks = None if decide is None else decide(iteration, tag)
            reply = _encoded(picks)
        except Exception:  # a worker must not wait forever: it gets no batch, the loop raises
            log.exception("deciding ticket %d failed", tag)
            reply = _COUNT.pack(NO_BATCH)
        self.answered += 1
        try:
            conn.sendall(reply)
        except OSError as err:  # the worker went; its part is not coming
            log.debug("a worker went before its ticket %d was answered: %s", tag, err)
        answered = self._answered()
        if answered is not None:
            answered()


class DeskClient:
    """A worker's line to the loader process's :class:`Desk` (connected once per process;
    pickled, only the address crosses)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._sock: socket.socket | None = None
        self._pid = 0

    def __getstate__(self) -> dict[str, Any]:
        return {"address": self.address}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["address"])  # type: ignore[misc]

    def ask(self, iteration: int, tag: int) -> list[Pick] | None:
        """The picks of ticket ``tag`` of ``iteration`` for this worker (None: no batch)."""
        sock = self._connected()
        try:
            sock.sendall(_REQUEST.pack(iteration, tag))
            (count,) = _COUNT.unpack(_received(sock, _COUNT.size))
            if count == NO_BATCH:
                return None
            data = _received(sock, count * _PICK.size)
        except OSError as err:
            self._sock = None
            raise SenecaError(f"the loader process stopped answering its workers: {err}") from err
        return [Pick(i, _CODES[code], bucket) for i, code, bucket in _PICK.iter_unpack(data)]

    def _connected(self) -> socket.socket:
        if self._sock is None or self._pid != os.getpid():
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(self.address)
            self._sock, self._pid = sock, os.getpid()
        return self._sock


def _encoded(picks: Sequence[Pick] | None) -> bytes:
    """The answer for a ticket with ``picks`` (None: no batch)."""
    if picks is None:
        return _COUNT.pack(NO_BATCH)
    head = _COUNT.pack(len(picks))
    return head + b"".join(_PICK.pack(p.index, _CODES.index(p.tier), p.bucket) for p in picks)


def _weakly(fn: Callable[..., Any]) -> Callable[[], Callable[..., Any] | None]:
    """A weak reference to a bound method (its object may go); other callables, held."""
    if hasattr(fn, "__self__") and hasattr(fn, "__func__"):
        return weakref.WeakMethod(fn)  # type: ignore[arg-type]
    return lambda: fn


def _received(sock: socket.socket, size: int) -> bytes:
    """Exactly ``size`` bytes from ``sock``."""
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the desk closed the connection")
        data += chunk
    return bytes(data)


def _forked() -> None:
    for desk in list(_DESKS):
        desk.forked()


os.register_at_fork(after_in_child=_forked)
