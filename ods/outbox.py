"""Calls whose replies are read later: a job's next ODS decision and its pin releases.

After a fetch has read a batch's values, the loader works on them (misses, collation, the
training step) while the cache server is idle. Calls sent at that moment run on the server
meanwhile. An :class:`Outbox` holds calls until the fetch's :meth:`Outbox.flush`, which sends
them in one write on a connection of their own (checked out of the client's pool) and reads
their replies only when a caller asks for one (or at the next flush), so neither the fetch nor
the sampler waits for the server's work.

A call posted with ``hold=False`` is sent at once. One whose reply is asked for before any flush
is sent then, so a call is never lost for want of a flush; a held call that is cancelled before
it was sent never reaches the server.

A call may instead ride in a round trip its caller sends anyway (a fetch's reads): a
:class:`RoundTrip` takes posts as the outbox does, and the caller sends its commands after
its own and hands it their replies. Either is a :class:`Poster`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import redis

from ods import routing
from seneca_base.process import Made

__all__ = ["Call", "Outbox", "Poster", "RoundTrip"]

#: what runs with a posted command's reply (an error reply as its exception)
OnReply = Callable[[Any], None]


class Poster(Protocol):
    """Where a call whose reply is handled later is posted: an :class:`Outbox` or a
    :class:`RoundTrip`."""

    def post(self, command: tuple, *, on_reply: OnReply | None = None) -> object: ...


class RoundTrip:
    """Calls that ride in a round trip the caller sends: :attr:`commands` sent after the
    caller's own, their replies handed to :meth:`answer`."""

    def __init__(self) -> None:
        self._calls: list[tuple[tuple, OnReply | None]] = []

    def post(self, command: tuple, *, on_reply: OnReply | None = None) -> None:
        self._calls.append((command, on_reply))

    @property
    def commands(self) -> list[tuple]:
        return [command for command, _ in self._calls]

    def answer(self, replies: Sequence[Any]) -> None:
        """Run each call's ``on_reply`` with its reply (``replies``: the calls', in order)."""
        for (_, on_reply), reply in zip(self._calls, replies, strict=True):
            if on_reply is not None:
                on_reply(reply)


class _Sent:
    """Commands written to the nodes that serve them (``ods.routing``); their replies, read
    once on demand."""

    def __init__(self, client: redis.Redis, commands: Sequence[Sequence[Any]]) -> None:
        self._sent: routing.Sent | None = None
        self._replies: list[Any] | None = None
        self._failed: BaseException | None = None
        try:  # a failure is raised where the replies are asked for
            self._sent = routing.send(client, commands)
        except routing.CACHE_FAILURES as err:
            self._failed = err

    def replies(self) -> list[Any]:
        """Every reply, an error reply as its ``redis.ResponseError``; raises the connection's
        error (for every caller) if it broke."""
        if self._failed is not None:
            raise self._failed
        if self._replies is None:
            assert self._sent is not None
            try:
                self._replies = routing.receive(self._sent)
            except Exception as err:  # every caller's (an interrupt is this caller's only:
                self._failed = err  # the next finds the replies gone, a cache failure)
                raise
        return self._replies


class Call:
    """One posted command: queued until a flush, or sent."""

    def __init__(self, outbox: Outbox, command: tuple, on_reply: Callable[[Any], None] | None):
        self.command = command
        self.on_reply = on_reply
        self._outbox = outbox
        self._sent: _Sent | None = None
        self._index = 0

    @property
    def sent(self) -> bool:
        return self._sent is not None

    def sent_in(self, sent: _Sent, index: int) -> None:
        """The call went out in ``sent``, whose reply ``index`` is its own."""
        self._sent, self._index = sent, index

    def reply_in(self, replies: list) -> Any:
        """This call's reply among the replies of the write it went out in."""
        return replies[self._index]

    def result(self) -> Any:
        """The reply (sent now if it is still queued); an error reply is returned as its
        ``redis.ResponseError``, a broken connection raised."""
        if self._sent is None:
            self._outbox.flush()
        assert self._sent is not None
        return self._sent.replies()[self._index]

    def cancel(self) -> bool:
        """Drop the call if it was not sent yet; True when dropped."""
        return self._outbox._cancel(self)


class Outbox:
    """The calls of one process on ``client`` (see the module docstring): a redis-py client, or
    an object whose ``redis`` attribute gives one per process. Several stores may share one
    outbox (a dataset's shards do): their calls go out in one write per flush. Pickled, it
    keeps its client and starts empty; the stores pickled with it still share it."""

    def __init__(self, client: Any) -> None:
        self._source = client
        self._reset()

    def __getstate__(self) -> dict[str, Any]:
        return {"_source": self._source}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._source = state["_source"]
        self._reset()

    def _client(self) -> redis.Redis:
        return routing.client_of(self._source)

    def _reset(self) -> None:
        self._made = Made()
        self._queued: list[Call] = []
        self._unsettled: list[tuple[_Sent, list[Call]]] = []  # sent, replies not yet read
        #: a fetch in this process flushes this outbox (so held calls wait for it)
        self.flushing = False

    @property
    def queued(self) -> tuple[Call, ...]:
        """The calls posted and held for the next flush."""
        return tuple(self._queued)

    @property
    def unsettled(self) -> int:
        """The writes sent whose replies are not read yet (read at the next flush or settle)."""
        return len(self._unsettled)

    def _mine(self) -> None:
        if self._made.inherited:  # a forked child: the parent's calls are not its own
            self._reset()

    def post(self, command: tuple, hold: bool = True, on_reply: OnReply | None = None) -> Call:
        """Queue ``command`` for the next flush (``hold``, when a fetch in this process
        flushes) or send it now; ``on_reply`` runs with its reply once read."""
        self._mine()
        call = Call(self, command, on_reply)
        if hold and self.flushing:
            self._queued.append(call)
        else:
            self._send([call])
        return call

    def send(self, commands: Sequence[tuple]) -> None:
        """Send ``commands`` now, in one write; their replies (errors included) are read and
        dropped at the next flush or settle."""
        self._mine()
        self._send([Call(self, c, None) for c in commands])

    def flush(self) -> None:
        """Read the replies of what was sent before (running their ``on_reply``), then send
        what is queued, in one write."""
        self._mine()
        self.flushing = True
        try:
            self.settle()
        finally:  # what is queued is sent even when a reply read now was an error
            self._send()

    def settle(self) -> None:
        """Read the replies of everything sent (their connections go back to the pool) and
        run the ``on_reply`` of each call; the first error is raised once all were read."""
        self._mine()
        first: BaseException | None = None
        while self._unsettled:
            sent, calls = self._unsettled.pop(0)
            try:
                replies = sent.replies()
                for call in calls:
                    if call.on_reply is not None:
                        call.on_reply(call.reply_in(replies))
            except Exception as err:
                first = first or err
        if first is not None:
            raise first

    def _send(self, calls: list[Call] | None = None) -> None:
        """Send ``calls`` (default: every queued one) in one write."""
        if calls is None:
            calls, self._queued = self._queued, []
        if not calls:
            return
        sent = _Sent(self._client(), [c.command for c in calls])
        for k, c in enumerate(calls):
            c.sent_in(sent, k)
        self._unsettled.append((sent, calls))

    def _cancel(self, call: Call) -> bool:
        if call in self._queued:
            self._queued.remove(call)
            return True
        return False
