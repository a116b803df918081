"""Cache hits that never cross a process boundary: with workers, only misses go to them.

ODS decides each batch in the loader process, so the loader knows which samples are augmented
hits before any worker sees the batch. An augmented hit needs no CPU work: its bytes go from
the cache into the batch's rows. :class:`HitSplitter`, the DataLoader's batch sampler, hands
the workers each batch's other samples (misses, and hits that still need a decode or a
transform) behind a :class:`Tag` naming the batch, and keeps the hits. Each worker's part
comes back tagged (:func:`collate_part`). The batch's hits are read in the loader process as
soon as the batch is decided, when DataLoader hands its part to a worker, straight into the
rows of the batch tensor (``Fetcher.fetch``: the zero-copy reader, pins released, stats
counted, a hit found gone read from storage). A decided hit is pinned in the cache until it
is read, and DataLoader decides up to ``prefetch_factor`` x ``num_workers`` batches before
the loop takes them: read when the batch was merged, the pins of that many batches' hits
kept their copies from being evicted, and a small cache then had no room left for the copies
other jobs made. Read at once, the hits of the batches in flight wait in the loader process's
memory instead (uint8 rows, at most one batch tensor per batch in flight).
:meth:`HitSplitter.merged` copies the workers' rows into the rest of each batch and yields
the batches in the decided order, ready for the batch tail. Exactly-once, admissions,
``state_dict`` and the batch tail are as without the bypass; tags match parts to batches
whatever order the workers finish in (``in_order=False``).

Used with workers, ODS, and the default collate with the batch tail deferred (what lets a hit
be a row of the batch tensor); otherwise every sample goes to the workers as before.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import default_collate

from ods.decision import Pick
from seneca.loader._fetch import Fetcher
from seneca.loader._part_buffers import PartReader, PartRef
from seneca.loader._rows import BatchRows, collate_rows
from seneca.loader.timeline import Timeline

__all__ = ["HitSplitter", "Tag", "Tagged", "collate_part"]


@dataclass(frozen=True)
class Tag:
    """The first element of a worker's part of a batch: which batch it is, of which iteration,
    and how many samples the whole batch has."""

    batch: int
    iteration: int
    size: int


class Tagged(list):
    """A worker's samples of batch :attr:`tag` (what ``CachedDataset.__getitems__`` returns for
    a tagged part), and the rows their images were made in (None: no rows)."""

    tag: int = -1
    rows: BatchRows | None = None


def collate_part(data: Any) -> Any:
    """The DataLoader's ``collate_fn`` with the bypass: a tagged part becomes ``(tag, images,
    targets)`` (``None, None`` for a part with no samples); anything else as ``collate_rows``.
    Targets that are plain numbers stay a list, collated in the loader process
    (:meth:`HitSplitter.merged`): a tensor would cross to it in shared memory, and each shared
    tensor costs a file descriptor handed over on a connection of its own, far more than
    making the tensor there (measured: ``docs/benchmarks.md``, the hit path's small costs)."""
    if isinstance(data, Tagged):
        if not data:
            return (data.tag, None, None)
        images, targets = collate_rows(data)
        if all(isinstance(s, tuple) and len(s) == 2 and type(s[1]) in (int, float) for s in data):
            targets = [s[1] for s in data]
        return (data.tag, _shared(data.rows, images), targets)
    return collate_rows(data)


def _shared(rows: BatchRows | None, images: Any) -> Any:
    """What crosses for a part's ``images``: a :class:`PartRef` when they are ``rows`` made in
    a reused buffer (whose buffer goes back unsent when they are not)."""
    if rows is None or rows.slot is None or rows.buffers is None:
        return images
    if images is rows.rows:
        return rows.buffers.ref(rows.slot, images)
    rows.buffers.free(rows.slot)
    return images


def _unmarked(tag: int, stage: str) -> None:
    """No timeline: nothing recorded."""


def _bypassed(pick: Pick) -> bool:
    return pick.tier == "augmented"


def _hit_slots(picks: Sequence[Pick]) -> list[int]:
    """Where a batch's hits read in the loader process go."""
    return [k for k, p in enumerate(picks) if _bypassed(p)]


class HitSplitter:
    """The batch sampler that runs: ``sampler``'s batches (``ods.sampler.OdsBatchSampler``),
    each as a tagged part for the workers; the hits stay here until :meth:`merged`."""

    def __init__(self, sampler: Any, fetcher: Fetcher, timeline: Timeline | None = None) -> None:
        self.sampler = sampler
        self.fetcher = fetcher  # the dataset's, which reads the hits in the loader process
        self.timeline = timeline  # the batches' stage times (None: not recorded)
        self._mark = timeline.mark if timeline is not None else _unmarked
        self._pending: dict[int, list[Pick]] = {}
        self._ready: dict[int, tuple[BatchRows, list[Any]]] = {}
        self._next = 0
        self._iteration = 0
        self._parts = PartReader()  # the workers' buffers their parts' rows are in
        #: batches made of hits read here and samples from a worker
        self.mixed = 0
        #: batches whose hits were read before their workers' part came (when decided)
        self.read_ahead = 0
        #: workers' parts with samples, and those whose rows came in a reused shared buffer
        self.parts = 0
        self.buffered = 0

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self) -> Iterator[list[Any]]:
        self._pending.clear()  # an abandoned iteration's batches are not coming back
        self._ready.clear()
        self._iteration += 1
        mark = self._mark
        batches = iter(self.sampler)
        while True:
            tag = self._next
            mark(tag, "asked")
            picks = next(batches, None)
            if picks is None:
                return
            mark(tag, "decided")
            self._next += 1
            self._pending[tag] = picks
            slots = _hit_slots(picks)
            if slots:  # read now: the pins go at once, not when the batch is merged
                self._ready[tag] = self._read(picks, slots)
            mark(tag, "hits read")
            yield [Tag(tag, self._iteration, len(picks)), *(p for p in picks if not _bypassed(p))]

    def merged(self, it: Iterator[Any]) -> Iterator[Any]:
        """The batches of ``it`` (the workers' tagged parts) with their hits (read here when
        the batch was decided) put in place, in the order each batch was decided."""
        self._parts.clear()  # workers send their buffers again in a new iteration
        mark = self._mark
        while True:
            try:
                tag, images, targets = next(it)
            except StopIteration:
                return
            mark(tag, "part")
            if isinstance(targets, list):  # numbers (see collate_part)
                targets = default_collate(targets)
            ref = images if isinstance(images, PartRef) else None
            if ref is not None:  # rows in a worker's buffer: copied here, then handed back
                images = self._parts.rows(ref)
                self.buffered += 1
            self.parts += images is not None
            batch = self._batch(tag, images, targets, ref)
            mark(tag, "merged")
            yield batch

    def _batch(self, tag: int, images: Any, targets: Any, ref: PartRef | None) -> list[Any]:
        """Batch ``tag`` from its workers' part and its hits (read when it was decided); the
        worker's buffer of ``ref`` goes back once its rows are copied."""
        picks = self._pending.pop(tag)
        read = self._ready.pop(tag, None)  # None: the batch has no hits read here
        if read is None:
            batch = [images if ref is None else images.clone(), targets]
        else:
            self.mixed += images is not None
            self.read_ahead += 1
            batch = self._assemble(picks, _hit_slots(picks), read, images, targets)
        if ref is not None:
            self._parts.release(ref)
        return batch

    def _read(self, picks: Sequence[Pick], slots: list[int]) -> tuple[BatchRows, list[Any]]:
        """Batch ``picks``' hits (at ``slots``) read into the rows of a new batch."""
        rows = BatchRows(len(picks))
        return rows, self.fetcher.fetch([picks[k] for k in slots], True, rows, slots)

    def _assemble(
        self,
        picks: Sequence[Pick],
        slots: list[int],
        read: tuple[BatchRows, list[Any]],
        images: Any,
        targets: Any,
    ) -> list[Any]:
        """Batch ``picks``: the hits at ``slots`` (``read`` into their rows), the workers'
        ``images`` and ``targets`` (the other samples, in order) copied into the rest."""
        rows, hits = read
        hit = set(slots)
        others = [k for k in range(len(picks)) if k not in hit]
        batch = rows.rows
        fast = batch is not None and all(
            rows.holds(k, s[0]) for k, s in zip(slots, hits, strict=True)
        )
        if batch is not None and fast and images is not None:
            fast = isinstance(images, torch.Tensor) and images.shape[1:] == batch.shape[1:]
            fast = fast and images.dtype == batch.dtype and isinstance(targets, torch.Tensor)
        if batch is not None and fast:
            labels = default_collate([s[1] for s in hits])
            out = torch.empty((len(picks), *labels.shape[1:]), dtype=labels.dtype)
            out[slots] = labels
            if images is not None:
                _copy_rows(batch, others, images)
                out[others] = targets.to(labels.dtype)
            return [batch, out]
        # anything else (samples of other shapes, hits found gone and made here): collate the
        # samples in their decided order
        samples: list[Any] = [None] * len(picks)
        for k, s in zip(slots, hits, strict=True):
            samples[k] = s
        if images is not None:
            for k, image, target in zip(others, images, _per_sample(targets, hits), strict=True):
                samples[k] = (image, target)
        return default_collate(samples)


def _copy_rows(batch: torch.Tensor, at: Sequence[int], images: torch.Tensor) -> None:
    """``batch[at] = images``, as one copy per run of consecutive rows: indexed assignment
    copies element by element, an order of magnitude slower (``docs/benchmarks.md``, the hit
    path's small costs)."""
    start = 0
    for j in range(1, len(at) + 1):
        if j == len(at) or at[j] != at[j - 1] + 1:
            batch[at[start] : at[j - 1] + 1].copy_(images[start:j])
            start = j


def _per_sample(targets: Any, hits: Sequence[Any]) -> Any:
    """The workers' collated ``targets`` per sample, as the hits' are: Python numbers where the
    hits' are (a tensor's elements would be 0-d tensors, which do not collate with numbers)."""
    if isinstance(targets, torch.Tensor) and not isinstance(hits[0][1], torch.Tensor):
        return targets.tolist()
    return targets
