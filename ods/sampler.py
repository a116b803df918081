"""OdsBatchSampler: ODS decisions as a batch sampler (torch-free; DataLoader accepts it).

Each batch is a list of :class:`Pick` (sample index, decided tier, pin bucket), so the fetch,
in the loader process or a worker, knows where to read each sample and what to release.
Iterating starts the sampler's epoch in Redis (idempotent, so ranks of one job that share the
job name share the epoch) and asks for batches until the job's epoch is served.

Every iteration runs a new epoch, as a DataLoader's does: an iteration stopped early (a
``break``, a peek with ``next(iter(...))``) leaves its epoch behind, and the next one starts
the following epoch with every sample. :meth:`OdsBatchSampler.set_epoch` picks the epoch of the
next iteration when this sampler has not run it yet (DistributedSampler's contract: ranks that
set the same epoch share it); :meth:`OdsBatchSampler.resume` continues one, for a restored
checkpoint. Its :meth:`OdsBatchSampler.state_dict` is the samples the training loop took this
epoch (the batches its :class:`ods.progress.EpochProgress` counted); a new sampler of the same
job continues the epoch from it with :meth:`OdsBatchSampler.load_state_dict`.

A job's name is one run's at a time (``ods.names``): a job of one rank whose first iteration
finds the name's lease live in another process waits for it to run out, and raises
``JobInUseError`` if another run renews it meanwhile.

Data-parallel ranks (``num_replicas > 1``) follow DistributedSampler's contract: every rank
yields the same number of batches, ``ceil(n / num_replicas)`` samples (``floor`` with
``drop_last``); the ranks draw from one shared epoch, so together they get each sample once,
and a rank that finds the epoch drained pads with random samples (at most
``num_replicas - 1`` repeats per epoch, as DistributedSampler pads).

If Redis stops answering, the epoch does not stop: the sampler warns once and serves, from
storage and in random order, the samples it has not yielded this epoch (it keeps a local bitmap
of them; ranks of one job then no longer coordinate, so they may repeat each other's samples).
"""

from __future__ import annotations

import logging
import math
import random
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ods import defaults, routing
from ods.bitmaps import set_bit, test_bit
from ods.decision import Decision, Pick
from ods.names import check_name_free
from ods.outbox import Call
from ods.progress import EpochProgress
from ods.store_api import Store
from seneca_base.backoff import Backoff
from seneca_base.errors import CacheUnavailableError, ConfigError, UnknownJobError

__all__ = ["Decided", "OdsBatchSampler", "OdsSampler", "Ranks"]

_log = logging.getLogger("seneca.ods")


class Ranks(Protocol):
    """The data-parallel ranks of a job, as a resume needs them (a collective each)."""

    def union(self, bitmap: bytes) -> bytes:
        """The bitwise OR of every rank's ``bitmap`` (equal lengths)."""
        ...

    def barrier(self) -> None:
        """Return once every rank has called it."""
        ...


class Decided(list):
    """A batch of :class:`Pick` as the sampler yields it, and :attr:`record`, its sample
    indices as the sampler counts them for :meth:`OdsBatchSampler.state_dict`."""

    record: array


class _BackingOff(CacheUnavailableError):
    """The job backs off the cache: no call was made."""


@dataclass
class _Run:
    """One epoch's iteration: what is decided and not yet yielded, and how to decide next."""

    epoch: int
    left: int | None  # samples this rank still yields (None: until the epoch is drained)
    ahead: list[Pick] = field(default_factory=list)
    drained: bool = False
    span: int = 1  # batches the next decision asks for
    prefetch: tuple[Call, int] | None = None  # a decision posted early, and its ask
    failed: Exception | None = None  # collecting it ahead failed: raised at the next batch


class OdsBatchSampler:
    """Batches of :class:`Pick` for ``job`` from ``store``; see the module docstring.

    Args:
        store: the dataset's store (:class:`ods.store_api.Store`: one store or shards).
        job: job name; ranks of one data-parallel job use the same name.
        batch_size: samples per batch (the last batch of an epoch may be smaller).
        drop_last: skip a last batch smaller than ``batch_size`` (its samples count as served).
        indices: the samples this job trains on (default: all).
        substitute: replace misses by cached samples (ODS); False keeps the random order.
        num_replicas, rank: data-parallel ranks of the job (see the module docstring).
        seeds: called at the start of every epoch for the seed of its random choices (None:
            the store's own random stream).
        lookahead: batches decided per call to Redis while the cache covers the job (a
            decision all hits without substitutions): one round trip and one script run serve
            several batches (at most ``store.decide_chunk`` samples a call), whose hits stay
            pinned until fetched. Otherwise it decides one batch at a time, so that misses can
            be replaced by what other jobs cache meanwhile.
        on_start: called at each epoch's start, once the job is registered and before its
            first batch is decided (a caller that plans the cache looks at the jobs there).
        strict: an unreachable cache is an error (CacheUnavailableError), not read around.
        backoff: the process's back-off of this cache, shared with its fetches (None: the
            sampler backs off on its own).
        ranks: the job's ranks (:class:`Ranks`), which :meth:`load_state_dict` needs with
            ``num_replicas > 1``.
        held_here: whether another loader of this process holds a job's lease: a new run
            under its name takes the name over (a sweep in one script that keeps its old
            loaders) rather than waiting for that lease (None: none does).
        foreign: the sampler belongs to a loader that announces each of its iterations
            (:meth:`expect`): an iteration it did not announce (another DataLoader made from
            the loader's attributes) raises ConfigError with this message, before it decides
            anything (None: any caller may iterate it).
    """

    def __init__(
        self,
        store: Store,
        job: str,
        batch_size: int,
        drop_last: bool = False,
        indices: Sequence[int] | None = None,
        substitute: bool = True,
        num_replicas: int = 1,
        rank: int = 0,
        seeds: Callable[[], int] | None = None,
        lookahead: int = defaults.LOOKAHEAD,
        on_start: Callable[[], None] | None = None,
        strict: bool = False,
        backoff: Backoff | None = None,
        ranks: Ranks | None = None,
        held_here: Callable[[str], bool] | None = None,
        foreign: str | None = None,
    ) -> None:
        if isinstance(lookahead, bool) or not isinstance(lookahead, int) or lookahead <= 0:
            raise ConfigError(f"lookahead: expected a positive integer, got {lookahead!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ConfigError(f"batch_size: expected a positive integer, got {batch_size!r}")
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ConfigError(f"rank {rank!r} of num_replicas {num_replicas!r} is out of range")
        self.store = store
        self.job = job
        self.batch_size = batch_size
        self.drop_last = bool(drop_last)
        self.indices = None if indices is None else sorted({int(i) for i in indices})
        self.substitute = substitute
        self.num_replicas = num_replicas
        self.rank = rank
        self.lookahead = lookahead
        self.seeds = seeds
        self.on_start = on_start
        self.epoch = 0  # the epoch the next iteration runs, unless it ran already (see next_epoch)
        self._last: int | None = None  # the latest epoch an iteration of this sampler ran
        self._resuming = False
        self.substitutions = 0
        #: per epoch, the batches (sample indices, 4 bytes each) this sampler has yielded
        self.yielded: dict[int, list[array]] = {}
        self._joined = False
        self._warned = False
        self.strict = strict
        self.backoff = backoff
        self.ranks = ranks
        self.held_here = held_here
        self.foreign = foreign
        self._expected = 0  # iterations the owner announced and that have not begun (expect)
        self._announced: int | None = None  # the epoch the latest announced iteration runs
        #: the epoch and batches the training loop took (what :meth:`state_dict` saves)
        self.progress = EpochProgress()
        #: (epoch, samples this rank consumed before a resume): its share of that epoch shrinks
        self.resumed: tuple[int, int] | None = None
        #: (epoch, bitmap): the samples of that epoch consumed before this sampler resumed it
        self._restored: tuple[int, bytes] | None = None
        self._run_agreed = False  # start_run has run (the ranks agreed that a run is new)
        self._run: _Run | None = None  # the latest iteration's, while it runs

    def join(self) -> None:
        """Register the job with the store (once; again after its lease lapsed)."""
        if not self._joined:
            self.store.join(self.job, self.indices)
            self._joined = True

    def start_run(self) -> None:
        """Before a data-parallel job's first iteration in this sampler, unless it continues
        a run (:meth:`load_state_dict` or :meth:`resume` first): rank 0 clears what an
        earlier run under the job's name left in the cache, and every rank waits until it
        has (a collective: every rank calls it, in the thread of the job's other
        collectives). Without it the ranks would find that run's epochs served. A job of one
        rank needs no call: its first epoch starts afresh by itself."""
        alone = self.num_replicas == 1 or self.ranks is None
        if alone or self._run_agreed or not self._first_run():
            return
        self._run_agreed = True  # once: a second call before the first epoch starts is a no-op
        if self.rank == 0:
            self._start_afresh()
        self.ranks.barrier()

    def _first_run(self) -> bool:
        """Whether no iteration has started in this sampler and none is continued."""
        return self._last is None and not self._resuming and self._restored is None

    def _start_afresh(self) -> None:
        """Before a job's first epoch in this sampler (all ranks': see :meth:`start_run`):
        whatever an earlier run under the job's name left in the cache goes (its epochs
        would count as served, and this run's loops would get fewer samples or none). A run
        that continues one restores it with :meth:`load_state_dict` first."""
        if self.num_replicas == 1:  # ranks share the name; a job of one rank is one run
            check_name_free(self.store, self.job, self.held_here)
        epoch, _ = self.store.join(self.job, self.indices)
        self._joined = True
        if epoch >= 0:
            _log.info(
                "job %s: an earlier run under this name reached epoch %d in the cache; this "
                "run starts afresh (load_state_dict continues a run)",
                self.job,
                epoch,
            )
            self.store.leave(self.job)
            self._joined = False

    def _members(self) -> Sequence[int]:
        return range(self.store.samples) if self.indices is None else self.indices

    def _quota(self) -> int | None:
        """Samples this rank yields per epoch; None for a single replica (until drained)."""
        if self.num_replicas == 1:
            return None
        n = len(self._members())
        return n // self.num_replicas if self.drop_last else math.ceil(n / self.num_replicas)

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration runs, unless an iteration of this sampler ran it
        already (then the next iteration runs a new epoch, after the latest it ran)."""
        self.epoch = int(epoch)
        self._resuming = False

    def resume(self, epoch: int) -> None:
        """The next iteration continues ``epoch`` (a restored checkpoint), run before or not."""
        self.epoch = int(epoch)
        self._resuming = True

    def next_epoch(self) -> int:
        """The epoch the next iteration runs."""
        if self._resuming or self._last is None or self.epoch > self._last:
            return self.epoch
        return self._last + 1

    def samples_per_epoch(self) -> int:
        """Samples this rank gets per epoch (before ``drop_last``)."""
        quota = self._quota()
        return len(self._members()) if quota is None else quota

    def __len__(self) -> int:
        n = self.samples_per_epoch()
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def consumed_bitmap(self, epoch: int, batches: int) -> bytes:
        """Redis-order bitmap of the samples in the first ``batches`` batches of ``epoch``."""
        bits = bytearray((self.store.samples + 7) // 8)
        for batch in self.yielded.get(epoch, [])[:batches]:
            for i in batch:
                set_bit(bits, i)
        return bytes(bits)

    def state_dict(self) -> dict[str, Any]:
        """Where the training loop is (torchdata StatefulDataLoader's convention): its
        epoch, the batches it took in it (:attr:`progress`), and ``consumed``, a Redis-order
        bitmap of their samples and of those consumed before a resume of that epoch."""
        progress = self.progress.state_dict() or {"epoch": self.next_epoch(), "batches": 0}
        epoch = progress["epoch"]
        consumed = self.consumed_bitmap(epoch, progress["batches"])
        if self._restored is not None and self._restored[0] == epoch:
            consumed = bytes(a | b for a, b in zip(consumed, self._restored[1], strict=True))
        state = {**progress, "consumed": consumed}
        if self.num_replicas > 1:  # the state names its rank; the cache keeps every rank's
            state.update(job=self.job, rank=self.rank)
            self._keep_place(epoch, progress["batches"], consumed)
        return state

    def _keep_place(self, epoch: int, batches: int, consumed: bytes) -> None:
        """Keep this rank's ``consumed`` samples of ``epoch`` after ``batches`` batches in the
        cache (``Keys.place``): a checkpoint that holds another rank's state (Lightning writes
        rank 0's) restores this rank's from there."""
        key = self.store.keys.place(self.job, epoch, batches)
        try:
            self.store.client.hset(key, str(self.rank), consumed)
            self.store.client.expire(key, defaults.PLACE_TTL)
        except routing.CACHE_FAILURES as err:
            _log.warning(
                "rank %d's place in epoch %d not kept in the cache: %s", self.rank, epoch, err
            )

    def _own_place(self, state: Mapping[str, Any], epoch: int, consumed: bytes) -> bytes:
        """This rank's consumed samples of ``epoch``: ``consumed``, from ``state``, when the
        state is this rank's (or names no rank); else the place this rank kept when that
        state was saved (the same batch count: ranks step together), read from the cache."""
        saved = state.get("rank")
        if self.num_replicas == 1 or saved is None or int(saved) == self.rank:
            return consumed
        key = self.store.keys.place(str(state.get("job")), epoch, int(state.get("batches", 0)))
        try:
            mine = self.store.client.hget(key, str(self.rank))
        except routing.CACHE_FAILURES as err:
            mine, why = None, f"the cache did not answer ({err})"
        else:
            why = "the cache no longer holds it"
        if mine is not None and len(mine) == len(consumed):
            return bytes(mine)
        _log.warning(
            "rank %d resumes from rank %s's state, and its own place in epoch %d is unknown "
            "(%s): the samples it consumed before may come again this epoch",
            self.rank, saved, epoch, why,
        )  # fmt: skip
        return consumed

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from :meth:`state_dict` (in this or a new process, same job): the next
        iteration continues that epoch with every sample not yet consumed, exactly once.

        With several ranks every rank loads its own state (a collective call): the ranks'
        consumed samples are united, and each rank's share of the epoch shrinks by what it
        consumed, as DistributedSampler's would."""
        try:
            epoch, consumed = int(state["epoch"]), bytes(state["consumed"])
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"load_state_dict: not a SenecaLoader state: {e}") from None
        if len(consumed) not in (0, (self.store.samples + 7) // 8):
            raise ConfigError("load_state_dict: the state is of a dataset of another size")
        if self.num_replicas > 1 and self.ranks is None:
            raise ConfigError("load_state_dict: a sampler of several ranks needs ``ranks=``")
        self.resume(epoch)
        self.progress.load_state_dict(state)
        if not consumed:
            return
        consumed = self._own_place(state, epoch, consumed)
        mine = sum(bin(b).count("1") for b in consumed)
        union = consumed if self.ranks is None else self.ranks.union(consumed)
        self.join()
        if self.rank == 0:
            self.store.restore(self.job, epoch, union)
        if self.ranks is not None:
            self.ranks.barrier()  # no rank decides before the epoch is restored
            self.resumed = (epoch, mine)
        self._restored = (epoch, consumed)

    def _fallback(self, epoch: int, left: int | None) -> Iterator[list[Pick]]:
        """The samples of ``epoch`` this sampler has not yielded, from storage in random order
        (``left``: a rank's share still due). Returns True, having stopped early, when a retry
        of the backed-off cache is due: the epoch goes on with decisions."""
        done = self.consumed_bitmap(epoch, len(self.yielded.get(epoch, [])))
        rest = [i for i in self._members() if not test_bit(done, i)]
        random.shuffle(rest)
        if left is not None:
            rest = (rest + random.choices(list(self._members()), k=left))[:left]
        for k in range(0, len(rest), self.batch_size):
            if self.backoff is not None and not self.backoff.down():
                return True
            batch = rest[k : k + self.batch_size]
            if self.drop_last and len(batch) < self.batch_size:
                break
            yield self._record(epoch, [Pick(i, None, 0) for i in batch])
        return False

    def _record(self, epoch: int, picks: list[Pick]) -> Decided:
        batch = Decided(picks)
        batch.record = array("I", [p.index for p in picks])
        self.yielded.setdefault(epoch, []).append(batch.record)
        return batch

    def swapped(self, batch: Sequence[Pick], swaps: Sequence[tuple[int, int]]) -> None:
        """Note that ``batch`` (one this sampler yielded) was served with sample ``index`` at
        ``position`` for each ``(position, index)`` of ``swaps``: misses its maker swapped
        for copies cached after the batch was decided (``OdsStore.swap``)."""
        record = getattr(batch, "record", None)
        if record is None:
            raise ValueError("swapped: not a batch this sampler yielded")
        for position, index in swaps:
            record[position] = index

    @property
    def swaps_late(self) -> bool:
        """Whether a batch's misses may be swapped late for copies cached after it was
        decided: with substitution, and one rank (ranks that finish their shares at different
        times could leave a sample put back unserved)."""
        return self.substitute and self.num_replicas == 1

    def _release(self, picks: Sequence[Pick]) -> None:
        """Unpin the hits of ``picks`` that will not be fetched."""
        self.store.release(self.job, picks)

    def _ask(self, span: int, ahead: int, left: int | None, keep: int | None = None) -> int:
        """Samples to ask for: ``span`` batches less what is ``ahead`` (or the ``keep`` of it
        still unserved when the answer is used), within a rank's share (whole batches with
        drop_last)."""
        ask = self.batch_size * span - (ahead if keep is None else keep)
        if left is not None:
            limit = left - left % self.batch_size if self.drop_last else left
            ask = min(ask, limit - ahead)
        return ask

    def _collect(self, epoch: int, call: Call, ask: int, held: Sequence[Pick] = ()) -> Decision:
        """The decision of a prefetch (decided again when its reply is an error)."""
        try:
            decision = self.store.collect(call)
        except UnknownJobError:
            # a shard forgot the job (flushed, restarted) while the decision was made up in
            # other shards after the posted one answered: what that one marked served is not
            # yielded, so the epoch is restored from what was before deciding again
            self._rejoin(epoch, held)
            decision = None
        if decision is None:  # functions missing, or the job forgotten: decide now
            return self._decide(epoch, ask, held)
        return decision

    def _drop_prefetch(self, epoch: int, prefetch: tuple[Call, int] | None) -> None:
        """Unpin the hits of a prefetched decision that will not be served."""
        if prefetch is not None and not prefetch[0].cancel():
            d = self._collect(epoch, *prefetch)
            self.store.release(self.job, d)

    def _decide(self, epoch: int, want: int, held: Sequence[Pick] = ()) -> Decision:
        for _ in range(defaults.CALL_RETRIES):
            try:
                return self.store.decide(self.job, want, self.substitute, epoch)
            except UnknownJobError:
                self._rejoin(epoch, held)
        return self.store.decide(self.job, want, self.substitute, epoch)

    def _rejoin(self, epoch: int, held: Sequence[Pick] = ()) -> None:
        """The server forgot the job (it restarted empty, was flushed, failed over to an empty
        replica, or the job left): join again and restore ``epoch`` without the samples this
        sampler has yielded in it or ``held`` (decided, not yet yielded), so it stays exactly
        once. Ranks of one job each restore their own record: after such a loss they may
        repeat each other's samples in that epoch."""
        self._joined = False
        self.join()
        bits = bytearray(self.consumed_bitmap(epoch, len(self.yielded.get(epoch, []))))
        for p in held:
            set_bit(bits, p.index)
        self.store.restore(self.job, epoch, bytes(bits))

    def _refill(self, run: _Run, span: int | None = None) -> None:
        """Decide more of the epoch into ``run.ahead``: the posted decision, if any, else
        ``span`` batches (default: the run's) less what is ahead."""
        self._check_backoff()
        if run.prefetch is not None:
            (call, ask), run.prefetch = run.prefetch, None
            d = self._collect(run.epoch, call, ask, run.ahead)
        else:
            ask = self._ask(run.span if span is None else span, len(run.ahead), run.left)
            d = self._decide(run.epoch, ask, run.ahead)
        if self.backoff is not None:
            self.backoff.succeeded()
        run.ahead += d.picks()
        self.substitutions += d.substitutions
        run.drained = len(d.indices) < ask
        covered = d.indices and d.hits == len(d.indices) and not d.substitutions
        run.span = self.lookahead if covered else 1

    def _check_backoff(self) -> None:
        """Raise CacheUnavailableError while the job backs off the cache (one of its callers
        found it failing): no call is made, the epoch goes on from storage."""
        if self.backoff is not None and self.backoff.down():
            raise _BackingOff(f"backing off the cache {self.backoff.cache}")

    def _failed(self, err: Exception) -> None:
        """A call to the cache failed with ``err`` (not a back-off): the job backs off."""
        if self.strict:
            raise CacheUnavailableError(f"ODS cache unreachable ({type(err).__name__}: {err})")
        if self.backoff is not None:
            self.backoff.failed(err)  # warns once per outage, for the whole job
        elif not self._warned:
            self._warned = True
            _log.warning(
                "ODS cache unreachable (%s: %s); finishing the epoch from storage in random order",
                type(err).__name__,
                str(err)[:120],
            )

    def _post_next(self, run: _Run) -> None:
        """While the cache covers the job, post the decision after the batches in hand a batch
        early: it is sent after this batch's fetch, so that the server runs it while the loader
        works (its reply is read a batch later)."""
        near = len(run.ahead) < 2 * self.batch_size
        if run.span > 1 and not run.drained and run.prefetch is None and near:
            keep = max(0, len(run.ahead) - self.batch_size)
            # one call's worth: a posted decision is sent in one write
            ask = min(self._ask(run.span, len(run.ahead), run.left, keep), self.store.decide_chunk)
            if ask > 0 and (run.left is None or run.left > len(run.ahead)):
                call = self.store.decide(self.job, ask, self.substitute, run.epoch, later=True)
                run.prefetch = (call, ask)

    def _batches(self, run: _Run) -> Iterator[list[Pick]]:
        """The epoch's batches, from decisions."""
        while run.left is None or run.left > 0:
            if run.failed is not None:  # (see upcoming)
                err, run.failed = run.failed, None
                raise err
            want = self.batch_size if run.left is None else min(self.batch_size, run.left)
            if self.drop_last and want < self.batch_size:
                break
            if len(run.ahead) < want and not run.drained:
                self._refill(run)
            while len(run.ahead) < want and not run.drained:  # a posted decision fell short
                self._refill(run, span=1)
            picks, run.ahead = run.ahead[:want], run.ahead[want:]
            if run.left is None:
                if not picks:
                    break
                if self.drop_last and len(picks) < self.batch_size:
                    self._release(picks)
                    break
            else:  # a rank's fixed share: pad when the other ranks drained the epoch
                members = self._members()
                picks += [Pick(random.choice(members), None, 0) for _ in range(want - len(picks))]
                run.left -= want
            self._post_next(run)
            yield self._record(run.epoch, picks)

    @property
    def current(self) -> int | None:
        """The epoch of the latest iteration (None before the first)."""
        return self._last

    def expect(self, epoch: int | None = None) -> None:
        """The owning loader is about to iterate this sampler (see ``foreign``), to run
        ``epoch`` (what :meth:`next_epoch` says as its iteration begins; None: what it says
        when the first batch is asked for)."""
        self._expected += 1
        self._announced = epoch

    def check_owned(self) -> int | None:
        """At an iteration's first batch: ConfigError (``foreign``) unless the owning loader
        announced it (:meth:`expect`); the announcement is used up. (Announced iterations
        count: a loader's iterators may begin in another order than they were made.) Returns
        the epoch announced last (None: none)."""
        if self.foreign is None:
            return None
        if self._expected == 0:
            raise ConfigError(self.foreign)
        self._expected -= 1
        return self._announced

    def __iter__(self) -> Iterator[Decided]:
        """The batches of a new epoch (see the module docstring): the one the owning loader
        announced, else the one due when the first batch is asked for (DataLoader makes an
        iterator it never uses besides each one it uses)."""
        yield from self.batches(self.check_owned())

    def batches(self, epoch: int | None = None) -> Iterator[Decided]:
        """:meth:`__iter__` for a caller that has checked the iteration is the owner's.
        ``epoch``: the epoch to run, taken by the caller when its iteration began (a batch
        decided later in another thread must not see a ``set_epoch`` made meanwhile: ranks
        would run different epochs); None: :meth:`next_epoch` when the first batch is asked
        for."""
        if epoch is None or (not self._resuming and self._last is not None and epoch <= self._last):
            epoch = self.next_epoch()  # (an epoch announced twice runs once: then the next)
        # this sampler's first epoch, not a continued one, of a job of one rank
        fresh = self._first_run() and self.num_replicas == 1
        # (a set_epoch made since the iteration began stays, for the next one)
        self._last, self._resuming, self.epoch = epoch, False, max(self.epoch, epoch + 1)
        if self.seeds is not None:
            self.store.reseed(self.seeds())
        self.yielded = {e: b for e, b in self.yielded.items() if e >= epoch - 1}
        self.yielded[epoch] = []
        left = self._quota()
        if left is not None and self.resumed is not None and self.resumed[0] == epoch:
            left = max(0, left - self.resumed[1])
        back = False  # the cache answers again after a fallback within this epoch
        while True:
            done = sum(len(b) for b in self.yielded[epoch])
            run = self._run = _Run(epoch, None if left is None else left - done)
            try:
                self._check_backoff()
                if back:  # the epoch goes on from what this sampler has yielded
                    self._rejoin(epoch)
                else:
                    if fresh:
                        fresh = False
                        self._start_afresh()
                    self.join()
                    try:
                        self.store.start_epoch(self.job, epoch)
                    except UnknownJobError:  # forgotten by the server since it joined
                        self._rejoin(epoch)
                    if self.on_start is not None:
                        self.on_start()
                yield from self._batches(run)
                self._drop_prefetch(epoch, run.prefetch)
                self._release(run.ahead)
                self.store.outbox.settle()
                return
            except GeneratorExit:  # the loop stopped early: a prefetch not sent yet is dropped
                if run.prefetch is not None:
                    run.prefetch[0].cancel()
                raise
            except routing.OUTAGES as err:
                if run.prefetch is not None:
                    run.prefetch[0].cancel()
                if not isinstance(err, _BackingOff):
                    self._failed(err)
                self._joined, self._run = False, None
                done = sum(len(b) for b in self.yielded[epoch])
                back = yield from self._fallback(epoch, None if left is None else left - done)
                if not back:
                    return
            finally:
                if self._run is run:
                    self._run = None

    def upcoming(self) -> list[Pick] | None:
        """The latest iteration's next batch when it is decided already, else None: what a
        fetch may read ahead while the loader works on the batch before. A decision posted
        early and sent already is collected for it (its reply was made while the loader
        worked), so the batch after the last one in hand can be read ahead too. If collecting
        it fails, the error is raised where the next batch is asked for, as it would have been
        without this call (the epoch then goes on from storage, every sample once)."""
        run = self._run
        if run is None:
            return None
        want = self.batch_size if run.left is None else min(self.batch_size, run.left)
        if want <= 0 or (self.drop_last and want < self.batch_size):
            return None
        if len(run.ahead) < want and run.prefetch and run.prefetch[0].sent and not run.failed:
            try:
                self._refill(run)
            except Exception as err:  # raised where the batch is asked for, as it would be
                run.failed = err  # there: the epoch goes on as after any failed decision
                return None
        return run.ahead[:want] if len(run.ahead) >= want else None


class OdsSampler:
    """The samples of an :class:`OdsBatchSampler`'s batches one by one: what a loader whose
    batches come from ODS shows as its ``sampler`` (iterating it runs an epoch)."""

    def __init__(self, batch_sampler: OdsBatchSampler) -> None:
        self.batch_sampler = batch_sampler

    def __iter__(self) -> Iterator[int]:
        for batch in self.batch_sampler.batches():  # asked of the sampler itself, as DataLoader's
            for pick in batch:
                yield pick.index

    def __len__(self) -> int:
        return self.batch_sampler.samples_per_epoch()

    def set_epoch(self, epoch: int) -> None:
        """See :meth:`OdsBatchSampler.set_epoch`."""
        self.batch_sampler.set_epoch(epoch)
