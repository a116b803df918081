"""Batch slots: the memory a batch is made in, shared by the training process and its workers.

With workers and tickets (``seneca.loader._tickets``) a worker makes each batch in a *slot*:
the rows of one batch in memory that the job's processes map (a
:class:`~seneca_base.shared.HandedMemory`: a file with no name, so a killed job leaves nothing
under ``/dev/shm``; owned by the training process's :class:`BatchSlots`). The training process
lends a slot when it decides a batch; the desk's answer names it to the worker and hands the
worker the memory the first time (``seneca.loader._desk``); the worker reads the batch's
augmented hits from the cache straight into their rows and makes the other samples in theirs,
so the batch the training process gets *is* the slot: nothing is copied out of the worker, and
with ``device=`` the copy to the device reads straight from the slot, the slots having been
pinned once (``cudaHostRegister``). A slot is free again once the batch tail has made a new
tensor of it, or once its copy to the device has completed (the copy's event): the reused,
pinned output slots of FFCV and DALI.

The slots are made when the first batch's layout (dtype, a row's shape) is known. When every
slot is lent, a batch is made without one: its rows cross in shared memory of their own, as
DataLoader's workers send a batch. A new iteration keeps the
slots unless one is still lent to a batch of the iteration before (a loop cut short: a worker
may still be writing into it): the slots then go with their memory (the processes that map it
keep their mapping) and new ones are made.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from seneca.loader._device import Staged
from seneca_base.shared import HandedMemory

__all__ = ["BatchSlots", "Lent", "SlotLayout", "SlotMaps", "released", "slot_count"]

log = logging.getLogger("seneca")

_FREE = None  # a slot's state: free, lent (_LENT) or the event its copy completes


def slot_count(workers: int, prefetch_factor: int | None) -> int:
    """Slots for a loader with ``workers`` and ``prefetch_factor`` (None: DataLoader's default
    with workers, 2): a batch for each ticket the workers hold (each may be decided before the
    loop takes the batch before it), one being merged and made ahead, one made and waiting, and
    the one the loop has or whose copy to the device is under way."""
    return workers * (2 if prefetch_factor is None else prefetch_factor) + 3


class _Lent:
    pass


_LENT = _Lent()


@dataclass(frozen=True)
class SlotLayout:
    """What a worker needs to map the slots, beside the memory's descriptor (JSON on the desk's
    wire): which memory (a name of this set of slots), its slots' count, rows per slot, and a
    row's dtype and shape."""

    name: str
    count: int
    rows: int
    dtype: str
    shape: tuple[int, ...]

    @property
    def row_bytes(self) -> int:
        return int(torch.Size(self.shape).numel()) * _dtype(self.dtype).itemsize

    @property
    def size(self) -> int:
        return self.count * self.rows * self.row_bytes

    def encode(self) -> bytes:
        return json.dumps({**dataclasses.asdict(self), "shape": list(self.shape)}).encode()

    @classmethod
    def decode(cls, data: bytes) -> SlotLayout:
        d = json.loads(data)
        return cls(**{**d, "shape": tuple(d["shape"])})


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"not a torch dtype: {name!r}")
    return dtype


def _tensors(memory: Any, described: SlotLayout) -> list[torch.Tensor]:
    """The slots in mapped ``memory``: one ``(rows, *shape)`` tensor each."""
    whole = torch.frombuffer(memory, dtype=torch.uint8, count=described.size)
    typed = whole.view(_dtype(described.dtype))
    return list(typed.view(described.count, described.rows, *described.shape).unbind(0))


@dataclass(frozen=True, eq=False)
class Lent:
    """Slot :attr:`index` of the slots :attr:`layout`, lent to a batch: its rows are
    :attr:`tensor`; :attr:`fd`: the slots' memory, in the process that lends them."""

    layout: SlotLayout
    index: int
    tensor: torch.Tensor
    fd: int | None = None


class BatchSlots:
    """The training process's slots (see the module docstring): ``count`` of them, each
    ``rows`` rows (the batch size); ``pin``: called once with each new set of slots' whole tensor,
    pins it for copies to a device and returns what unpins it (None: not pinned)."""

    def __init__(
        self,
        count: int,
        rows: int,
        pin: Callable[[torch.Tensor], Callable[[], Any]] | None = None,
    ) -> None:
        self.count = count
        self.rows = rows
        self.pin = pin
        self._lock = threading.Lock()
        self._row: tuple[torch.dtype, tuple[int, ...]] | None = None
        self._file: HandedMemory | None = None
        self._described: SlotLayout | None = None
        self._tensors: list[torch.Tensor] = []
        self._state: list[Any] = []
        self._unpin: Callable[[], Any] | None = None
        self._failed = False
        self._files = self._missed = 0  # for stats()

    def fit(self, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
        """A batch's rows are ``dtype`` in ``shape`` each: the slots' layout, if none yet."""
        with self._lock:
            if self._row is None:
                self._row = (dtype, tuple(shape))

    def take(self) -> Lent | None:
        """A free slot, now lent (None: no layout yet, or every slot is lent)."""
        with self._lock:
            if self._file is None and not self._make():
                return None
            for k, state in enumerate(self._state):
                if state is _FREE or (state is not _LENT and state.query()):
                    self._state[k] = _LENT
                    assert self._described is not None and self._file is not None
                    return Lent(self._described, k, self._tensors[k], self._file.fd)
            self._missed += 1
            return None

    def stats(self) -> dict[str, int]:
        """``without_slot``: batches decided while every slot was lent (made in memory of their
        own, as DataLoader's batches are); ``memory``: the sets of slots made (one at first,
        another after a loop cut short with slots lent)."""
        with self._lock:
            return {"without_slot": self._missed, "memory": self._files}

    def reset_stats(self) -> None:
        with self._lock:
            self._files = self._missed = 0

    def release(self, lent: Lent, done: Any = None) -> None:
        """``lent``'s slot is free once ``done`` (an event; None: now) has completed."""
        with self._lock:
            if self._described is lent.layout:  # else its memory went with an iteration before
                self._state[lent.index] = done

    def renew(self) -> None:
        """A new iteration: slots still lent go with their memory (new ones are made)."""
        with self._lock:
            if any(state is _LENT for state in self._state):
                self._drop()

    def close(self) -> None:
        """Drop the slots (their memory goes when no process maps it any more)."""
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        for state in self._state:
            if state is not _FREE and state is not _LENT:
                state.synchronize()  # a copy out of the slot is not cut short
        if self._unpin is not None:
            self._unpin()
        self._file, self._described, self._tensors, self._state = None, None, [], []
        self._unpin = None

    def _make(self) -> bool:
        if self._row is None or self._failed:
            return False
        dtype, shape = self._row
        name = f"{os.getpid()}-{os.urandom(6).hex()}"
        dtype_name = str(dtype).removeprefix("torch.")
        described = SlotLayout(name, self.count, self.rows, dtype_name, shape)
        try:
            shared = HandedMemory("slots", described.size, reserve=True)
        except OSError as err:  # no room under /dev/shm: batches are made as without slots
            self._failed = True
            log.warning(
                "no shared memory for %d batch slots of %.0f MB (%s): batches are copied "
                "together instead",
                self.count,
                described.size / self.count / 1e6,
                err,
            )
            return False
        whole = torch.frombuffer(shared.memory, dtype=torch.uint8, count=described.size)
        if self.pin is not None:
            self._unpin = self.pin(whole)
        self._file, self._described = shared, described
        self._tensors = _tensors(shared.memory, described)
        self._state = [_FREE] * self.count
        self._files += 1
        return True


class SlotMaps:
    """A worker's side: the slots the desk has handed it, mapped (the latest only: new ones
    replace those before)."""

    def __init__(self) -> None:
        self.described: SlotLayout | None = None
        self._file: HandedMemory | None = None
        self._tensors: list[torch.Tensor] = []

    def take(self, described: SlotLayout, fd: int) -> None:
        """The slots ``described``, whose memory is ``fd`` (handed over; closed here)."""
        self._file = HandedMemory.from_fd(fd, described.size)
        self._tensors = _tensors(self._file.memory, described)
        self.described = described

    def tensor(self, index: int) -> torch.Tensor:
        """Slot ``index`` of the slots taken last."""
        return self._tensors[index]


def released(it: Iterator[Any], slots: BatchSlots) -> Iterator[Any]:
    """The batches of ``it`` (after the batch tail or the copy to the device), each one's slot
    released: once its copy has completed for a batch staged for a device, else at once (its
    images copied out first if the tail left them in the slot)."""
    for item in it:
        staged = item if isinstance(item, Staged) else None
        batch = item if staged is None else staged.batch
        lent = getattr(batch, "slot", None)
        if lent is None:
            yield item
            continue
        done = None if staged is None else staged.done
        if done is None:
            images = batch[0]
            if isinstance(images, torch.Tensor) and _in(images, lent):
                batch[0] = images.clone()  # the loop may keep it; the slot is reused
        slots.release(lent, done)
        yield item


def _in(t: torch.Tensor, lent: Lent) -> bool:
    """Whether ``t`` is memory of ``lent``'s slots."""
    if t.device.type != "cpu":
        return False
    return t.untyped_storage().data_ptr() == lent.tensor.untyped_storage().data_ptr()
