"""Late decisions: a batch's samples are decided when a worker starts its part.

DataLoader hands a worker its part of a batch ``prefetch_factor`` x ``num_workers`` batches
before the loop takes the batch. Decided then, the batch's misses could not become hits on the
copies that other jobs make meanwhile: at an epoch's start every job's first batches were all
misses, decoded once per job. So with tickets (``seneca.loader._tickets``) a worker is handed
a *ticket*, a :class:`~seneca.loader._tickets.Tag` with no samples, and when it starts the part
it asks the loader process's :class:`Desk` for them. The desk decides the batch then (ODS: the
epoch's next batch, whichever ticket asks for it), lends
it a batch slot (``seneca.loader._slots``), and answers with the batch's samples and the slot
the worker makes it in.

The wire, on a Unix socket the desk listens on (each worker process connects once): a request
is the ticket's iteration and tag (12 bytes); the answer is a head (a count, the batch slot the
batch is made in or -1, the length of a description of the slots, and the ODS epoch whose
misses the worker may swap late or -1: 20 bytes), the
description when the slot is one of slots this worker has not been handed yet (JSON,
``seneca.loader._slots.SlotLayout``; the slots' memory rides with the answer as a file
descriptor, ``SCM_RIGHTS``), then the count's picks (index, tier code or promised, pin bucket:
17 bytes each). A count of :data:`NO_BATCH` means the ticket has no batch
(the epoch was served before it, or deciding failed: the loop then raises the error). No pickle
crosses.
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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ods.decision import Pick
from seneca.loader._slots import Lent, SlotLayout, SlotMaps
from seneca_base.errors import SenecaError
from seneca_base.process import Made, after_fork
from seneca_base.tiers import TIERS

__all__ = ["NO_BATCH", "Desk", "DeskClient", "Share"]

log = logging.getLogger("seneca")

_REQUEST = struct.Struct("<IQ")  # iteration, tag
#: count, slot (-1: none), length of the slots' description, epoch of late swaps (-1: none)
_HEAD = struct.Struct("<iiIq")
_PICK = struct.Struct("<qbq")  # index, tier code, pin bucket
#: a tier's code on the wire: its position here (None: read from storage); a promised miss's
#: code is :data:`_PROMISED`
_CODES: tuple[str | None, ...] = (None, *TIERS)
_PROMISED = -1
#: the count of an answer for a ticket with no batch
NO_BATCH = -1


@dataclass
class Share:
    """What a worker makes of a ticket: the decided batch's ``picks``, the slot the batch is
    made in (None: none; ``seneca.loader._slots``), and the ODS epoch the batch is of when its
    misses not yet made may be swapped for copies cached meanwhile (None: they may not;
    ``ods.store.OdsStore.swap``)."""

    picks: list[Pick]
    slot: Lent | None = None
    epoch: int | None = None


#: what the desk calls for a ticket: (iteration, tag) -> the worker's share (None: no batch)
Decide = Callable[[int, int], Share | None]

_DESKS: weakref.WeakSet[Desk] = weakref.WeakSet()


class Desk:
    """Answers the workers' tickets with ``decide``, from a daemon
    thread of this process."""

    def __init__(self, decide: Decide) -> None:
        # weakly: the thread keeps this desk, which must not keep a gone loader's ticket sampler
        self._decide = _weakly(decide)
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
        #: the slots each connection's worker was handed last
        self._named: dict[socket.socket, SlotLayout] = {}
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
            self._named.pop(conn, None)
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
            share = None if decide is None else decide(iteration, tag)
            reply, fd = _encoded(share, self._named.get(conn))
        except Exception:  # a worker must not wait forever: it gets no batch, the loop raises
            log.exception("deciding ticket %d failed", tag)
            share, reply, fd = None, _HEAD.pack(NO_BATCH, -1, 0, -1), None
        if share is not None and share.slot is not None:
            self._named[conn] = share.slot.layout
        self.answered += 1
        try:
            _send(conn, reply, fd)
        except OSError as err:  # the worker went; its part is not coming
            log.debug("a worker went before its ticket %d was answered: %s", tag, err)


class DeskClient:
    """A worker's line to the loader process's :class:`Desk` (connected once per process;
    pickled, only the address crosses)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._sock: socket.socket | None = None
        self._made = Made()  # the process whose connection _sock is
        self._maps = SlotMaps()

    def __getstate__(self) -> dict[str, Any]:
        return {"address": self.address}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["address"])  # type: ignore[misc]

    def ask(self, iteration: int, tag: int) -> Share | None:
        """This worker's share of ticket ``tag`` of ``iteration`` (None: no batch), its slot
        mapped here."""
        sock = self._connected()
        fds: list[int] = []
        try:
            sock.sendall(_REQUEST.pack(iteration, tag))
            head, fds, _, _ = socket.recv_fds(sock, _HEAD.size, 1)
            if not head:
                raise ConnectionError("the desk closed the connection")
            head += _received(sock, _HEAD.size - len(head))
            count, slot, named, epoch = _HEAD.unpack(head)
            if count == NO_BATCH:
                return None
            if named:
                described = SlotLayout.decode(_received(sock, named))
                if not fds:
                    raise ConnectionError("the desk named slots without handing them over")
                self._maps.take(described, fds.pop())
            data = _received(sock, count * _PICK.size)
        except OSError as err:
            self._sock = None
            raise SenecaError(f"the loader process stopped answering its workers: {err}") from err
        finally:
            for fd in fds:
                os.close(fd)  # a descriptor handed over and not taken
        picks = [
            Pick(i, None, bucket, True) if code == _PROMISED else Pick(i, _CODES[code], bucket)
            for i, code, bucket in _PICK.iter_unpack(data)
        ]
        lent, described = None, self._maps.described
        if slot >= 0 and described is not None:
            lent = Lent(described, slot, self._maps.tensor(slot))
        return Share(picks, lent, None if epoch < 0 else epoch)

    def _connected(self) -> socket.socket:
        if self._sock is None or self._made.inherited:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(self.address)
            self._sock = sock
            self._made.take()
            self._maps = SlotMaps()  # a new connection is handed its slots again
        return self._sock


def _encoded(share: Share | None, named: SlotLayout | None) -> tuple[bytes, int | None]:
    """The answer for a ticket with ``share`` (None: no batch) to a worker handed the slots
    ``named`` last, and the descriptor to hand it with the answer (None: none)."""
    if share is None:
        return _HEAD.pack(NO_BATCH, -1, 0, -1), None
    lent, slot, described, fd = share.slot, -1, b"", None
    if lent is not None:
        slot = lent.index
        if lent.layout != named:
            described, fd = lent.layout.encode(), lent.fd
    epoch = -1 if share.epoch is None else share.epoch
    head = _HEAD.pack(len(share.picks), slot, len(described), epoch)
    picks = b"".join(
        _PICK.pack(p.index, _PROMISED if p.promised else _CODES.index(p.tier), p.bucket)
        for p in share.picks
    )
    return head + described + picks, fd


def _send(conn: socket.socket, reply: bytes, fd: int | None) -> None:
    """``reply`` on ``conn``, ``fd`` handed over with its first bytes."""
    sent = 0 if fd is None else socket.send_fds(conn, [reply], [fd])
    conn.sendall(reply[sent:])


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


after_fork(_forked)
