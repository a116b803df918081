"""Deadlines of cache calls, from the waits measured for each kind of call in this process.

``ods.routing`` gives each call it sends a deadline: the socket of every connection the call
uses may wait at most that long for the server to take a write or send a byte of a reply, or
the call fails with ``redis.TimeoutError`` and its connection is closed (its replies are
never read). A frozen or partitioned server then costs one deadline, not a socket timeout of
seconds. A call's kind is its first command's name (a function call's: the function's), so a
batch of value reads and a decision each have their own, measured while the cache is healthy:
see ``ods.defaults.DEADLINE_*``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ods import defaults

__all__ = ["deadline", "kind", "measured"]

_SLOW: dict[str, float] = {}  # kind -> the slowest recent wait (s), older ones decayed


def kind(commands: Sequence[Sequence[Any]]) -> str:
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
