"""The resumable-state protocol: an object that can say where it is and be put back there.

The same small protocol as torchdata's ``Stateful`` (and DataLoader-like objects with
``state_dict``): each holder of state saves and restores its own, and an object made of
several composes theirs. State is plain data (ints, bytes, dicts of them): a checkpoint
saves it with ``torch.save`` or JSON, never by pickling live objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = ["Stateful"]


@runtime_checkable
class Stateful(Protocol):
    """An object whose position can be saved (:meth:`state_dict`) and restored
    (:meth:`load_state_dict`), in this process or a new one."""

    def state_dict(self) -> dict[str, Any]:
        """Where the object is now, as plain data."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Go back to ``state`` (what :meth:`state_dict` returned, perhaps in another
        process)."""
        ...
