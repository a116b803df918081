"""Batches collated where they are read: cached tensors land in the rows of one batch tensor.

A fetch that reads a batch's cached augmented tensors (``seneca.loader._read``) gives each value's
payload a row of one ``(batch, *shape)`` tensor (:class:`BatchRows`, the placer of
``seneca._cache.resp.execute``), and copies the samples it made itself (misses, other forms) into
their rows. :func:`collate_rows` then returns that tensor as the batch's images instead of
stacking copies: what ``default_collate`` would return, without the copy. A fetch that read
every value of its batch into its row returns the samples as a :class:`RowBatch`, whose rows
are taken without looking at each sample. Anything else (a sample of another shape, a custom
structure) is collated by ``default_collate``.

With tickets (``seneca.loader._tickets``), a worker's part of a batch is a :class:`Tagged`
list: its samples, the batch's tag, and the slot whose rows its images were made in.
:func:`collate_part`, the DataLoader's ``collate_fn`` then, makes what crosses to the loader
process: the tag, the slot's number (:class:`InSlot`) instead of the images where every image
is its row of the slot, the targets and the late swaps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import default_collate

from seneca._torch_internals import shared_empty, view_base

if TYPE_CHECKING:
    from seneca.loader._slots import Lent

__all__ = ["BatchRows", "InSlot", "RowBatch", "Tagged", "collate_part", "collate_rows"]

_MARK = "_seneca_rows"


class BatchRows:
    """Rows for ``n`` samples, made at the first tensor placed (its dtype and shape), in shared
    memory when ``shared`` (a worker's, sent to the training process); or rows that exist
    already (:meth:`over`)."""

    def __init__(self, n: int, shared: bool = False) -> None:
        self.n = n
        self.shared = shared
        self.rows: torch.Tensor | None = None
        self._bytes: memoryview | None = None
        self._layout: tuple[torch.dtype, tuple[int, ...]] | None = None
        self._row_bytes = 0

    def _make(self, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
        if self.shared:  # shared memory, as default_collate does in workers
            rows = shared_empty((self.n, *shape), dtype)
        else:
            rows = torch.empty((self.n, *shape), dtype=dtype)
        setattr(rows, _MARK, True)
        self._use(rows)

    @classmethod
    def over(cls, rows: torch.Tensor) -> BatchRows:
        """Rows that are ``rows`` (a batch slot's, ``seneca.loader._slots``): what does not
        fit their dtype and shape is not placed."""
        out = cls(rows.shape[0])
        out._use(rows)
        return out

    def _use(self, rows: torch.Tensor) -> None:
        self.rows = rows
        self._bytes = memoryview(rows.view(-1).view(torch.uint8).numpy())
        self._layout = (rows.dtype, tuple(rows.shape[1:]))
        self._row_bytes = int(torch.Size(rows.shape[1:]).numel()) * rows.dtype.itemsize

    def place(self, row: int, dtype: torch.dtype, shape: tuple[int, ...]) -> memoryview | None:
        """The bytes of ``row`` for a tensor of ``dtype`` and ``shape`` (None: it does not fit)."""
        if self._layout is None:
            self._make(dtype, shape)
        if self._layout != (dtype, shape) or self._bytes is None:
            return None
        size = self._row_bytes
        return self._bytes[row * size : (row + 1) * size]

    def holds(self, k: int, image: Any) -> bool:
        """Whether ``image`` is row ``k`` of the rows."""
        rows = self.rows
        return (
            rows is not None
            and isinstance(image, torch.Tensor)
            and image.dtype == rows.dtype
            and image.shape == rows.shape[1:]
            and image.data_ptr() == rows.data_ptr() + k * self._row_bytes
        )

    def settle(self, k: int, sample: Any) -> Any:
        """``sample`` (an ``(image, target)`` pair) with its image moved into row ``k`` when it
        fits; otherwise as it is."""
        if not isinstance(sample, tuple) or len(sample) != 2:
            return sample
        image = sample[0]
        if not isinstance(image, torch.Tensor):
            return sample
        rows = self.rows
        if rows is None or self.holds(k, image):
            return sample
        if image.dtype != rows.dtype or image.shape != rows.shape[1:]:
            return sample
        rows[k].copy_(image)
        return (rows[k], sample[1])


class RowBatch(list):
    """Samples ``(image, target)`` whose images are, in order, the rows of :attr:`rows` (every
    value of the batch read into its row): :func:`collate_rows` takes the rows as they are,
    without looking at each sample."""

    def __init__(self, rows: torch.Tensor, samples: Any) -> None:
        super().__init__(samples)
        self.rows = rows


def _rows_of(images: Sequence[Any]) -> torch.Tensor | None:
    """The :class:`BatchRows` tensor whose rows, in order, ``images`` are; else None."""
    first = images[0]
    if not isinstance(first, torch.Tensor):
        return None
    base = view_base(first)
    if base is None or not getattr(base, _MARK, False) or base.shape[0] != len(images):
        return None
    step = base.stride(0)
    for k, image in enumerate(images):
        if (
            not isinstance(image, torch.Tensor)
            or view_base(image) is not base
            or image.storage_offset() != k * step
            or image.shape != base.shape[1:]
        ):
            return None
    return base


def collate_rows(batch: Sequence[Any]) -> Any:
    """``default_collate``, except that ``(image, target)`` samples whose images are the rows of
    one :class:`BatchRows` tensor, in order, get that tensor as their images (no copy)."""
    if type(batch) is RowBatch:
        return [batch.rows, default_collate([s[1] for s in batch])]
    if batch and all(isinstance(s, tuple) and len(s) == 2 for s in batch):
        rows = _rows_of([s[0] for s in batch])
        if rows is not None:
            return [rows, default_collate([s[1] for s in batch])]
    return default_collate(batch)


class Tagged(list):
    """A worker's samples of batch :attr:`tag` (what ``CachedDataset.__getitems__`` returns for
    a ticket), and the rows their images were made in: the rows of the batch's slot
    :attr:`slot` (None: no slot)."""

    tag: int = -1
    rows: BatchRows | None = None
    slot: Lent | None = None
    #: the misses swapped late for copies cached after the batch was decided: (position,
    #: index served instead) each (``ods.store.OdsStore.swap``)
    swaps: list[tuple[int, int]] | None = None


@dataclass(frozen=True, eq=False)
class InSlot:
    """What crosses for a worker's part whose images were made in its batch's slot: nothing but
    the slot's number (a plain object: DataLoader's pin-memory thread leaves it as it is)."""

    index: int


def collate_part(data: Any) -> Any:
    """The DataLoader's ``collate_fn`` with tickets: a ticket's batch becomes ``(tag, images,
    targets, swaps)`` (images: :class:`InSlot` when made in the batch's slot; ``None, None,
    None`` for a ticket with no batch; swaps: :attr:`Tagged.swaps`); anything else as
    ``collate_rows``.
    Targets that are plain numbers stay a list, collated in the loader process
    (``TicketSampler.merged``): a tensor would cross to it in shared memory, and each shared
    tensor costs a file descriptor handed over on a connection of its own, far more than
    making the tensor there (measured: ``docs/benchmarks.md``, the hit path's small costs)."""
    if isinstance(data, Tagged):
        if not data:
            return (data.tag, None, None, None)
        numbers = all(
            isinstance(s, tuple) and len(s) == 2 and type(s[1]) in (int, float) for s in data
        )
        rows = data.rows
        if data.slot is not None and rows is not None and _all_in(rows, data):
            targets = [s[1] for s in data] if numbers else default_collate([s[1] for s in data])
            return (data.tag, InSlot(data.slot.index), targets, data.swaps)
        images, targets = collate_rows(data)
        if numbers:
            targets = [s[1] for s in data]
        return (data.tag, images, targets, data.swaps)
    return collate_rows(data)


def _all_in(rows: BatchRows, samples: Sequence[Any]) -> bool:
    """Whether every sample's image is its row of ``rows``, in order."""
    return all(
        isinstance(s, tuple) and len(s) == 2 and rows.holds(k, s[0]) for k, s in enumerate(samples)
    )
