"""CachedDataset: an ImageFolder-like dataset read through the Redis cache tiers.

Per batch (``__getitems__``, called in the loader process or a DataLoader worker), by what the
loader's batch sampler handed DataLoader for it (DataLoader's one channel to the dataset), one
of three kinds:

- a :class:`~seneca.loader._tickets.Tag`, a worker's ticket (``TicketSampler``, with workers
  and ODS): the batch is decided when the worker starts it and made in its slot;
- a :class:`~ods.sampler.Decided`, the picks ODS decided in the loader process
  (``OdsBatchSampler``, without workers): each sample's tier comes with it;
- anything else, sample indices (DataLoader's own order, ODS off): their tiers from one
  ``lookup`` call (:meth:`CacheLink.lookup <seneca.loader._link.CacheLink.lookup>`).

``seneca.loader._fetch`` then reads the values (``_read``), has the rest of each sample made
(``_make``, by ``seneca.loader._samples``: storage reads, decodes, the transform), and offers
new values to the cache (``_admit``). What a cache failure does is the link's
(``seneca.loader._link``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch.utils.data

from ods.sampler import Decided
from ods.store_api import Store
from seneca.loader._desk import DeskClient
from seneca.loader._fetch import Fetcher, Swaps
from seneca.loader._link import CacheLink
from seneca.loader._rows import BatchRows, Tagged
from seneca.loader._samples import SampleWork
from seneca.loader._stats import Counters
from seneca.loader._tickets import Tag
from seneca.loader._workers import guard_exit
from seneca.loader.source import Resolved
from seneca.pipeline.fingerprint import at_a_glance
from seneca.pipeline.malloc import tune_malloc
from seneca.pipeline.transforms import split_transform
from seneca_base.errors import ConfigError, DatasetError
from seneca_base.process import TRAINING, Made, Role
from seneca_base.process import role as process_role

__all__ = ["CachedDataset"]


class CachedDataset(torch.utils.data.Dataset):
    """The user's dataset read through the cache (``seneca.loader.source`` says which datasets
    can be): item ``i`` is the user's item ``i``.

    Attribute reads and writes that this wrapper does not define (``classes``, a setting a
    ``worker_init_fn`` changes, ...) go to the user's dataset; setting ``transform`` or
    ``target_transform`` sets the dataset's and is used from then on (a Subset's or
    ConcatDataset's is its own, unused, as DataLoader leaves it). The wrapper's own
    attributes are those it sets while it is built: no list to keep in step.
    """

    def __init__(
        self, dataset: Any, resolved: Resolved, counters: Counters, defer_tail: bool = False
    ) -> None:
        object.__setattr__(self, "_building", True)  # every attribute set until built is own
        self.dataset = dataset
        self.resolved = resolved
        #: the source's index of each of the user's samples (None: the same)
        self.positions = resolved.positions
        self.counters = counters
        #: the process that made its first batch, and its role (:meth:`_first_batch`)
        self._started: Made | None = None
        self._role = TRAINING
        #: the dataset's transform and target transform as last taken, and how they looked
        #: (:meth:`changed_since`)
        self._taken = self._transforms_now()
        self._glance = _glance(self._taken)
        #: how a sample is made (``defer_tail``: the loader runs ``transform.batch_tail`` on
        #: collated batches, so samples end after ``transform.sample_tail``)
        self.work = SampleWork(
            resolved.source, split_transform(self._taken[0]), self._taken[1], defer_tail
        )
        #: the cache this dataset is read through (none until ``link.attach``)
        self.link = CacheLink(counters)
        self.fetcher = Fetcher(self.link, self.work, counters)
        #: with tickets: where a worker asks for the samples of the batch it starts
        #: (``seneca.loader._desk``; None: parts come with their samples). A hook: the loader
        #: sets it once its ticket sampler (and desk) is made, which needs this dataset
        self.desk: DeskClient | None = None
        self._building = False

    @property
    def source(self) -> Any:
        """What the samples are read and decoded from (``seneca.loader.source``)."""
        return self.work.source

    @property
    def transform(self) -> Any:
        """The user's dataset's transform, as a ``worker_init_fn`` reads it from DataLoader's
        dataset (``work.transform`` is it split at the cache boundary). A Subset or
        ConcatDataset has none, as for DataLoader."""
        if not self._makes_samples():
            return self.dataset.transform
        return getattr(self.resolved.base, "transform", None)

    @property
    def target_transform(self) -> Any:
        if not self._makes_samples():
            return self.dataset.target_transform
        return self.work.target_transform

    def _makes_samples(self) -> bool:
        """Whether the user's dataset is the one whose transforms make the samples (not a
        Subset or ConcatDataset of it, whose ``transform``, if set, DataLoader never uses)."""
        return self.dataset is self.resolved.source.dataset

    @property
    def store(self) -> Store | None:
        """The dataset's cache (None: none)."""
        return self.link.store

    @property
    def job(self) -> str | None:
        """The job this loader reads the cache as."""
        return self.link.job

    def cache_ids(self) -> tuple[str, str]:
        """(dataset, view) as the cache names them: the dataset is the source's samples and how
        they decode (its encoded and decoded values are the same for every transform with a
        random head; a deterministic head is part of the decoding); the view is the
        transform's cached head (its augmented copies are its own)."""
        return self.work.ids

    def __getattr__(self, name: str) -> Any:  # only for names the wrapper does not hold
        if name.startswith("__") or name in ("dataset", "_building"):
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def follow(self) -> None:
        """Take the user's dataset's ``transform`` and ``target_transform`` as they are now (a
        script may set them between epochs, as for progressive resizing: DataLoader's workers,
        started every epoch, or its loop without workers, use them). The transform is split
        and named again (``seneca.pipeline.fingerprint``), so one changed in place (a step's
        size set, a step added to its list) is seen too; values named otherwise than the
        cache's are never read from it (``SampleWork.stale``, ``SampleWork.old_view``)."""
        self._taken = self._transforms_now()
        transform, target_transform = self._taken[:2]
        self._glance = _glance(self._taken)
        self.work.target_transform = target_transform
        self.work.use_transform(split_transform(transform))

    def changed_since(self) -> bool:
        """Whether the script set the dataset's transform or target transform since
        :meth:`follow` took them, or changed a step in place (its size, a step added to its
        list), as a look cheap enough for every batch tells (``fingerprint.at_a_glance``: the
        values of an array a step holds, written in place, show at the next :meth:`follow`)."""
        now = self._transforms_now()
        if any(a is not b for a, b in zip(now, self._taken, strict=True)):
            return True
        return _glance(now) != self._glance

    def check_alike(self) -> None:
        """Raise DatasetError when the datasets whose samples the source holds together (a
        ConcatDataset's parts) make them otherwise than each other now: one part's transform
        or loader function set within an epoch, or by a ``worker_init_fn``. Their samples
        cannot be made alike from then on, and none is served as another part's transform
        would make it. (Set before an iteration, the loader reads the dataset uncached.)"""
        unlike = self.resolved.made_otherwise() if self.resolved.others else None
        if unlike is not None:
            raise DatasetError(
                f"SenecaLoader: {type(self.dataset).__name__}: {unlike} since the epoch began; "
                "set every part's alike, or set them before an epoch (the loader then reads "
                "the dataset as DataLoader does, uncached)"
            )

    def _transforms_now(self) -> tuple[Any, ...]:
        """The transform and target transform of the dataset that makes the samples, and
        those and the loader function of each dataset whose samples the source holds with it
        (``Resolved.others``)."""
        base = self.resolved.base
        now = (getattr(base, "transform", None), getattr(base, "target_transform", None))
        for other in self.resolved.others:
            now += (other.transform, other.target_transform, getattr(other, "loader", None))
        return now

    def follow_samples(self) -> str | None:
        """Take the labels of the user's dataset as they are now, and say what else changed in
        its samples that cached reads cannot follow (``Resolved.follow``; None: nothing)."""
        return self.resolved.follow(self.dataset)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("transform", "target_transform") and not self._makes_samples():
            setattr(self.dataset, name, value)  # a Subset's: DataLoader never uses it
        elif name == "transform":
            setattr(self.resolved.base, name, value)
            self.work.use_transform(split_transform(value))
        elif name == "target_transform":
            setattr(self.resolved.base, name, value)
            self.work.target_transform = value
        elif name.startswith("_") or self._building or name in vars(self):
            object.__setattr__(self, name, value)
        else:
            setattr(self.dataset, name, value)

    def __len__(self) -> int:
        return len(self.source) if self.positions is None else len(self.positions)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        return self.__getitems__([index])[0]

    def __getitems__(self, batch: Tag | Decided | Sequence[int]) -> list[tuple[Any, Any]]:
        """Batch ``batch``, of one of the three kinds the module docstring lists."""
        started = self._started
        role = self._role if started is not None and not started.inherited else self._first_batch()
        if isinstance(batch, Tag):
            return self._part(batch, role)
        if isinstance(batch, Decided):
            return self.source.batch(self.fetcher.fetch(batch, evict=True, role=role))
        where = self.positions
        wanted = [int(i) for i in batch] if where is None else [where[int(i)] for i in batch]
        fetched = self.fetcher.fetch(self.link.lookup(wanted, role), evict=False, role=role)
        return self.source.batch(fetched)

    def _first_batch(self) -> Role:
        """What this process does once, at the first batch it makes (a DataLoader worker is
        one, forked or spawned): its malloc tuned; in a worker, its exit made to wait for the
        results it is sending, and the transform and the decoding looked at again (its
        ``worker_init_fn`` may have changed them); its role, kept for the later batches."""
        tune_malloc()
        role = process_role()
        if role.worker:
            guard_exit()
            self.follow()
            self.check_alike()
            self.work.look_at_decoding()
        self._started = Made()
        self._role = role
        return role

    def _part(self, tag: Tag, role: Role) -> Tagged:
        """Batch ``tag``, made by this worker: its samples, decided now
        (``seneca.loader._desk``), the augmented hits read and the rest made here, their
        images in the rows of the batch's slot where it has one (``seneca.loader._slots``)."""
        part = Tagged()
        part.tag = tag.batch
        if self.desk is None:
            raise ConfigError("a batch's ticket reached a dataset with no desk to decide it")
        share = self.desk.ask(tag.iteration, tag.batch)
        if share is None or not share.picks:  # no batch
            return part
        if share.slot is not None:
            part.slot = share.slot
            part.rows = BatchRows.over(share.slot.tensor[: len(share.picks)])
        late = None if share.epoch is None else Swaps(share.epoch)
        fetched = self.fetcher.fetch(share.picks, evict=True, rows=part.rows, role=role, late=late)
        part.extend(self.source.batch(fetched))
        part.swaps = late.made if late is not None else None
        return part


def _glance(taken: tuple[Any, ...]) -> str:
    """``fingerprint.at_a_glance`` of the objects ``taken``, each once (a ConcatDataset's
    parts share their transforms, as a rule)."""
    return at_a_glance(tuple({id(obj): obj for obj in taken}.values()))
