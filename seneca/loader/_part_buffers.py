"""Shared-memory buffers a DataLoader worker reuses for its parts of batches (the bypass).

A tensor a worker returns normally crosses to the loader process in a shared-memory segment
of its own: the worker creates, sizes, maps and touches it, hands its file descriptor over on
a connection of its own, and the loader maps and touches it again and unmaps it when it is
freed. That and the copies in and out cost several times what they cost with a buffer already
mapped (``docs/benchmarks.md``, the hit path's small costs).

A worker's :class:`PartBuffers` keeps a few buffers mapped in both processes instead. A part's
rows are made in a free buffer (``seneca.loader._rows.BatchRows``); what crosses is a
:class:`PartRef` naming the buffer, which carries the buffer itself the first time in an
iteration. The loader process (:class:`PartReader`) copies the rows into its batch and hands
the buffer back by clearing its busy byte, the buffer's last byte. A worker keeps at most one
buffer more than its ``prefetch_factor`` (its parts in flight, and the one it makes before the
loader process has copied the last); when every buffer is busy, or a part does not fit, rows
are made as before.

A new iteration frees every buffer: DataLoader has then drained or dropped the parts of the
one before (persistent workers are reset first), so none is still being read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from seneca._torch_internals import shared_empty

__all__ = ["PartBuffers", "PartReader", "PartRef", "part_buffers"]


@dataclass(frozen=True, eq=False)
class PartRef:
    """Rows of a worker's part, in buffer :attr:`slot` of the worker :attr:`owner`: the first
    ``nbytes`` of the buffer, read as ``dtype`` in ``shape``. :attr:`buffer` is the buffer
    (a shared uint8 tensor) when the loader process has not been sent it in this iteration.
    A plain object (not a tuple): DataLoader's pin-memory thread leaves it as it is."""

    owner: str
    slot: int
    dtype: torch.dtype
    shape: tuple[int, ...]
    buffer: torch.Tensor | None = None

    @property
    def nbytes(self) -> int:
        return int(torch.Size(self.shape).numel()) * self.dtype.itemsize


class PartBuffers:
    """A worker process's buffers (:func:`part_buffers`)."""

    def __init__(self, cap: int) -> None:
        self.owner = f"{os.getpid()}-{os.urandom(6).hex()}"
        self.cap = cap
        self._buffers: list[torch.Tensor] = []
        self._busy: list[memoryview] = []  # each buffer's bytes, its busy byte the last
        self._sent: set[int] = set()
        self._iteration: Any = None

    def begin(self, iteration: Any) -> None:
        """A part of ``iteration`` is being made: on a new iteration every buffer is free and
        sent again with its first part."""
        if iteration != self._iteration:
            self._iteration = iteration
            self._sent.clear()
            for busy in self._busy:
                busy[-1] = 0

    def take(self, nbytes: int, capacity: int) -> tuple[int, torch.Tensor] | None:
        """A free buffer of at least ``nbytes`` (new ones hold ``capacity`` bytes), marked
        busy: (slot, the buffer); None when every buffer is busy or too small."""
        for slot, busy in enumerate(self._busy):
            if busy[-1] == 0 and len(busy) > nbytes:
                busy[-1] = 1
                return slot, self._buffers[slot]
        if len(self._buffers) >= self.cap:
            return None
        buffer = shared_empty((max(nbytes, capacity) + 1,), torch.uint8)
        busy = memoryview(buffer.numpy())
        busy[-1] = 1
        self._buffers.append(buffer)
        self._busy.append(busy)
        return len(self._buffers) - 1, buffer

    def free(self, slot: int) -> None:
        """Give buffer ``slot`` back unsent (its rows were not what the part sends)."""
        self._busy[slot][-1] = 0

    def ref(self, slot: int, rows: torch.Tensor) -> PartRef:
        """What crosses to the loader process for ``rows`` (made in buffer ``slot``)."""
        buffer = None
        if slot not in self._sent:
            self._sent.add(slot)
            buffer = self._buffers[slot]
        return PartRef(self.owner, slot, rows.dtype, tuple(rows.shape), buffer)


_buffers: PartBuffers | None = None


def part_buffers(cap: int) -> PartBuffers:
    """This worker process's buffers, at most ``cap`` (made at the first call)."""
    global _buffers
    if _buffers is None or not _buffers.owner.startswith(f"{os.getpid()}-"):
        _buffers = PartBuffers(cap)  # a process forked from one that had buffers makes its own
    return _buffers


class PartReader:
    """The loader process's side: the workers' buffers sent in this iteration."""

    def __init__(self) -> None:
        self._buffers: dict[tuple[str, int], torch.Tensor] = {}

    def clear(self) -> None:
        """A new iteration: workers send their buffers again."""
        self._buffers.clear()

    def rows(self, ref: PartRef) -> torch.Tensor:
        """The rows ``ref`` names (a view of the worker's buffer: copy them, then
        :meth:`release`)."""
        key = (ref.owner, ref.slot)
        if ref.buffer is not None:
            self._buffers[key] = ref.buffer
        buffer = self._buffers[key]
        return buffer[: ref.nbytes].view(ref.dtype).view(ref.shape)

    def release(self, ref: PartRef) -> None:
        """Hand the buffer of ``ref`` back to its worker (its rows were copied)."""
        self._buffers[(ref.owner, ref.slot)][-1] = 0
