"""The one place Seneca uses torch's private API.

SenecaLoader is a DataLoader that shows the user's dataset and reads through the cache; batch
rows are filled in place and recycled once nobody holds them; workers' buffers live in shared
memory. torch offers no public way to do four of the things this needs, so each is done here,
naming what it relies on; one torch behaviour is worked around here too (:func:`worker_errors`).
:data:`CHECKED` lists the torch versions these uses were checked against: the oldest the
package accepts (CI runs the loader's tests with it, ``scripts/oldest.sh``) and the one in
``constraints.txt``; a test keeps them in step with both.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any, TypeVar

import torch
from torch.utils.data import DataLoader

__all__ = [
    "CHECKED",
    "ReadThroughLoader",
    "drop_iterator",
    "reference_counts",
    "shared_empty",
    "view_base",
    "worker_errors",
]

#: torch versions these uses were checked against
CHECKED = ("2.6.0", "2.14.1")

_T_co = TypeVar("_T_co", covariant=True)


class ReadThroughLoader(DataLoader[_T_co]):
    """A DataLoader whose iterators read one dataset while it shows another (the user's), as
    SenecaLoader reads the user's dataset through the cache.

    torch: ``DataLoader._get_iterator`` makes every iterator from ``self.dataset`` (2.6-2.14);
    ``dataset``, ``batch_size``, ``drop_last`` and ``sampler`` cannot be set once the loader is
    built (``DataLoader.__setattr__``), so :meth:`read_through` sets them past that guard."""

    _read: Any = None

    def read_through(self, read: Any, shown: Any, **fields: Any) -> None:
        """Iterators read ``read``; the loader shows ``shown`` as its ``dataset``, and each of
        ``fields`` (``batch_size``, ``drop_last``, ``sampler``) as given."""
        object.__setattr__(self, "_read", read)
        for name, value in {"dataset": shown, **fields}.items():
            object.__setattr__(self, name, value)

    def _drop_iterator(self) -> None:
        """Drop the iterator the loader keeps for its persistent workers (:func:`drop_iterator`)."""
        drop_iterator(self)

    def _get_iterator(self) -> Any:
        read = self._read
        if read is None:
            return super()._get_iterator()
        shown = self.dataset
        object.__setattr__(self, "dataset", read)
        try:
            return super()._get_iterator()
        finally:
            object.__setattr__(self, "dataset", shown)


def drop_iterator(loader: DataLoader) -> None:
    """Drop the iterator ``loader`` keeps for its persistent workers: they stop with it.
    torch: ``DataLoader._iterator`` (2.6-2.14)."""
    loader._iterator = None


def view_base(t: torch.Tensor) -> torch.Tensor | None:
    """The tensor ``t`` is a view of (None: not a view). torch: ``Tensor._base``."""
    return t._base


def reference_counts(t: torch.Tensor) -> tuple[int, ...] | None:
    """References to ``t`` and its memory, as seen from the caller: to the Python tensor, to
    the tensor, to its storage and to the storage's Python object; None where torch does not
    say. torch: ``torch._C._storage_Use_Count``, ``UntypedStorage._cdata``,
    ``Tensor._use_count``. Compare only counts taken the same way (same call depth)."""
    try:
        storage = t.untyped_storage()
        uses = torch._C._storage_Use_Count(storage._cdata)
        return sys.getrefcount(t), t._use_count(), uses, sys.getrefcount(storage)
    except (AttributeError, RuntimeError, TypeError):
        return None


def shared_empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised tensor in shared memory, as DataLoader's collate makes one in a worker
    (no copy, unlike ``share_memory_``). torch: ``TypedStorage._new_shared``, as
    ``torch.utils.data._utils.collate`` uses it."""
    numel = int(torch.Size(shape).numel())
    storage = torch.empty(0, dtype=dtype)._typed_storage()._new_shared(numel, device="cpu")
    return torch.empty(0, dtype=dtype).new(storage).resize_(shape)


def worker_errors(it: Iterator[Any]) -> Iterator[Any]:
    """The batches of DataLoader's iterator ``it`` (with workers); when a worker's exception
    comes, the workers are told to stop before it is raised, unless they are persistent (the
    loader's next iteration uses them). The batches' iteration ends there in any case: it is a
    generator.

    torch: ``_MultiProcessingDataLoaderIter._shutdown_workers`` and ``_persistent_workers``
    (2.6-2.14). Left to the iterator's ``__del__``, the workers stop only once nothing holds
    the exception, and an exception kept by the script (or pytest) is in a reference cycle
    with the frames of its traceback; ``ExceptionWrapper.reraise`` makes one of its own, by
    raising the exception it holds in a local variable (that frame's variables are cleared
    here). Python's garbage collector then runs the index queues' finalizers before the
    iterator's ``__del__``: the queues are closed before each worker is sent its last
    ``None``, and each worker's join waits ``MP_STATUS_CHECK_INTERVAL`` (5 s) in vain before
    the worker is terminated."""
    try:
        yield from it
    except Exception as err:
        tb = err.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code is _RERAISE:
                tb.tb_frame.clear()
            tb = tb.tb_next
        if not getattr(it, "_persistent_workers", True):
            it._shutdown_workers()  # type: ignore[attr-defined]
        raise


_RERAISE = torch._utils.ExceptionWrapper.reraise.__code__
