"""The path of one batch, from its decision to the training loop, stated in one place.

A batch of a SenecaLoader that caches goes through these stages, in this order. First where
the batch is made, a DataLoader worker (or the loader process, without workers); with workers,
:data:`WORKER_STAGES` names the function that starts each stage in the worker:

1. **decide**: ODS picks the batch's samples and the tier to read each one from
   (``ods.sampler.OdsBatchSampler``, in the loader process). With workers, when the worker
   that got the batch's ticket starts it and asks the loader process (``_desk.DeskClient``,
   ``_desk.Desk``, ``_tickets.TicketSampler.decide``); without, when the loop asks for the
   batch. In a loader's own order (no ODS) the tiers are looked up when the batch is fetched
   (``_link.CacheLink.lookup``).
2. **slot**: with workers, the batch is lent a slot when it is decided (``_slots``: memory
   the loader process and its workers share), and the worker maps it
   (``_slots.SlotMaps``) to make the batch in it.
3. **read**: the batch's fetch (``_fetch.Fetcher``) reads the values in one round trip,
   augmented hits straight into their rows (``_read.Reader``);
4. **make**: misses read from storage and each sample's remaining work by
   ``_samples.SampleWork`` (``_make.Maker``; with workers, a few misses at a time, and while
   the cache is short of room swapped for copies cached since the decision, each swap a read
   again);
5. **admit**: the new values offered to the cache (``_admit.Admitter``);
6. **collate**: the samples collated (``_rows.collate_part``): with
   a slot, in its rows, so that only the slot's number and the targets cross to the loader
   process.

Then, per batch in the loader process, the stages of :meth:`BatchPath.stages`, each an
iterator over the one before (:data:`Stage`):

7. **follow**: without workers, before each batch but an iteration's first, the dataset's
   transform taken again where the script set or changed it since
   (``CachedDataset.changed_since``, ``SampleWork.use_transform``), as DataLoader's loop
   without workers makes each batch with the transform of the moment; then
   **worker error**: with workers, a worker's exception raised once the workers (unless
   persistent) are told to stop, as at the end of an epoch, whoever keeps the exception
   (``_torch_internals.worker_errors``); then **merge**: the workers' batches in the decided
   order, their targets collated (``TicketSampler.merged``);
8. **tail**: the transform's batch tail (``ToDtype``/``Normalize``) run once per batch, then
   pinned with ``pin_memory`` (``pipeline.batch_tail.finished_batches``); or, with
   ``device=``, **device copy**: the batch copied to the device and the tail run there
   (``_device.staged``); then **release**: the batch's slot free again, at once or once the
   copy is done (``_slots.released``); then, with ``SENECA_TIMELINE`` set, **made**: the time
   recorded (``timeline.Timeline``);
9. **ahead**: with workers, the stages 7 and 8 run one batch ahead in a thread
   (``_ahead.made_ahead``);
10. **lost worker**: with workers, a worker's connection broken while it handed a batch over
    raised as the worker's death, in the loop's thread (``_workers.reported``);
11. **device hand-over**: the loop's stream waits for the copy (``_device.handed_over``);
12. **track**: with ODS, the batch counted for ``state_dict`` (``ods.progress.EpochProgress``);
13. **budget tick**: a look at the dataset's share of the node and, with ``split="auto"``, at
    the plan, between batches and at the end (``_budgets.Budgets.tick``, ``AutoPlanner.tick``);
14. **stats**: progress lines and the epoch's summary (``_stats.summarised``);
15. **handed**: with ``SENECA_TIMELINE`` set, the times the loop takes each batch and asks for
    the next recorded, and the iteration's times written (``timeline.Timeline``).

A loader that reads its dataset uncached runs only the device stages and, with workers, the
worker error and lost worker stages.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from seneca import defaults
from seneca._torch_internals import worker_errors
from seneca.loader._ahead import closing, made_ahead
from seneca.loader._device import DeviceFeed, handed_over, staged
from seneca.loader._slots import released
from seneca.loader._stats import Counters, summarised
from seneca.loader._workers import reported
from seneca.loader.timeline import Timeline
from seneca.pipeline.batch_tail import BatchTail, finished_batches

log = logging.getLogger("seneca")

if TYPE_CHECKING:
    from ods.sampler import OdsBatchSampler
    from seneca.loader._budgets import Budgets
    from seneca.loader._tickets import TicketSampler

__all__ = ["WORKER_STAGES", "BatchPath", "Stage"]

#: The stages 1-6 above as a worker runs them: each stage's name and the function (module and
#: qualified name) whose call starts it in the worker, in order. ``tests/loader/test_batch_path.py``
#: traces a worker and checks that each batch calls them in this order.
WORKER_STAGES: tuple[tuple[str, str], ...] = (
    ("decide", "seneca.loader._desk:DeskClient.ask"),
    ("slot", "seneca.loader._slots:SlotMaps.tensor"),
    ("read", "seneca.loader._read:Reader.read"),
    ("make", "seneca.loader._make:Maker.samples"),
    ("admit", "seneca.loader._admit:Admitter.admit"),
    ("collate", "seneca.loader._rows:collate_part"),
)

#: what an exhausted iterator gives ``next`` (no batch is it)
_END = object()

#: A stage: the batches of the stage before, and what it makes of them.
Stage = Callable[[Iterator[Any]], Iterator[Any]]


@dataclass
class BatchPath:
    """What a loader runs on each batch in its own process (the stages 7-15 above).

    ``cached``: the loader reads through the cache (else only the device and lost worker
    stages run);
    ``feed``: the device feed (None: batches stay on the CPU); ``tail``: the batch tail run in
    this process (None: none, or the feed runs it); ``pin``: pin batches (``pin_memory``);
    ``ahead``: make batches a batch ahead in a thread (with workers); ``sampler``,
    ``tickets``: ODS's sampler and the ticket sampler, when used; ``budgets``: the budgets in
    force (and the plan); ``every``: seconds between progress lines (None: none)."""

    job: str
    counters: Counters
    cached: bool = True
    feed: DeviceFeed | None = None
    tail: BatchTail | None = None
    pin: bool = False
    ahead: bool = False
    sampler: OdsBatchSampler | None = None
    tickets: TicketSampler | None = None
    budgets: Budgets | None = None
    every: float | None = None
    #: without workers: takes the dataset's transform where it changed since the last batch
    #: (None: with workers, whose transform is the one they started with)
    follow: Callable[[], None] | None = None
    #: the batches' stage times (with the ticket sampler; None: not recorded)
    timeline: Timeline | None = None
    #: iterations started (an epoch each; named in the summaries of loaders without ODS)
    iterations: int = 0
    _thread: Any = field(default=None, init=False, repr=False)

    def stages(
        self, before: dict[str, int], token: object | None = None, length: int | None = None
    ) -> list[tuple[str, Stage]]:
        """The stages of one iteration, in order: (name, stage). ``before``: the counters at
        its start (for the summary); ``token``: the iteration's :class:`EpochProgress` token
        (with ODS); ``length``: its batches, when known (``len(loader)``)."""
        out: list[tuple[str, Stage]] = []
        follow = self.follow
        if self.cached and follow is not None:
            out.append(("follow", lambda it: _followed(it, follow)))
        if self.ahead:
            out.append(("worker error", worker_errors))
        if self.cached and self.tickets is not None:
            out.append(("merge", self.tickets.merged))
        feed, cuda = self.feed, None
        if feed is not None:
            out.append(("device copy", lambda it: staged(it, feed)))
            cuda = feed.device.index if feed.cuda else None
        else:
            pin = self.pin and torch.cuda.is_available()
            if self.tail is not None:
                tail = self.tail
                out.append(("tail", lambda it: finished_batches(it, tail, pin)))
            cuda = torch.cuda.current_device() if pin else None
        slots = self.tickets.slots if self.cached and self.tickets is not None else None
        if slots is not None:
            out.append(("release", lambda it: released(it, slots)))
        timeline = self.timeline if self.cached and self.tickets is not None else None
        if timeline is not None:
            out.append(("made", lambda it: timeline.passed(it, "made")))
        if self.cached and self.ahead:
            out.append(("ahead", lambda it: self._made_ahead(it, cuda)))
        if self.ahead:
            out.append(("lost worker", reported))
        if feed is not None:
            out.append(("device hand-over", lambda it: handed_over(it, feed)))
        if not self.cached:
            return out
        sampler, budgets = self.sampler, self.budgets
        if sampler is not None and token is not None:
            progress = sampler.progress
            out.append(("track", lambda it: progress.tracked(it, token, lambda: sampler.current)))
        if budgets is not None:
            out.append(("budget tick", lambda it: _ticked(it, budgets)))
        out.append(("stats", lambda it: self._summarised(it, before, length)))
        if timeline is not None:
            out.append(("handed", timeline.handed))
        return out

    def run(
        self,
        it: Iterator[Any],
        before: dict[str, int],
        token: object | None = None,
        length: int | None = None,
    ) -> Any:
        """``it`` (DataLoader's batches) through every stage of :meth:`stages` (named in a
        line logged at DEBUG)."""
        self.iterations += 1
        stages = self.stages(before, token, length)
        log.debug("job %s: batch stages: %s", self.job, ", ".join(name for name, _ in stages))
        for _, stage in stages:
            it = stage(it)
        return it

    def stop(self) -> None:
        """Stop the thread making the latest iteration's batches, if any."""
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.close()

    def _made_ahead(self, it: Iterator[Any], cuda: int | None) -> Iterator[Any]:
        self._thread = made_ahead(it, defaults.LOADER_THREADS, cuda)
        return self._thread

    def _summarised(
        self, it: Iterator[Any], before: dict[str, int], length: int | None
    ) -> Iterator[Any]:
        iteration = self.iterations - 1
        return summarised(
            it, self.job, self.counters, self.sampler, before, self.every, iteration, length
        )


def _followed(it: Iterator[Any], follow: Callable[[], None]) -> Iterator[Any]:
    """The batches of ``it``, ``follow`` called before each but the first (the iteration's
    start followed the transform already)."""
    with closing(it):
        batch = next(it, _END)
        while batch is not _END:
            yield batch
            follow()  # the loop may have set the transform while it had the batch
            batch = next(it, _END)


def _ticked(it: Iterator[Any], budgets: Budgets) -> Iterator[Any]:
    """The batches of ``it``, ``budgets`` ticked before each (at most every
    ``defaults.AUTO_TICK`` seconds) and once more at the end, whatever the time (a short epoch
    measured enough since the last look)."""
    with closing(it):
        for batch in it:
            budgets.tick()
            yield batch
    budgets.tick(force=True)
