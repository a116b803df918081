"""Tickets: with workers, a batch is decided when its worker starts it, and made in a slot.

DataLoader hands a worker its batch ``prefetch_factor`` x ``num_workers`` batches before the loop
takes it. :class:`TicketSampler`, the DataLoader's batch sampler, hands the workers a ticket per
batch instead (a :class:`Tag` naming it); a worker that starts a ticket asks the loader process's
desk for its samples (``seneca.loader._desk``), and the batch is decided then, as late as the
pipeline allows: its misses can still become hits on copies other jobs made while the ticket waited.
The desk lends the batch a slot (``seneca.loader._slots``), memory the loader process and its
workers share, and the worker makes the whole batch in it (``Fetcher.fetch``: the augmented hits
read from the cache straight into their rows by the zero-copy reader, pins released, the misses
decoded and transformed into theirs, stats counted, a hit found gone read from storage). A decided
hit is pinned in the cache until it is read, and the worker reads it when it starts the batch. What
comes back to the loader process is the slot's number, the targets and the misses the worker swapped
late for copies other jobs cached meanwhile (``_rows.collate_part``; ``Fetcher._made_late``),
which amend the sampler's record of the batch; :meth:`TicketSampler.merged` yields the batches in
the order they were decided, ready for the batch tail, so the loader process neither reads hits nor
copies rows. Each ticket gets the epoch's next batch when its worker asks, whatever its place among
the tickets: a batch's hits are then pinned only while its worker reads them. (A ticket decided
before its worker starts it, so that tickets are decided in their order, would keep its hits pinned
for as long as the worker takes over the batch before: with 4 workers per job most of a small cache
was such pins, which nothing can evict, and the jobs' new copies were refused.) Exactly-once,
admissions and ``state_dict`` are as with decisions made when DataLoader hands out the batch: the
epoch's batches are decided in the sampler's order, whichever ticket carries each, and reach the
loop in that order; tags match parts to batches whatever order the workers finish in
(``in_order=False``).

Used with workers, ODS, and the default collate with the batch tail deferred (what lets a hit
be a row of the batch tensor); otherwise every sample goes to the workers as DataLoader sends
them.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import default_collate

from ods.decision import Pick
from seneca.loader._desk import Desk, Share
from seneca.loader._rows import InSlot
from seneca.loader._slots import BatchSlots, Lent
from seneca.loader.timeline import Timeline
from seneca_base.errors import SenecaError

__all__ = ["SlotBatch", "Tag", "TicketSampler"]


@dataclass(frozen=True)
class Tag:
    """A ticket, what DataLoader hands a worker for a batch: which batch it is, of which
    iteration."""

    batch: int
    iteration: int


class SlotBatch(list):
    """A merged ``[images, targets]`` whose images are the batch slot :attr:`slot`
    (``seneca.loader._slots.released`` frees it)."""

    slot: Lent | None = None


def _unmarked(tag: int, stage: str) -> None:
    """No timeline: nothing recorded."""


class TicketSampler:
    """The batch sampler that runs: a ticket per batch of ``sampler``
    (``ods.sampler.OdsBatchSampler``) for the workers, each decided when its worker starts it
    (:meth:`decide`, through the :class:`~seneca.loader._desk.Desk`) and made in a slot of
    ``slots`` when one is free; :meth:`merged` puts the workers' parts in the decided order."""

    def __init__(
        self,
        sampler: Any,
        slots: BatchSlots | None = None,
        timeline: Timeline | None = None,
    ) -> None:
        self.sampler = sampler
        #: the batch slots batches are made in (None: none; ``seneca.loader._slots``)
        self.slots = slots
        self.timeline = timeline  # the batches' stage times (None: not recorded)
        self._mark = timeline.mark if timeline is not None else _unmarked
        self._lock = threading.Lock()  # the desk's thread decides, DataLoader's merges
        self._pending: dict[int, Share] = {}  # tag -> its decided batch and slot
        self._order: deque[int] = deque()  # the tags decided and not merged, in that order
        self._next = 0  # the next ticket's tag
        self._iteration = 0
        self._source: Iterator[list[Pick]] | None = None  # the iteration's batches to decide
        self._failure: BaseException | None = None  # why deciding stopped, raised by merged
        #: where workers ask for their tickets' samples; it goes with this splitter
        self.desk = Desk(self.decide)
        weakref.finalize(self, self.desk.close)
        self._parts = self._in_slots = 0  # for stats()

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self) -> Iterator[Tag]:
        epoch = self.sampler.check_owned()  # the loader's own iteration, not a copy's
        with self._lock:
            self._stop_source()
            self._pending.clear()  # an abandoned iteration's batches are not coming back
            self._order.clear()
            self._iteration += 1
            self._failure = None
            if self.slots is not None:  # slots lent to a loop cut short are not reused
                self.slots.renew()
            # the epoch the loader announced as the iteration began, not the one due when the
            # desk's thread decides the first batch (a set_epoch may come between)
            self._source = self.sampler.batches(epoch)
            first = self._next
            iteration = self._iteration
        mark = self._mark
        for k in range(len(self.sampler)):
            tag = first + k
            with self._lock:
                if self._source is None:
                    return  # the epoch was served (or deciding failed) before this ticket
            mark(tag, "asked")
            self._next = tag + 1
            yield Tag(tag, iteration)

    def decide(self, iteration: int, tag: int) -> Share | None:
        """What a worker makes of ticket ``tag`` of ``iteration``: its batch, decided now (and
        every earlier ticket not yet decided first), and the slot lent to it; None: it has no
        batch (another iteration's, or the epoch was served before it, or deciding failed)."""
        with self._lock:
            if iteration != self._iteration:
                return None
            if tag not in self._pending and self._source is not None:
                self._decide_next(tag)
            return self._pending.get(tag)

    def stats(self) -> dict[str, int]:
        """``batches``: the batches the workers made; ``in_slots``: those made in a slot (the
        rest crossed to this process as DataLoader's do); with slots, theirs
        (``BatchSlots.stats``)."""
        out = {"batches": self._parts, "in_slots": self._in_slots}
        return out | (self.slots.stats() if self.slots is not None else {})

    def reset_stats(self) -> None:
        self._parts = self._in_slots = 0
        if self.slots is not None:
            self.slots.reset_stats()

    def close(self) -> None:
        """Stop deciding the latest iteration's batches (a closed loader)."""
        with self._lock:
            self._stop_source()

    def _decide_next(self, tag: int) -> None:
        """Decide the next batch, for ticket ``tag``, and lend it a slot (holding the lock)."""
        try:
            picks = next(self._source, None)  # type: ignore[arg-type]
        except Exception as err:  # raised in the loop, where the batch is merged
            self._failure, picks = err, None
        if picks is None:
            self._source = None
            return
        self._mark(tag, "decided")
        lent = self.slots.take() if self.slots is not None else None
        late = getattr(self.sampler, "swaps_late", False)
        self._pending[tag] = Share(picks, lent, self.sampler.current if late else None)
        self._order.append(tag)

    def _stop_source(self) -> None:
        source, self._source = self._source, None
        close = getattr(source, "close", None)
        if close is not None:
            close()

    def merged(self, it: Iterator[Any]) -> Iterator[Any]:
        """The batches of ``it`` (the workers' tagged parts), in the order they were decided,
        as ``[images, targets]``: with a slot, the slot's rows."""
        mark = self._mark
        iteration = self._iteration
        try:
            yield from self._merging(it, mark)
        finally:  # ended or cut short: nothing more of this iteration is decided
            with self._lock:
                if self._iteration == iteration:
                    self._stop_source()

    def _merging(self, it: Iterator[Any], mark: Any) -> Iterator[Any]:
        arrived: dict[int, tuple[Any, Any, Any]] = {}  # parts whose batch is not due yet
        while True:
            due = self._due(arrived)
            if due is not None:
                yield self._merged(due, *arrived.pop(due), mark)
                continue
            try:
                tag, images, targets, swaps = next(it)
            except StopIteration:
                with self._lock:
                    left = [t for t in self._order if t in arrived]
                for tag in left:
                    yield self._merged(tag, *arrived.pop(tag), mark)
                return
            if self._undecided(tag):
                continue  # a ticket with no batch
            mark(tag, "part")
            arrived[tag] = (images, targets, swaps)

    def _due(self, arrived: dict[int, tuple[Any, Any, Any]]) -> int | None:
        """The tag of the batch decided first and not merged yet, once its part has arrived
        (None: not yet). Batches reach the loop in the order they were decided, whatever order
        DataLoader returns the parts in: ``state_dict`` counts the loop's batches as the
        first ones decided."""
        with self._lock:
            if self._order and self._order[0] in arrived:
                return self._order.popleft()
        return None

    def _merged(self, tag: int, images: Any, targets: Any, swaps: Any, mark: Any) -> list[Any]:
        """Batch ``tag`` from its worker's part (``swaps``: the misses its worker swapped late,
        (position, index served instead) each)."""
        if isinstance(targets, list):  # numbers (see _rows.collate_part)
            targets = default_collate(targets)
        self._parts += images is not None
        self._in_slots += isinstance(images, InSlot)
        if swaps:
            with self._lock:
                share = self._pending.get(tag)
            if share is not None:
                self.sampler.swapped(share.picks, swaps)
        batch = self._batch(tag, images, targets)
        mark(tag, "merged")
        return batch

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
        """Batch ``tag`` from its worker's part (``images``: :class:`InSlot` when made in the
        batch's slot, else a tensor; None when the worker got no samples). A slot lent to a
        batch that did not come in it is given back at once."""
        with self._lock:
            share = self._pending.pop(tag)
        picks, lent = share.picks, share.slot
        if isinstance(images, InSlot) and lent is not None and images.index == lent.index:
            batch = SlotBatch([lent.tensor[: len(picks)], targets])
            batch.slot = lent
            return batch
        if lent is not None and self.slots is not None:
            self.slots.release(lent)
        if images is None:  # its worker got no samples
            raise self._failure or SenecaError(f"batch {tag}'s samples never reached its worker")
        if isinstance(images, InSlot):
            raise SenecaError(f"batch {tag}'s part came in a slot not lent to it")
        if isinstance(images, torch.Tensor) and self.slots is not None:
            self.slots.fit(images.dtype, tuple(images.shape[1:]))
        return [images, targets]
