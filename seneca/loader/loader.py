"""SenecaLoader: torch's DataLoader over a shared Redis cache of encoded, decoded and augmented
samples."""

from __future__ import annotations

import functools
import logging
import os
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from torch.utils.data import DataLoader, RandomSampler, SequentialSampler

from ods.sampler import OdsBatchSampler
from ods.store_api import Store
from seneca._torch_internals import ReadThroughLoader, drop_iterator
from seneca.loader._batch_path import BatchPath
from seneca.loader._dataset import CachedDataset
from seneca.loader._device import DeviceFeed, pin_host, resolve_device
from seneca.loader._lease import JobLease, keeper
from seneca.loader._link import job_backoff
from seneca.loader._options import (
    resolve_batch_tail,
    resolve_dataset_version,
    resolve_job,
    resolve_ods,
    resolve_progress,
    resolve_strict,
)
from seneca.loader._rows import collate_part, collate_rows
from seneca.loader._setup import (
    auto_planner,
    budgets_for,
    cache_options,
    cache_store,
    connect,
    ods_members,
    ods_sampler,
    seeds_from,
    warn_unread,
)
from seneca.loader._shown import shown_sampler
from seneca.loader._slots import BatchSlots, slot_count
from seneca.loader._stats import Counters, job_stats
from seneca.loader._tickets import TicketSampler
from seneca.loader.source import NotCacheable, Resolved, resolve
from seneca.loader.timeline import from_environment as timeline_from_environment
from seneca.pipeline.batch_tail import BatchTail
from seneca.pipeline.malloc import tune_malloc
from seneca_base.errors import ConfigError
from seneca_base.split import Split

if TYPE_CHECKING:
    from seneca._autoplan import AutoPlanner
    from seneca.loader._budgets import Budgets

__all__ = ["SenecaLoader"]

log = logging.getLogger("seneca")


_T_co = TypeVar("_T_co", covariant=True)


class SenecaLoader(ReadThroughLoader[_T_co]):
    """A drop-in replacement for :class:`torch.utils.data.DataLoader` that caches samples.

    Positional and keyword arguments are DataLoader's (same names, defaults, validation and
    errors, checked first). Datasets Seneca can cache (``seneca.loader.source``: ImageFolder
    and DatasetFolder, datasets implementing ``seneca.CacheableDataset``, Subsets of them) are
    read through the cache; any other dataset is read exactly as DataLoader reads it, with one
    warning saying why (:attr:`not_cached`). ``dataset``, ``sampler`` and ``batch_sampler``
    show the user's dataset and what runs. Every iteration runs a new epoch with every sample.
    Seneca's own options are keyword-only:

    Args:
        cache: ``redis://[user:password@]host:port``, ``rediss://...`` or ``unix:///path.sock``;
            None (default) starts or joins the embedded cache shared by this machine's jobs.
        cache_size: bytes the dataset's tiers may fill at most ("2GB", "512MiB" or an int):
            the datasets on one cache node share its memory (``seneca._cache.shares``), and
            :attr:`cache_size` is this dataset's share. Default: whatever the node gives for a
            URL (more than fits its ``maxmemory`` warns), ``defaults.CACHE_SIZE`` for the
            embedded cache (which grows to the largest asked).
        split: fractions of ``cache_size`` for the encoded, decoded and augmented tiers, as a
            mapping or an (e, d, a) tuple summing to 1; or ``"auto"`` (the default): the loader
            plans the split with MDP from what it measures, shares one plan with every loader
            of the dataset and re-plans as rates and live jobs move (``docs/autoplan.md``).
        plan: a plan from ``mdp plan SPEC --out plan.json`` (its path, or the loaded JSON):
            its split, and its cache size when ``cache_size`` is not given. Not with ``split``.
        spec: with ``split="auto"``, a cluster spec (``mdp`` TOML) for what the loader cannot
            measure (GPU rate, NIC, PCIe, cluster shape, model); default
            ``defaults.PROFILE_DEFAULTS``.
        job: name of the training job; loaders with the same name count as one job (ranks of
            one data-parallel job use the same name and together see each sample once). A
            second run under the name of one still running in another process raises
            ``JobInUseError``.
        ods: batches come from the opportunistic sampler (ODS, ``docs/ods.md``): random,
            every sample once per epoch, misses replaced by cached samples this job has not
            seen. Default: on when ``shuffle=True`` without a ``sampler``/``batch_sampler``.
        batch_tail: run the transform's trailing ``ToDtype``/``ConvertImageDtype``/``Normalize``
            steps once per collated batch in this process (same numbers; workers collate uint8,
            see ``seneca.pipeline.transforms``). Default: on with the default ``collate_fn`` and
            batching; True without them is an error.
        strict: any cache failure is an error (``CacheError``) instead of a warning and reads
            from storage. Default: the environment variable ``SENECA_STRICT`` ("1", "true").
        device: ``"cuda"``, ``"cuda:N"``, ``"cpu"`` or a ``torch.device``: the loader yields
            batches on this device. Each batch's tensors are copied through pinned host
            buffers it reuses, on a CUDA stream of its own, one batch ahead with workers, and
            the batch tail (``ToDtype``/``Normalize``) runs on the device on the uint8 images
            (``seneca.loader._device``); ``pin_memory`` is then not needed. Default: None, the
            batches stay on the CPU (pinned with ``pin_memory=True``), as DataLoader's.
        progress: log a line at INFO on the ``seneca`` logger while an epoch runs: samples so
            far, samples/s and the hit rate; every ``defaults.PROGRESS_EVERY`` seconds with
            True, or every that many seconds. Default: off (DataLoader logs nothing).
        dataset_version: a folder dataset is known in the cache by its files' paths, labels,
            sizes and modification times, looked at again before each epoch (files made again
            are then read from storage); a copy whose times differ (copied without keeping
            them) shares another's cached values only when both loaders give the same
            version string, which vouches that the files are the same (and the loader does
            not look at them again). Default: None, the times count.
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int = 0,
        collate_fn: Any = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Any = None,
        multiprocessing_context: Any = None,
        generator: Any = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        cache: str | None = None,
        cache_size: int | str | None = None,
        split: Mapping[str, float] | Sequence[float] | str | None = None,
        plan: str | os.PathLike | Mapping[str, Any] | None = None,
        spec: str | os.PathLike | None = None,
        job: str | None = None,
        ods: bool | None = None,
        batch_tail: bool | None = None,
        strict: bool | None = None,
        device: str | torch.device | None = None,
        progress: bool | float = False,
        dataset_version: str | None = None,
    ) -> None:
        args: dict[str, Any] = {  # DataLoader's arguments after dataset, passed on as given
            "batch_size": batch_size,
            "shuffle": shuffle,
            "sampler": sampler,
            "batch_sampler": batch_sampler,
            "num_workers": num_workers,
            "collate_fn": collate_fn,
            "pin_memory": pin_memory,
            "drop_last": drop_last,
            "timeout": timeout,
            "worker_init_fn": worker_init_fn,
            "multiprocessing_context": multiprocessing_context,
            "generator": generator,
            "prefetch_factor": prefetch_factor,
            "persistent_workers": persistent_workers,
            "pin_memory_device": pin_memory_device,
            "in_order": in_order,
        }
        DataLoader(dataset, **args)  # DataLoader's own checks come first, with its errors
        #: the device batches are yielded on (None: the CPU, as DataLoader yields them)
        self.device = resolve_device(device)
        if self.device is not None:
            args["pin_memory"] = False  # the device feed copies through pinned buffers
        self._feed: DeviceFeed | None = None
        #: DataLoader's arguments as given: a loader whose dataset changed in a way cached
        #: reads cannot follow reads it with them from then on (``_plain``)
        self._given = dict(args)
        self._plain: DataLoader | None = None
        tune_malloc()
        options = cache_options(cache, cache_size, split, plan, spec)
        self.strict = resolve_strict(strict)
        #: seconds between progress lines while an epoch runs (None: none)
        self.progress_every = resolve_progress(progress)
        self.job = resolve_job(job)
        self._counters = Counters(
            rows=max(0, num_workers if isinstance(num_workers, int) else 0) + 1
        )
        self._ods_sampler: OdsBatchSampler | None = None
        self._subs_from = 0  # the sampler's substitutions at the latest reset_stats
        self._tickets: TicketSampler | None = None  # a batch decided when its worker starts it
        self._cached: CachedDataset | None = None
        self._batch_tail: Any = None
        self._iterated = False  # an iteration has started (persistent workers keep its transform)
        self.cache_url: str | None = None
        #: the budgets in force: the dataset's share of the node, split by the split (None:
        #: no cache)
        self.budgets: Budgets | None = None
        self._split: Split | None = None
        #: with ``split="auto"``: the planner of this loader's split (None: a fixed split)
        self.planner: AutoPlanner | None = None
        #: why this loader reads its dataset without a cache (None: it caches)
        self.not_cached: str | None = None
        try:
            resolved = resolve(dataset, resolve_dataset_version(dataset_version))
        except NotCacheable as why:
            self._step_aside(dataset, args, str(why), ods, batch_tail)
            return
        use_ods = resolve_ods(ods, shuffle, sampler, batch_sampler, batch_size)
        use_ods, samples = ods_members(dataset, resolved, use_ods, ods)
        # a job of its own leaves with the loader (a named job may be resumed)
        self._own_job = job is None and not self.job.startswith("ddp:")
        self._wire(dataset, resolved, args, options, use_ods, samples, batch_tail)
        weakref.finalize(self, self._lease.collected)

    def _step_aside(
        self, dataset: Any, args: dict[str, Any], why: str, ods: Any, batch_tail: Any
    ) -> None:
        """Read ``dataset`` exactly as DataLoader does, saying why once."""
        for name, value in (("ods", ods), ("batch_tail", batch_tail)):
            if value:
                raise ConfigError(f"{name}=True needs a dataset Seneca can cache: {why}")
        self.not_cached = why
        warnings.warn(
            f"SenecaLoader: no cache for this dataset ({why}); it is read as DataLoader reads it",
            stacklevel=3,
        )
        log.info("not caching %s: %s", type(dataset).__name__, why)
        super().__init__(dataset, **args)
        self._feed = self._device_feed(None)
        self._path = BatchPath(self.job, self._counters, cached=False, feed=self._feed)

    def _device_feed(self, tail: Any) -> DeviceFeed | None:
        """The feed of :attr:`device` (None without one); ``tail``: the batch tail it runs."""
        device = self.device
        if device is None:
            return None
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        return DeviceFeed(device, tail)

    def _wire(
        self,
        dataset: Any,
        resolved: Resolved,
        args: dict[str, Any],
        options: Any,
        use_ods: bool,
        ods_members: Sequence[int] | None,
        batch_tail: bool | None,
    ) -> None:
        """Read ``dataset`` through the cache (with ODS when ``use_ods``)."""
        if resolved.source.rows and batch_tail:
            raise ConfigError("batch_tail=True needs (image, target) samples, not a table's rows")
        defer_tail = not resolved.source.rows and resolve_batch_tail(
            batch_tail, args["collate_fn"], args["batch_size"], args["batch_sampler"]
        )
        wrapped = CachedDataset(dataset, resolved, self._counters, defer_tail=defer_tail)
        # the steps run on whole batches, set anew as the transform changes: one that gains
        # or loses its trailing ToDtype/Normalize has them run here, or none
        tail = wrapped.work.transform.batch_tail
        self._batch_tail = (tail if tail is not None else BatchTail([])) if defer_tail else None
        if defer_tail and args["collate_fn"] is None:  # default_collate, less the rows' copy
            args["collate_fn"] = collate_rows
        ids, samples, tiers = wrapped.cache_ids(), len(resolved.source), wrapped.work.tiers
        setup = connect(options, samples, self.strict, ids[0])
        store = cache_store(setup, *ids, samples, dataset)
        # the job stays live while this loader exists, however long a step takes: from its
        # first epoch on, so that a run under a name an earlier run used does not renew that
        # run's lease before its sampler has looked at it
        self._lease = JobLease(store, self.job, leave=self._own_job)
        self.cache_url = setup.client.redacted
        #: the job backs off the cache as one: its fetches, sampler, plan and budgets
        backoff = job_backoff(self.cache_url, unreachable=not setup.reachable)
        self._split = setup.split
        if not options.auto:
            warn_unread(setup.split, tiers)
        if options.auto:
            workers, counters = args["num_workers"], self._counters
            self.planner = auto_planner(
                setup, store, self.job, counters, workers, options.spec, tiers, dataset, backoff
            )
        batch_size, drop_last = args["batch_size"], args["drop_last"]
        # a batch per worker, or the loader process's and the next one's reads sent ahead
        per_batch = batch_size or getattr(args["batch_sampler"], "batch_size", None) or 1
        self.budgets = budgets_for(
            setup, store, self.job, self.planner, tiers, self._counters, dataset, backoff,
            flight=per_batch * (args["num_workers"] or 2),
        )  # fmt: skip
        if use_ods and setup.reachable:
            seed = seeds_from(args["generator"])
            # at an epoch's start, the job joined: the plan and shares in force before it
            # decides (jobs that start together find the first one's plan made for it alone)
            self._ods_sampler = ods_sampler(
                store,
                self.job,
                batch_size,
                drop_last,
                ods_members,
                seed,
                _epoch_started(self._lease, self.budgets),
                strict=self.strict,
                backoff=backoff,
                held_here=functools.partial(keeper().holds, store),
            )
            args.update(batch_size=1, shuffle=None, sampler=None, drop_last=False)
            args["batch_sampler"] = self._ods_sampler
            if args["num_workers"] == 0:  # fetches read the next batch's values ahead
                wrapped.fetcher.read_ahead_from(self._ods_sampler.upcoming)
            if (
                args["num_workers"] > 0
                and args["collate_fn"] is collate_rows
                and wrapped.work.tensor_hits
            ):
                slots = BatchSlots(
                    slot_count(args["num_workers"], args["prefetch_factor"]),
                    batch_size,
                    pin=pin_host
                    if self.device is not None and self.device.type == "cuda"
                    else None,
                )
                self._tickets = TicketSampler(
                    self._ods_sampler, slots, timeline_from_environment(self.job)
                )
                args.update(batch_sampler=self._tickets, collate_fn=collate_part)
        elif args["sampler"] is None and args["batch_sampler"] is None:  # over the user's dataset
            shuffle, args["shuffle"] = args["shuffle"], None
            args["sampler"] = (
                RandomSampler(dataset, generator=args["generator"])
                if shuffle
                else SequentialSampler(dataset)
            )
        wrapped.link.attach(
            store, self.job, backoff, strict=self.strict, writers=args["num_workers"]
        )
        super().__init__(wrapped, **args)
        self._cached = wrapped
        self._feed = self._device_feed(self._batch_tail)
        self._path = BatchPath(
            self.job,
            self._counters,
            feed=self._feed,
            tail=self._batch_tail,
            pin=self.pin_memory,
            ahead=self.num_workers > 0,
            sampler=self._ods_sampler,
            tickets=self._tickets,
            timeline=self._tickets.timeline if self._tickets is not None else None,
            budgets=self.budgets,
            every=self.progress_every,
            follow=self._follow_changed_transform if self.num_workers == 0 else None,
        )
        if self._tickets is not None:
            wrapped.desk = self._tickets.desk.client()
        # iterators read through the cache; the loader shows the user's dataset, and with ODS
        # the batch size, drop_last and sampler the user asked for, as DataLoader's would
        shown = {}
        if self._ods_sampler is not None:
            sampler = shown_sampler(self._ods_sampler, dataset)
            shown = {"batch_size": batch_size, "drop_last": drop_last, "sampler": sampler}
        self.read_through(wrapped, dataset, **shown)

    def __iter__(self) -> Any:
        """An iteration: DataLoader's batches through the loader's stages
        (``seneca.loader._batch_path``, where a batch's whole path is stated)."""
        if self._cached is not None:
            self._path.stop()  # before DataLoader resets persistent workers the thread may use
            self._follow_transform()
            self._look_at_samples()
        path = self._path
        if self._cached is None:
            return path.run(super().__iter__() if self._plain is None else iter(self._plain), {})
        self._iterated = True
        before = self._counters.snapshot()  # before any worker fetches for this iteration
        if self._ods_sampler is None:
            self._lease.start()
            return path.run(super().__iter__(), before, length=self._length())
        self._ods_sampler.start_run()  # ranks of a job: a run under a used name starts afresh
        # the epoch is the one due now, whenever its first batch is decided: a set_epoch made
        # after iter() (Lightning's, when it resumes) is the next iteration's, in every rank
        epoch = self._ods_sampler.next_epoch()
        self._ods_sampler.expect(epoch)  # this iteration is the loader's own
        token = self._ods_sampler.progress.begin(epoch)
        return path.run(super().__iter__(), before, token, self._length())

    def __len__(self) -> int:
        return super().__len__() if self._plain is None else len(self._plain)

    def _length(self) -> int | None:
        """The batches of an epoch (``len(loader)``), None where the dataset has no length."""
        try:
            return len(self)
        except TypeError:
            return None

    def _follow_transform(self) -> None:
        """The dataset's transform as the script set it before this iteration, where
        DataLoader's would use it: without workers, or with workers that start now (persistent
        ones keep the transform of their first iteration). The batch tail follows too."""
        assert self._cached is not None
        if self._iterated and self.num_workers > 0 and self.persistent_workers:
            return
        self._cached.follow()
        if self._batch_tail is not None:
            tail = self._cached.work.transform.batch_tail
            self._batch_tail.steps = tail.steps if tail is not None else []

    def _follow_changed_transform(self) -> None:
        """Without workers, before each batch: the dataset's transform, where the script set it
        or changed a step in place since the last batch (a curriculum's next augmentation),
        used as DataLoader's loop uses it."""
        assert self._cached is not None
        if self._cached.changed_since():
            self._cached.check_alike()
            self._follow_transform()

    def _look_at_samples(self) -> None:
        """The dataset's samples looked at before each iteration, as DataLoader would read
        them. Their labels are followed where DataLoader's would be (without workers, or with
        workers that start now). Samples added, removed or moved (a Subset's other indices)
        make the loader read the dataset as DataLoader does from then on. A source that looks
        at its samples only all at once (a CacheableDataset's id) looks now: changed since the
        loader was made, they are read from storage from then on, never served from the values
        the cache holds for the old ones (persistent workers are made again to know it); the
        files of a folder dataset or of a Hugging Face table's images are looked at for each
        batch (``SampleWork.look_at_files``). So are all samples once they decode otherwise than
        when the loader was made (a library's setting changed), where DataLoader's would
        decode them anew."""
        assert self._cached is not None
        kept = self._iterated and self.num_workers > 0 and self.persistent_workers
        work = self._cached.work
        if not kept:
            moved = self._cached.follow_samples()
            if moved is not None:
                self._leave_cache(moved)
                return
            work.look_at_decoding()  # as the workers that start now, or this process, decode
        if work.changed is None and work.look_at_samples() and kept:
            self._drop_iterator()

    def _leave_cache(self, why: str) -> None:
        """Read the user's dataset as DataLoader reads it from now on (``_plain``), saying
        ``why`` once: its samples changed in a way cached reads cannot follow. The job leaves
        the cache."""
        assert self._cached is not None
        warnings.warn(
            f"SenecaLoader: {why} since the loader was made; it reads the dataset as "
            "DataLoader reads it from now on, uncached (make a new SenecaLoader to cache it)",
            stacklevel=4,
        )
        log.warning("job %s reads its dataset uncached from now on: %s", self.job, why)
        self.close()
        self._plain = DataLoader(self.dataset, **self._given)
        self.not_cached = why
        self._cached = self._ods_sampler = self._tickets = self._batch_tail = None
        self.planner = self.budgets = self._split = None
        self._subs_from = 0
        self._feed = self._device_feed(None)
        self._path = BatchPath(self.job, self._counters, cached=False, feed=self._feed)

    def state_dict(self) -> dict[str, Any]:
        """Where this loader is in its epoch (torchdata StatefulDataLoader's convention):
        the epoch, the batches consumed in it, and a bitmap of their samples; the state is
        its ODS sampler's (``ods.sampler.OdsBatchSampler.state_dict``). A loader without ODS
        has no position to save (its state is ``{}``): resumed, its epoch starts over, as
        DataLoader's does. Frameworks that save every loader's state (Lightning) may call
        it on any loader."""
        if self._ods_sampler is None:
            return {}
        return self._ods_sampler.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from :meth:`state_dict` (in this or a new process, same job name): the next
        iteration continues that epoch with every sample not yet consumed, exactly once. An
        empty state (a loader without ODS saved it) resumes nothing.

        Under torch.distributed every rank loads its own state (a collective call): the ranks'
        consumed samples are united, and each rank's share of the epoch shrinks by what it
        consumed, as DistributedSampler's would."""
        if not state:
            return
        if self._ods_sampler is None:
            raise ConfigError(
                "load_state_dict: this loader has no ODS batches to continue the saved epoch "
                "with (it was saved by a loader with ODS: shuffle=True, no sampler=)"
            )
        self._ods_sampler.load_state_dict(state)

    def close(self) -> None:
        """Leave the job in the cache now (its state goes; other jobs stop counting it at
        once) and stop persistent workers. A loader whose job name Seneca made leaves by
        itself when it is garbage-collected or the interpreter exits."""
        lease = getattr(self, "_lease", None)
        if lease is not None:
            lease.close()
        self._path.stop()
        self._drop_iterator()  # persistent workers stop with their iterator
        if self._plain is not None:
            drop_iterator(self._plain)
        if self._tickets is not None:
            self._tickets.close()
        if self._cached is not None:
            self._cached.fetcher.drop_reads_ahead()

    @property
    def cache_size(self) -> int | None:
        """Bytes the dataset's tiers may fill now: its share of the cache node (None: no
        cache)."""
        return None if self.budgets is None else self.budgets.size

    @property
    def split(self) -> dict[str, float] | None:
        """The fractions of the cache per tier in use now (planned, with ``split="auto"``);
        None when the loader reads its dataset uncached."""
        split = self.planner.split if self.planner is not None else self._split
        return None if split is None else split.fractions

    @property
    def ods(self) -> bool:
        """Whether batches come from ODS."""
        return self._ods_sampler is not None

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration runs (as ``DistributedSampler.set_epoch``); without it
        each iteration runs the next epoch."""
        if self._ods_sampler is not None:
            self._ods_sampler.set_epoch(epoch)

    @property
    def store(self) -> Store | None:
        """The cache this loader reads and fills (its tiers, budgets and jobs; shared with
        every loader over the same files): ``usage()``, ``state()``, ``clear()``. None when
        it reads its dataset uncached (:attr:`not_cached`)."""
        return None if self._cached is None else self._cached.store

    def stats(self) -> dict[str, Any]:
        """This job's counters, summed over the loader process and its workers.

        Returns ``samples``; per tier (``augmented``, ``decoded``, ``encoded``) its ``hits``,
        ``misses``, ``hit_rate`` and ``admitted``; ``storage_reads``, ``decodes``,
        ``transforms``, ``bytes_storage``, ``bytes_cache`` and ``cache_errors``; with ODS
        ``substitutions`` (misses replaced by hits), ``ods_gone`` (decided hits found
        evicted, read from the next tier or storage), ``promised`` (with workers: misses
        another job was making when decided, near an epoch's end: a worker waits for its copy) and
        ``promises_kept`` (those that came as that copy in time), ``swapped`` (with
        workers: misses served instead as copies other jobs cached while the batch was
        made; the misses come later in the epoch); with workers and ODS, ``slots``: the
        ``batches`` the workers made, those made ``in_slots`` (memory this process shares with
        them: only the slot's number crosses), those decided while every slot was lent
        (``without_slot``: their images cross in memory of their own, as DataLoader's do) and
        the sets of slot ``memory`` made; with workers, ``in_workers``: the same counters
        (``samples`` to ``swapped``) for the work done in the worker processes (the rest was
        done in this process); with a batch tail (torchvision's ``ToDtype``/``Normalize``
        run once per batch in this process), ``tail``: the output tensors it ``made`` and the
        batches it wrote into one ``reused`` (an earlier batch's that nobody held any more);
        with ``device=``, ``device``: the batches staged and the host buffers made and reused
        for their copies (``DeviceFeed.stats``).
        """
        out = job_stats(self._counters.snapshot(), self._substitutions() - self._subs_from)
        if self._counters.rows > 1:
            out["in_workers"] = job_stats(self._counters.snapshot(first=1), 0)
            del out["in_workers"]["substitutions"]  # (the sampler's, in this process)
        if self._tickets is not None:
            out["slots"] = self._tickets.stats()
        if self._batch_tail is not None:
            out["tail"] = self._batch_tail.stats()
        if self._feed is not None:
            out["device"] = self._feed.stats()
        return out

    def reset_stats(self) -> None:
        """Set every counter of :meth:`stats` back to zero."""
        self._counters.reset()
        self._subs_from = self._substitutions()
        if self._tickets is not None:
            self._tickets.reset_stats()
        if self._batch_tail is not None:
            self._batch_tail.reset_stats()
        if self._feed is not None:
            self._feed.reset_stats()

    def _substitutions(self) -> int:
        """The ODS sampler's substitutions since the loader was made (0 without ODS)."""
        return self._ods_sampler.substitutions if self._ods_sampler is not None else 0


def _epoch_started(lease: JobLease, budgets: Any) -> Callable[[], None]:
    """What an ODS epoch's start does, the job joined: its lease kept from now on, and the plan
    and shares in force before it decides. (Not a method: the sampler holds it, and a loader
    that its own sampler refers to would outlive its last reference until a collection.)"""

    def started() -> None:
        lease.start()
        budgets.look()

    return started
