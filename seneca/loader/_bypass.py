"""Cache hits that never cross a process boundary: with workers, only misses go to them.

ODS decides each batch in the loader process, so the loader knows which samples are augmented
hits before any worker sees them. An augmented hit needs no CPU work: its bytes go from the
cache into the batch's rows. :class:`HitSplitter`, the DataLoader's batch sampler, hands the
workers a ticket per batch (a :class:`Tag` naming it); a worker that starts a ticket asks the
loader process's desk for its samples (``seneca.loader._desk``), and the batch is decided then,
as late as the pipeline allows: its misses can still become hits on copies other jobs made
while the ticket waited. The worker gets the batch's other samples (misses, and hits that
still need a decode or a transform); the augmented hits are read in the loader process while
the worker makes them, straight into their rows of the batch (``Fetcher.fetch``: the
zero-copy reader, pins released, stats counted, a hit found gone read from storage). A batch
is made in a slot lent to it when it is decided (``seneca.loader._slots``): the worker makes
its samples in their rows of the same slot. A decided hit is pinned in the cache until it is
read, so it is read at once rather than when the batch is merged: the hits of the batches in
flight wait in their slots (uint8 rows). Each worker's part comes back tagged
(:func:`collate_part`: with a slot, only the slot's number crosses); :meth:`HitSplitter.merged`
puts each batch together (with a slot it is whole already; without, the worker's rows are
copied into it) and yields the batches in the decided order, ready for the batch tail. Batches are
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
from seneca.loader._desk import Desk, Share
from seneca.loader._fetch import Fetcher
from seneca.loader._rows import BatchRows, collate_rows
from seneca.loader._slots import BatchSlots, Lent
from seneca.loader.timeline import Timeline
from seneca_base.errors import SenecaError

__all__ = ["HitSplitter", "InSlot", "SlotBatch", "Tag", "Tagged", "collate_part"]


@dataclass(frozen=True)
class Tag:
    """The first element of a worker's part of a batch: which batch it is, of which iteration,
    and how many samples the whole batch has."""

    batch: int
    iteration: int
    size: int


class Tagged(list):
    """A worker's samples of batch :attr:`tag` (what ``CachedDataset.__getitems__`` returns for
    a tagged part), and the rows their images were made in (None: no rows): the batch slot's
    :attr:`slot` (None: none), their rows :attr:`at`."""

    tag: int = -1
    rows: BatchRows | None = None
    slot: Lent | None = None
    at: Sequence[int] = ()


@dataclass(frozen=True, eq=False)
class InSlot:
    """What crosses for a worker's part whose images were made in its batch's slot: nothing but
    the slot's number (a plain object: DataLoader's pin-memory thread leaves it as it is)."""

    index: int


class SlotBatch(list):
    """A merged ``[images, targets]`` whose images are the batch slot :attr:`slot`
    (``seneca.loader._slots.released`` frees it)."""

    slot: Lent | None = None


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
        numbers = all(
            isinstance(s, tuple) and len(s) == 2 and type(s[1]) in (int, float) for s in data
        )
        rows = data.rows
        if data.slot is not None and rows is not None and _all_in(rows, data.at, data):
            targets = [s[1] for s in data] if numbers else default_collate([s[1] for s in data])
            return (data.tag, InSlot(data.slot.index), targets)
        images, targets = collate_rows(data)
        if numbers:
            targets = [s[1] for s in data]
        return (data.tag, images, targets)
    return collate_rows(data)


def _all_in(rows: BatchRows, at: Sequence[int], samples: Sequence[Any]) -> bool:
    """Whether every sample's image is its row ``at[k]`` of ``rows``."""
    return all(
        isinstance(s, tuple) and len(s) == 2 and rows.holds(at[k], s[0])
        for k, s in enumerate(samples)
    )


def _unmarked(tag: int, stage: str) -> None:
    """No timeline: nothing recorded."""


def _bypassed(pick: Pick) -> bool:
    return pick.tier == "augmented"


def _hit_rows(picks: Sequence[Pick]) -> list[int]:
    """Where a batch's hits read in the loader process go."""
    return [k for k, p in enumerate(picks) if _bypassed(p)]


class HitSplitter:
    """The batch sampler that runs: a ticket per batch of ``sampler``
    (``ods.sampler.OdsBatchSampler``) for the workers, each decided when its worker starts it
    (:meth:`decide`, through the :class:`~seneca.loader._desk.Desk`); the hits stay here
    until :meth:`merged`."""

    def __init__(
        self,
        sampler: Any,
        fetcher: Fetcher,
        slots: BatchSlots | None = None,
        timeline: Timeline | None = None,
    ) -> None:
        self.sampler = sampler
        self.fetcher = fetcher  # the dataset's, which reads the hits in the loader process
        #: the batch slots batches are made in (None: none; ``seneca.loader._slots``)
        self.slots = slots
        self.timeline = timeline  # the batches' stage times (None: not recorded)
        self._mark = timeline.mark if timeline is not None else _unmarked
        self._lock = threading.Lock()  # the desk's thread decides, DataLoader's merges
        self._pending: dict[int, tuple[list[Pick], Lent | None]] = {}
        self._ready: dict[int, tuple[BatchRows, list[Any]] | Exception] = {}
        #: decided batches whose hits are not read yet: (tag, picks, the hits' rows, the slot)
        self._unread: list[tuple[int, list[Pick], list[int], Lent | None]] = []
        self._hits_read = threading.Condition(self._lock)
        self._next = 0  # the next ticket's tag
        self._iteration = 0
        self._source: Iterator[list[Pick]] | None = None  # the iteration's batches to decide
        self._decided = 0  # the tag the next decision is for
        self._failure: BaseException | None = None  # why deciding stopped, raised by merged
        #: where workers ask for their tickets' samples; it goes with this splitter
        self.desk = Desk(self.decide, self.read_hits)
        weakref.finalize(self, self.desk.close)
        #: batches made of hits read here and samples from a worker
        self.mixed = 0
        #: batches whose hits were read before their workers' part came (when decided)
        self.read_ahead = 0
        #: workers' parts with samples, and those whose rows were made in their batch's slot
        self.parts = 0
        self.in_slots = 0
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
            if self.slots is not None:  # slots lent to a loop cut short are not reused
                self.slots.renew()
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

    def decide(self, iteration: int, tag: int) -> Share | None:
        """What a worker makes of ticket ``tag`` of ``iteration``, decided now (and every
        earlier ticket not yet decided first); None: it has no batch (another iteration's, or
        the epoch was served before it, or deciding failed). The decided batches' hits are
        read by :meth:`read_hits`, once the worker has its answer."""
        with self._lock:
            if iteration != self._iteration:
                return None
            while self._source is not None and self._decided <= tag:
                self._decide_next()
            pending = self._pending.get(tag)
        if pending is None:
            return None
        picks, lent = pending
        mine = [k for k, p in enumerate(picks) if not _bypassed(p)]
        return Share([picks[k] for k in mine], mine, lent)

    def read_hits(self) -> None:
        """Read the hits of the batches decided since the last call, into their rows: the
        pins go at once, not when the batch is merged."""
        while True:
            with self._lock:
                if not self._unread:
                    return
                tag, picks, hits_at, lent = self._unread.pop(0)
            try:
                read: Any = self._read(picks, hits_at, lent)
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
        lent = self.slots.take() if self.slots is not None else None
        self._pending[tag] = (picks, lent)
        hits_at = _hit_rows(picks)
        if hits_at:
            self._unread.append((tag, picks, hits_at, lent))
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
            self.parts += images is not None
            self.in_slots += isinstance(images, InSlot)
            batch = self._batch(tag, images, targets)
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

    def _batch(self, tag: int, images: Any, targets: Any) -> list[Any]:
        """Batch ``tag`` from its workers' part (``images``: a tensor, :class:`InSlot` when
        made in the batch's slot, None when it had no samples) and its hits (read when it was
        decided)."""
        with self._hits_read:
            picks, lent = self._pending.pop(tag)
            hits_at = _hit_rows(picks)
            if hits_at:  # read by the desk's thread once the worker had its answer
                self._hits_read.wait_for(lambda: tag in self._ready)
            read = self._ready.pop(tag, None)  # None: the batch has no hits read here
        try:
            if isinstance(read, Exception):
                raise read
            if images is None and len(picks) > len(hits_at):  # its worker got no samples
                raise self._failure or SenecaError(
                    f"batch {tag}'s samples never reached its worker"
                )
            if isinstance(images, InSlot) and (lent is None or images.index != lent.index):
                raise SenecaError(f"batch {tag}'s part came in a slot not lent to it")
            if isinstance(images, torch.Tensor) and self.slots is not None:
                self.slots.fit(images.dtype, tuple(images.shape[1:]))
            if read is None:
                batch = [lent.tensor[: len(picks)] if isinstance(images, InSlot) else images]
                batch.append(targets)
            else:
                self.mixed += images is not None
                self.read_ahead += 1
                batch = self._assemble(picks, hits_at, read, images, targets, lent)
        except BaseException:
            self._give_back(lent)
            raise
        return self._lent(batch, lent)

    def _lent(self, batch: list[Any], lent: Lent | None) -> list[Any]:
        """``batch``, a :class:`SlotBatch` when its images are ``lent``'s slot (the slot given
        back when they are not)."""
        if lent is None:
            return batch
        images = batch[0] if isinstance(batch, list) and batch else None
        if not isinstance(images, torch.Tensor) or images.data_ptr() != lent.tensor.data_ptr():
            self._give_back(lent)
            return batch
        out = SlotBatch(batch)
        out.slot = lent
        return out

    def _give_back(self, lent: Lent | None) -> None:
        if lent is not None and self.slots is not None:
            self.slots.release(lent)

    def _read(
        self, picks: Sequence[Pick], hits_at: list[int], lent: Lent | None
    ) -> tuple[BatchRows, list[Any]]:
        """Batch ``picks``' hits (at ``hits_at``) read into the rows of the batch: ``lent``'s
        slot, else a new tensor."""
        n = len(picks)
        rows = BatchRows(n) if lent is None else BatchRows.over(lent.tensor[:n])
        hits = self.fetcher.fetch([picks[k] for k in hits_at], True, rows, hits_at)
        if rows.rows is not None and self.slots is not None:
            self.slots.fit(rows.rows.dtype, tuple(rows.rows.shape[1:]))
        return rows, hits

    def _assemble(
        self,
        picks: Sequence[Pick],
        hits_at: list[int],
        read: tuple[BatchRows, list[Any]],
        images: Any,
        targets: Any,
        lent: Lent | None,
    ) -> list[Any]:
        """Batch ``picks``: the hits at ``hits_at`` (``read`` into their rows), the workers'
        ``images`` and ``targets`` (the other samples, in order) in the rest: copied there, or
        made there already (:class:`InSlot`: the rows of ``lent``'s slot)."""
        rows, hits = read
        hit = set(hits_at)
        others = [k for k in range(len(picks)) if k not in hit]
        batch = rows.rows
        fast = batch is not None and all(
            rows.holds(k, s[0]) for k, s in zip(hits_at, hits, strict=True)
        )
        in_slot = isinstance(images, InSlot)
        if batch is not None and fast and images is not None and not in_slot:
            fast = isinstance(images, torch.Tensor) and images.shape[1:] == batch.shape[1:]
            fast = fast and images.dtype == batch.dtype
        fast = fast and (images is None or isinstance(targets, torch.Tensor))
        if batch is not None and fast:
            labels = default_collate([s[1] for s in hits])
            out = torch.empty((len(picks), *labels.shape[1:]), dtype=labels.dtype)
            out[hits_at] = labels
            if images is not None:
                if not in_slot:
                    _copy_rows(batch, others, images)
                out[others] = targets.to(labels.dtype)
            return [batch, out]
        # anything else (samples of other shapes, hits found gone and made here): collate the
        # samples in their decided order
        if in_slot:
            assert lent is not None
            images = lent.tensor[others]
        samples: list[Any] = [None] * len(picks)
        for k, s in zip(hits_at, hits, strict=True):
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
