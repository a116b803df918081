"""How the operator tools read plain replies: as text, and the server's clock."""

from __future__ import annotations

from typing import Any

__all__ = ["server_ms", "text_of"]


def text_of(v: Any) -> str:
    """A reply (bytes or str) as text."""
    return v.decode() if isinstance(v, bytes | bytearray) else str(v)


def server_ms(client: Any) -> int:
    """The server's clock in ms (a cluster answers from one of its nodes)."""
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000
