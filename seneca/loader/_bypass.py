"""Cache hits that never cross a process boundary: with workers, only misses go to them.

ODS decides each batch in the loader process, so the loader knows which samples are augmented
hits before any worker sees them. An augmented hit needs no CPU work: its bytes go from the
cache into the batch's rows. :class:`HitSplitter`, the DataLoader's batch sampler, hands the
workers a ticket per batch (a :class:`Tag` naming it); a worker that starts a ticket asks the
loader process's desk for its samples (``seneca.loader._desk``), and the batch is decided then,
as late as the pipeline allows: its misses can still become hits on copies other jobs made
while the ticket waited. The worker gets the batch's other samples (misses, and hits that
still need a decode or a transform); the augmented hits are read in the loader process while
the worker makes them, straight into the rows of the batch tensor (``Fetcher.fetch``: the
zero-copy reader, pins released, stats counted, a hit found gone read from storage). A decided
hit is pinned in the cache until it is read, so it is read at once rather than when the batch
is merged: the hits of the batches in flight wait in the loader process's memory (uint8 rows,
at most one batch tensor per batch in flight). Each worker's part comes back tagged
(:func:`collate_part`); :meth:`HitSplitter.merged` copies the workers' rows into the rest of
each batch and yields the batches in the decided order, ready for the batch tail. Batches are
decided in ticket order (a worker that starts a ticket before an earlier one has been started
decides the earlier one first), so exactly-once, admissions, ``state_dict`` and the batch tail
are as with decisions made when DataLoader hands out the batch; tags match parts to batches
whatever order the workers finish in (``in_order=False``).

Used with workers, ODS, and the default collate with the batch tail deferred (what lets a hit
be a row of the batch tensor); otherwise every sample goes to the workers as before.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import default_collate

from ods.decision import Pick
from seneca.loader._desk import Desk
from seneca.loader._fetch import Fetcher
from seneca.loader._part_buffers import PartReader, PartRef
from seneca.loader._rows import BatchRows, collate_rows
from seneca.loader.timeline import Timeline
from seneca_base.errors import SenecaError

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
    """The batch sampler that runs: a ticket per batch of ``sampler``
    (``ods.sampler.OdsBatchSampler``) for the workers, each decided when its worker starts it
    (:meth:`decide`, through the :class:`~seneca.loader._desk.Desk`); the hits stay here
    until :meth:`merged`."""

    def __init__(self, sampler: Any, fetcher: Fetcher, timeline: Timeline | None = None) -> None:
        self.sampler = sampler
        self.fetcher = fetcher  # the dataset's, which reads the hits in the loader process
        self.timeline = timeline  # the batches' stage times (None: not recorded)
        self._mark = timeline.mark if timeline is not None else _unmarked
        self._lock = threading.Lock()  # the desk's thread decides, DataLoader's merges
        self._pending: dict[int, list[Pick]] = {}
        self._ready: dict[int, tuple[BatchRows, list[Any]] | Exception] = {}
        #: decided batches whose hits are not read yet: (tag, picks, the hits' slots)
        self._unread: list[tuple[int, list[Pick], list[int]]] = []
        self._hits_read = threading.Condition(self._lock)
        self._next = 0  # the next ticket's tag
        self._iteration = 0
        self._source: Iterator[list[Pick]] | None = None  # the iteration's batches to decide
        self._decided = 0  # the tag the next decision is for
        self._failure: BaseException | None = None  # why deciding stopped, raised by merged
        self._parts = PartReader()  # the workers' buffers their parts' rows are in
        #: where workers ask for their tickets' samples; it goes with this splitter
        self.desk = Desk(self.decide, self.read_hits)
        weakref.finalize(self, self.desk.close)
        #: batches made of hits read here and samples from a worker
        self.mixed = 0
        #: batches whose hits were read before their workers' part came (when decided)
        self.read_ahead = 0
        #: workers' parts with samples, and those whose rows came in a reused shared buffer
        self.parts = 0
        self.buffered = 0
        #: the most batches decided and not yet merged at once (what deciding late bounds)
        self.most_decided = 0

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self) -> Iterator[list[Any]]:
        with self._lock:
            self._stop_source()
            self._pending.clear()  # an abandoned iteration's batches are not coming back
            self._ready.clear()
            self._unread.clear()
            self._iteration += 1
            self._failure = None
            self._source = iter(self.sampler)
            self._decided = first = self._next
            iteration = self._iteration
        mark = self._mark
        for k in range(len(self.sampler)):
            tag = first + k
            with self._lock:
                if self._source is None and self._decided <= tag:
                    return  # the epoch was served (or deciding failed) before this ticket
            mark(tag, "asked")
            self._next = tag + 1
            yield [Tag(tag, iteration, self.sampler.batch_size)]

    def decide(self, iteration: int, tag: int) -> list[Pick] | None:
        """The samples a worker makes for ticket ``tag`` of ``iteration``, decided now (and
        every earlier ticket not yet decided first); None: it has no batch (another
        iteration's, or the epoch was served before it, or deciding failed). The decided
        batches' hits are read by :meth:`read_hits`, once the worker has its answer."""
        with self._lock:
            if iteration != self._iteration:
                return None
            while self._source is not None and self._decided <= tag:
                self._decide_next()
            picks = self._pending.get(tag)
        return None if picks is None else [p for p in picks if not _bypassed(p)]

    def read_hits(self) -> None:
        """Read the hits of the batches decided since the last call, into their rows: the
        pins go at once, not when the batch is merged."""
        while True:
            with self._lock:
                if not self._unread:
                    return
                tag, picks, slots = self._unread.pop(0)
            try:
                read: Any = self._read(picks, slots)
            except Exception as err:  # raised in the loop, where the batch is merged
                read = err
            self._mark(tag, "hits read")
            with self._hits_read:
                self._ready[tag] = read
                self._hits_read.notify_all()

    def close(self) -> None:
        """Stop deciding the latest iteration's batches (a closed loader)."""
        with self._lock:
            self._stop_source()

    def _decide_next(self) -> None:
        """Decide the next ticket's batch (holding the lock); its hits are read later."""
        tag = self._decided
        try:
            picks = next(self._source, None)  # type: ignore[arg-type]
        except Exception as err:  # raised in the loop, where the batch is merged
            self._failure, picks = err, None
        if picks is None:
            self._source = None
            return
        self._mark(tag, "decided")
        self._pending[tag] = picks
        slots = _hit_slots(picks)
        if slots:
            self._unread.append((tag, picks, slots))
        self._decided += 1
        self.most_decided = max(self.most_decided, len(self._pending))

    def _stop_source(self) -> None:
        source, self._source = self._source, None
        close = getattr(source, "close", None)
        if close is not None:
            close()

    def merged(self, it: Iterator[Any]) -> Iterator[Any]:
        """The batches of ``it`` (the workers' tagged parts) with their hits (read here when
        the batch was decided) put in place, in the order each batch was decided."""
        self._parts.clear()  # workers send their buffers again in a new iteration
        mark = self._mark
        iteration = self._iteration
        try:
            yield from self._merging(it, mark)
        finally:  # ended or cut short: nothing more of this iteration is decided
            with self._lock:
                if self._iteration == iteration:
                    self._stop_source()

    def _merging(self, it: Iterator[Any], mark: Any) -> Iterator[Any]:
        while True:
            try:
                tag, images, targets = next(it)
            except StopIteration:
                return
            if self._undecided(tag):
                continue  # a ticket with no batch
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

    def _undecided(self, tag: int) -> bool:
        """Whether ticket ``tag`` has no batch (raising why, when deciding failed)."""
        with self._lock:
            if tag in self._pending:
                return False
            failure = self._failure
        if failure is not None:
            raise failure
        return True

    def _batch(self, tag: int, images: Any, targets: Any, ref: PartRef | None) -> list[Any]:
        """Batch ``tag`` from its workers' part and its hits (read when it was decided); the
        worker's buffer of ``ref`` goes back once its rows are copied."""
        with self._hits_read:
            picks = self._pending.pop(tag)
            slots = _hit_slots(picks)
            if slots:  # read by the desk's thread once the worker had its answer
                self._hits_read.wait_for(lambda: tag in self._ready)
            read = self._ready.pop(tag, None)  # None: the batch has no hits read here
        if isinstance(read, Exception):
            raise read
        if images is None and len(picks) > len(slots):  # its worker got no samples
            raise self._failure or SenecaError(f"batch {tag}'s samples never reached its worker")
        if read is None:
            batch = [images if ref is None else images.clone(), targets]
        else:
            self.mixed += images is not None
            self.read_ahead += 1
            batch = self._assemble(picks, slots, read, images, targets)
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
