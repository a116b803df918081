"""Shards: a large dataset's ODS metadata as sub-datasets of at most a fixed size, so that no call
grows with the dataset.

Every ODS call works on one hash slot (``{<dataset>}``), and `decide` runs a few operations over
whole bitmaps of N bits: at 14.2M samples its fixed part is about 2 ms, and one server thread
serves every call of the dataset. :class:`ShardedStore` keeps the samples of each shard of
``ods.shardmap.ShardMap`` as a dataset of its own (named by ``ods.shardmap.shard_names``: its
own hash slot, chosen so that shards spread evenly over a cluster's nodes), with its own
bitmaps, jobs, pins and a share of every tier's budget in proportion to its samples. A job
joins every shard and starts every epoch in each; each batch is decided in one shard, drawn
with probability proportional to the samples the job still has there this epoch (another
shard only where the first runs out), so a call touches one shard and works on at most
``size`` samples, however large N is. The dataset's own name keeps what is the whole's (its
*home*): its registration (with the shard size, which every later loader of it takes up), the
budgets in force in total, and its plan. Every other call of a loader (values, releases,
swaps, claims, lookups, admissions) goes to the shard of each sample, in the dataset's indices.

Why the order is as random as with one shard: drawing a shard in proportion to what the job
has left in it, then samples uniformly among those, draws each sample with the probability a
uniform draw over all the job's unserved samples gives it; each shard's epoch serves its
samples exactly once, so their union serves every sample exactly once. A batch's samples come
from one shard, and a shard is a uniform share of the dataset (a fixed scatter of indices), so
a batch drawn from one shard is a uniform draw from a random subset of the dataset.

A dataset of at most ``size`` samples is one shard: the store is the :class:`OdsStore` itself,
with the same keys and calls as without shards (:func:`open_store`). A decision posted ahead
goes to the shard drawn when it is posted.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ods import defaults, routing
from ods.decision import Decision, Pick
from ods.defaults import DECIDE_CHUNK_SAMPLES
from ods.keys import SHARD_SIZE_FIELD, Keys
from ods.outbox import Call, Poster
from ods.shardmap import ShardMap, shard_names, split_units
from ods.store import Glance, OdsStore, checked_tail, members_of
from ods.store_api import Store
from seneca_base.errors import ConfigError
from seneca_base.split import Split
from seneca_base.tiers import TIERS

__all__ = [
    "Posted",
    "ShardedDecision",
    "ShardedStore",
    "open_store",
    "part_names",
    "recorded_shard_size",
]


@dataclass(frozen=True)
class Posted:
    """A decision :meth:`ShardedStore.decide` posted ``later``: to ``shard`` (None: the job had
    nothing left, nothing was posted), the ``call`` there, and what was asked."""

    shard: int | None
    call: Call | None
    job: str
    batch: int
    substitute: bool
    epoch: int | None

    @property
    def sent(self) -> bool:
        return self.call is not None and self.call.sent

    def cancel(self) -> bool:
        """Cancel the call if not sent yet (as ``Call.cancel``: True when nothing was)."""
        return self.call is None or self.call.cancel()


@dataclass(frozen=True)
class ShardedDecision(Decision):
    """A batch decided in shards: ``parts`` are each shard's decision (its own indices), the
    rest as :class:`Decision`, in the dataset's indices."""

    parts: tuple[tuple[int, Decision], ...] = ()


class ShardedStore:
    """The cache engine of one dataset kept in shards of at most ``shard_size`` samples: an
    :class:`OdsStore` per shard, named by :func:`shard_names`. Takes :class:`OdsStore`'s arguments;
    ``capacity`` is the whole dataset's, shared in proportion to the shards' samples.

    It answers the calls a loader makes of one :class:`OdsStore`, in the dataset's indices:
    a job's (join, start_epoch, restore, decide, release, leave), a fetch's (values, releases,
    swaps, claims, admissions, what it reads beside its values) and the budgets' (in total at
    the dataset's home, each shard its share). ``lazy``: a job joins a shard and starts its
    epoch there only when it first draws it (for ``ods simulate``: a stretch of an epoch then
    allocates only the shards it touches; a job resumed mid-epoch, or other jobs' demand in
    shards a job has not reached, need them eager).
    """

    def __init__(
        self,
        client: Any,
        dataset: str,
        samples: int,
        *,
        shard_size: int = defaults.SHARD_SIZE,
        capacity: Mapping[str, int] | None = None,
        seed: int | None = None,
        lazy: bool = False,
        **kwargs: Any,
    ) -> None:
        self.map = ShardMap(samples, shard_size)
        self.lazy = lazy
        self.samples = samples
        self.sizes = self.map.sizes()
        #: the dataset as a whole: its name's keys hold what is the dataset's, not a shard's
        #: (what it is, for operators; the budgets in force, in total; its plan), and its
        #: capacity is the whole dataset's, shared by the shards in proportion to their samples
        self.home = OdsStore(client, dataset, samples, capacity=capacity, **kwargs)
        names = shard_names(dataset, len(self.sizes))
        self.shards = [
            OdsStore(
                client,
                names[k],
                size,
                seed=None if seed is None else seed * 7919 + k,
                decide_chunk=max(defaults.SHARD_DECIDE_CHUNK, size // DECIDE_CHUNK_SAMPLES),
                outbox=self.home.outbox,
                **kwargs,
            )
            for k, size in enumerate(self.sizes)
        ]
        self._share()
        self.dataset = dataset
        self.shard_size = shard_size
        #: the outbox of the shards' calls, one for all (``OdsStore.outbox``): the calls of a
        #: flush go out in one write, however many shards they are for
        self.outbox = self.home.outbox
        self._left: dict[str, list[int]] = {}  # per job: its samples left per shard this epoch
        self._epoch: dict[str, int] = {}  # per job: its latest epoch
        self._changed: set[int] = set()  # shards a decision, release or admission called
        self._joined: dict[str, set[int]] = {}  # per job: the shards it joined
        self._members: dict[str, list[int]] = {}  # per job of a subset: its samples per shard
        self._started: dict[str, set[int]] = {}  # lazy: per job, the shards of its epoch
        # the shards' metadata and values, then the home's
        self._patterns = [*self.home.keys.shard_patterns(), *self.home.keys.patterns()]

    @property
    def commands(self) -> Counter[str]:
        """Engine calls made, by function (every shard's)."""
        return sum((s.commands for s in self.shards), Counter())

    def _track(self, job: str, replies: list[tuple[int, int]]) -> tuple[int, int]:
        """Note each shard's (epoch, served) for ``job``; returns the epoch and the samples
        served over all shards."""
        pairs = zip(self._samples_of(job), replies, strict=True)
        self._left[job] = [size - served for size, (_, served) in pairs]
        epoch = max(e for e, _ in replies)
        self._epoch[job] = epoch
        return epoch, sum(served for _, served in replies)

    def _samples_of(self, job: str) -> list[int]:
        """The samples ``job`` trains on in each shard (all, unless it joined with a subset)."""
        return self._members.get(job, self.sizes)

    def join(self, job: str, indices: Sequence[int] | None = None) -> tuple[int, int]:
        """Register ``job`` in every shard (lazy: in none yet; ``indices``, the samples it
        trains on: in the shards that hold any of them, with those); (epoch, served) as
        :meth:`OdsStore.join`."""
        if self.lazy:
            if indices is not None:
                raise ConfigError("indices: a lazily joined job trains on every sample")
            self._joined.setdefault(job, set())
            return self._track(job, [(self._epoch.get(job, -1), 0)] * len(self.shards))
        if indices is None:
            self._joined[job] = set(range(len(self.shards)))
            return self._track(job, [s.join(job) for s in self.shards])
        parts = self.map.split(members_of(indices, self.samples))
        self._joined[job] = set(parts)
        self._members[job] = [len(parts.get(k, ())) for k in range(len(self.shards))]
        replies = [
            self.shards[k].join(job, [local for _, local in parts[k]]) if k in parts else (-1, 0)
            for k in range(len(self.shards))
        ]
        return self._track(job, replies)

    def start_epoch(self, job: str, epoch: int) -> tuple[int, int]:
        """Start ``epoch`` for ``job`` in every shard (lazy: in each when first drawn);
        (epoch, served) as now stored."""
        if self.lazy:
            self._started[job] = set()
            return self._track(job, [(epoch, 0)] * len(self.shards))
        joined = self._joined.get(job, set(range(len(self.shards))))
        return self._track(
            job,
            [
                s.start_epoch(job, epoch) if k in joined else (epoch, 0)
                for k, s in enumerate(self.shards)
            ],
        )

    def _reach(self, job: str, k: int) -> None:
        """Lazy: ``job`` joins shard ``k`` and starts its epoch there, if not yet."""
        if not self.lazy:
            return
        started = self._started.setdefault(job, set())
        if k in started:
            return
        joined = self._joined.setdefault(job, set())
        if k not in joined:
            self.shards[k].join(job)
            joined.add(k)
        self.shards[k].start_epoch(job, self._epoch.get(job, 0))
        started.add(k)

    def leave(self, job: str) -> None:
        for k in sorted(self._joined.pop(job, set(range(len(self.shards))))):
            self.shards[k].leave(job)
        self._left.pop(job, None)
        self._started.pop(job, None)
        self._members.pop(job, None)

    def renew(self, job: str) -> bool:
        """Renew ``job``'s lease in every shard it joined; whether it is registered (as
        :meth:`OdsStore.renew`)."""
        if job not in self._joined:
            return False
        return all([self.shards[k].renew(job) for k in sorted(self._joined[job])])

    def lease_end(self, job: str) -> int | None:
        """When ``job``'s lease runs out: the latest over the shards it is registered in (by
        any process); None when in none (as :meth:`OdsStore.lease_end`)."""
        ends = [e for e in (s.lease_end(job) for s in self.shards) if e is not None]
        return max(ends, default=None)

    def lapse(self, job: str) -> None:
        """End ``job``'s lease now in every shard it joined (as :meth:`OdsStore.lapse`)."""
        for k in sorted(self._joined.get(job, ())):
            self.shards[k].lapse(job)

    def decide(
        self,
        job: str,
        batch: int,
        substitute: bool = True,
        epoch: int | None = None,
        *,
        later: bool = False,
    ) -> ShardedDecision | Posted:
        """The next batch of ``job``, as :meth:`OdsStore.decide` decides it, in one shard drawn
        in proportion to the samples the job has left in each (more shards only where the
        first runs out, at the same server time: every hit in one pin bucket). Empty once
        every shard's epoch is served. The samples left are this store's count for the job's
        latest epoch: ``epoch`` names that one (or None).

        ``later``: posted (as :meth:`OdsStore.decide` posts it) in the shard it would draw now,
        at most its :attr:`decide_chunk`; :meth:`collect` gives the decision, made up to
        ``batch`` in other shards where that one ran out."""
        if not later:
            return self._more(job, batch, substitute, epoch, [])
        left = self._left_of(job)
        if not any(left):
            return Posted(None, None, job, batch, substitute, epoch)
        k = self._shard_for(job, left)
        self._reach(job, k)
        want = min(batch, self.shards[k].decide_chunk)
        call = self.shards[k].decide(job, want, substitute, epoch, later=True)
        return Posted(k, call, job, batch, substitute, epoch)

    def _more(
        self,
        job: str,
        batch: int,
        substitute: bool,
        epoch: int | None,
        parts: list[tuple[int, Decision]],
    ) -> ShardedDecision:
        """``parts`` (decided already) and more, decided in shards drawn as :meth:`decide`
        draws them, up to ``batch`` samples in all (at one server time: the pin bucket of
        each part's hits is the same unless ``parts`` were decided before)."""
        left = self._left_of(job)
        want = batch - sum(len(d.indices) for _, d in parts)
        at = None
        while want > 0 and any(left):
            at = self.home.now_ms() if at is None else at
            k = self._shard_for(job, left)
            self._reach(job, k)
            d = self._took(job, k, self.shards[k].decide(job, want, substitute, epoch, at=at))
            if d.indices:
                parts.append((k, d))
                want -= len(d.indices)
        index = self.map.index
        return ShardedDecision(
            epoch=(parts[-1][1].epoch if parts else (-1 if epoch is None else epoch)),
            served=sum(self._samples_of(job)) - sum(left),
            substitutions=sum(d.substitutions for _, d in parts),
            indices=[index(k, i) for k, d in parts for i in d.indices],
            tiers=[t for _, d in parts for t in d.tiers],
            pin_bucket=parts[0][1].pin_bucket if parts else 0,
            promised=frozenset(index(k, i) for k, d in parts for i in d.promised),
            buckets=tuple(d.pin_bucket for _, d in parts for _ in d.indices),
            parts=tuple(parts),
        )

    def _left_of(self, job: str) -> list[int]:
        """The samples ``job`` has left in each shard this epoch (this store's count)."""
        return self._left.setdefault(job, list(self._samples_of(job)))

    def _took(self, job: str, k: int, d: Decision) -> Decision:
        """Count decision ``d`` of shard ``k`` in what ``job`` has left there (nothing, once
        a decision there comes back empty)."""
        self._changed.add(k)
        self._left_of(job)[k] = self._samples_of(job)[k] - d.served if d.indices else 0
        return d

    def collect(self, posted: Posted) -> ShardedDecision | None:
        """The decision of ``posted`` (a :meth:`decide` posted ``later``), in the dataset's indices;
        None when its reply is an error: call :meth:`decide`."""
        if posted.shard is None:
            return self._more(posted.job, posted.batch, posted.substitute, posted.epoch, [])
        k = posted.shard
        d = self.shards[k].collect(posted.call)
        if d is None:
            return None
        parts = [(k, d)] if self._took(posted.job, k, d).indices else []
        return self._more(posted.job, posted.batch, posted.substitute, posted.epoch, parts)

    @property
    def decide_chunk(self) -> int:
        """The samples one call of a shard decides at most."""
        return min(s.decide_chunk for s in self.shards)

    def reseed(self, seed: int) -> None:
        """Each shard's random choices from ``seed`` on (as :meth:`OdsStore.reseed`)."""
        for k, shard in enumerate(self.shards):
            shard.reseed(seed * 7919 + k)

    def restore(self, job: str, epoch: int, consumed: bytes) -> int:
        """Continue ``epoch`` in every shard with each sample not set in ``consumed`` (a
        Redis-order bitmap of the dataset's samples), as :meth:`OdsStore.restore`; returns
        the samples counted as served."""
        parts = self.map.split_bitmap(consumed)
        joined = self._joined.get(job, set(range(len(self.shards))))
        served = [
            s.restore(job, epoch, parts[k]) if k in joined else 0 for k, s in enumerate(self.shards)
        ]
        self._changed.update(joined)
        return self._track(job, [(int(epoch), n) for n in served])[1]

    def _shard_for(self, job: str, left: list[int]) -> int:
        """A shard drawn with probability proportional to ``left``, by a number every job of
        the dataset draws alike at the same point of the same epoch (its samples served so
        far): each job's draws are as random as independent ones, and jobs in step draw the
        same shard, so each finds there the copies the others just made."""
        served = sum(self._samples_of(job)) - sum(left)
        point = f"{self.dataset}:{self._epoch.get(job, 0)}:{served}"
        target = random.Random(point).random() * sum(left)
        for k, w in enumerate(left):
            target -= w
            if target < 0:
                return k
        return max(k for k, w in enumerate(left) if w)

    def release(
        self, job: str, picks: Decision | Sequence[Pick], via: Poster | None = None
    ) -> list[int]:
        """:meth:`OdsStore.release` in the shards of the hits among ``picks``."""
        if isinstance(picks, Decision):
            picks = picks.picks()
        hits = [p for p in picks if p.tier is not None]
        index, evicted = self.map.index, []
        for k, places in self.map.split([p.index for p in hits]).items():
            self._changed.add(k)
            local = [Pick(i, hits[pos].tier, hits[pos].bucket) for pos, i in places]
            evicted += [index(k, i) for i in self.shards[k].release(job, local, via)]
        return evicted

    def admit(
        self,
        job: str,
        items: Sequence[tuple[int, str, int, bytes]],
        wait: bool = True,
        made: Sequence[int] = (),
        later: Collection[int] = (),
    ) -> list[int]:
        """:meth:`OdsStore.admit` of each shard's items (``later``: positions in ``items``);
        the results in the order of ``items``."""
        out = [0] * len(items)
        made_in = self.map.split(made)
        later = set(later)
        for k, places in self.map.split([it[0] for it in items]).items():
            self._changed.add(k)
            mine = [(local, *items[pos][1:]) for pos, local in places]
            late = [n for n, (pos, _) in enumerate(places) if pos in later]
            made_k = [local for _, local in made_in.pop(k, [])]
            got = self.shards[k].admit(job, mine, wait, made_k, late)
            for (pos, _), r in zip(places, got, strict=True):
                out[pos] = r
        for k, places in made_in.items():  # made and not offered, in shards nothing went to
            self.shards[k].admit(job, [], wait, [local for _, local in places])
        return out

    def cached(self, tier: str, indices: Sequence[int]) -> list[bool]:
        """Whether each of ``indices`` is cached in ``tier``."""
        out = [False] * len(indices)
        for k, places in self.map.split(indices).items():
            got = self.shards[k].cached(tier, [local for _, local in places])
            for (pos, _), c in zip(places, got, strict=True):
                out[pos] = c
        return out

    def changed(self) -> set[int]:
        """The shards called to decide, release or admit since this was last asked."""
        out, self._changed = self._changed, set()
        return out

    # -- the dataset's budgets: in total at its home, each shard's its share -----------------

    def _shares(self, capacity: Mapping[str, int]) -> list[dict[str, int]]:
        """Each shard's share of ``capacity`` (units per tier), in proportion to its
        samples."""
        parts = {t: split_units(int(capacity[t]), self.sizes) for t in TIERS}
        return [{t: parts[t][k] for t in TIERS} for k in range(len(self.shards))]

    def _share(self) -> None:
        """Give each shard its share of the dataset's capacity."""
        for shard, share in zip(self.shards, self._shares(self.home.capacity), strict=True):
            shard.adopt_budgets([share[t] for t in TIERS])

    @property
    def capacity(self) -> dict[str, int]:
        """The dataset's budgets per tier (units), in total."""
        return self.home.capacity

    @property
    def budget_total(self) -> int:
        return self.home.budget_total

    @property
    def keys(self) -> Keys:
        """The dataset's own keys (its home's: info, budgets, plan)."""
        return self.home.keys

    # what the dataset's home answers for the whole: its client, clock, lease, policy, charges

    @property
    def client(self) -> Any:
        return self.home.client

    @property
    def lease_ms(self) -> int:
        return self.home.lease_ms

    @property
    def policy(self) -> str:
        return self.home.policy

    @property
    def values(self) -> bool:
        return self.home.values

    def now_ms(self) -> int:
        return self.home.now_ms()

    def charge(self, size: int) -> int:
        return self.home.charge(size)

    def budgets_command(self) -> tuple[str, ...]:
        return self.home.budgets_command()

    # the live jobs, as the first shard has them (every job joins every shard, but a job of a
    # subset of the samples joins only the shards that hold some)

    def refresh_jobs(self) -> list[str]:
        return self.shards[0].refresh_jobs()

    def same_view(self, names: Sequence[bytes | bytearray | str]) -> int:
        return self.shards[0].same_view(names)

    def live_command(self) -> tuple[object, ...]:
        return self.shards[0].live_command()

    def apply_split(self, split: Split, size: int) -> None:
        self.home.apply_split(split, size)
        self._share()

    def adopt_budgets(self, reply: Sequence[object]) -> bool:
        changed = self.home.adopt_budgets(reply)
        self._share()
        return changed

    def publish_budgets(self, job: str, version: int | None = None) -> bool:
        written = self.home.publish_budgets(job, version)
        self._share()
        return written

    def fit_budgets(self, job: str, total: int) -> None:
        self.home.fit_budgets(job, total)
        self._share()

    def register(self, about: str) -> None:
        """:meth:`OdsStore.register` of the dataset at its home, with its shard size (every
        loader of the dataset keeps it in the same shards: :func:`open_store`)."""
        self.home.register(about)
        self.home.client.hset(self.home.keys.info, SHARD_SIZE_FIELD, self.shard_size)

    def shrink(self, job: str, capacity: Mapping[str, int]) -> dict[str, int]:
        """:meth:`OdsStore.shrink` of every shard to its share of ``capacity``; the units
        still above, in total."""
        over = dict.fromkeys(TIERS, 0)
        for shard, share in zip(self.shards, self._shares(capacity), strict=True):
            for t, units in shard.shrink(job, share).items():
                over[t] += units
        return over

    def usage(self) -> dict[str, int]:
        """Units charged to each tier, every shard's."""
        pipe = self.home.client.pipeline(transaction=False)
        for shard in self.shards:
            pipe.execute_command(*shard.used_command())
        used = dict.fromkeys(TIERS, 0)
        for reply in pipe.execute():
            for t, v in zip(TIERS, reply, strict=True):
                used[t] += int(v or 0)
        return used

    def state(self) -> dict[str, object]:
        """Entries and units per tier, every shard's, and the live jobs (the most any shard
        has)."""
        out: dict[str, Any] = {t: {"entries": 0, "units": 0} for t in TIERS}
        out["live_jobs"] = 0
        for shard in self.shards:
            part = shard.state()
            for t in TIERS:
                for field in ("entries", "units"):
                    out[t][field] += part[t][field]  # type: ignore[index]
            out["live_jobs"] = max(out["live_jobs"], part["live_jobs"])
        return out

    # -- a batch's values: each sample's in its shard -----------------------------------------

    def value_key(self, tier: str, index: int) -> str:
        k, local = self.map.place(int(index))
        return self.shards[k].value_key(tier, local)

    def value_keys(self, items: Iterable[tuple[str, int]]) -> list[str]:
        return [self.value_key(t, i) for t, i in items]

    def claim(
        self, job: str, read: Sequence[int], waiting: Sequence[int] = ()
    ) -> tuple[list[int], list[int]]:
        """:meth:`OdsStore.claim` in the shards of the samples."""
        index, got, still = self.map.index, [], []
        reads, waits = self.map.split(read), self.map.split(waiting)
        for k in sorted(set(reads) | set(waits)):
            mine = [local for _, local in reads.get(k, ())]
            wait = [local for _, local in waits.get(k, ())]
            g, w = self.shards[k].claim(job, mine, wait)
            got += [index(k, i) for i in g]
            still += [index(k, i) for i in w]
        return got, still

    def swap(self, job: str, epoch: int, misses: Sequence[int]) -> list[Pick]:
        """:meth:`OdsStore.swap` of the first misses, those in the shard of the first (the
        k-th pick returned replaces the k-th miss, as there)."""
        if not misses:
            return []
        places = [self.map.place(int(i)) for i in misses]
        k = places[0][0]
        run = [local for shard, local in itertools.takewhile(lambda p: p[0] == k, places)]
        self._changed.add(k)
        got = self.shards[k].swap(job, epoch, run)
        return [Pick(self.map.index(k, p.index), p.tier, p.bucket) for p in got]

    def forget(self, job: str, entries: Sequence[tuple[str, int]]) -> list[int]:
        index, out = self.map.index, []
        for k, places in self.map.split([i for _, i in entries]).items():
            mine = [(entries[pos][0], local) for pos, local in places]
            out += [index(k, i) for i in self.shards[k].forget(job, mine)]
        return out

    def lookup(self, job: str, indices: Sequence[int]) -> Decision:
        """:meth:`OdsStore.lookup` in the shards of ``indices``, at one server time (so
        every hit is in one pin bucket)."""
        tiers: list[str | None] = [None] * len(indices)
        at, bucket = self.home.now_ms(), 0
        for k, places in self.map.split(indices).items():
            d = self.shards[k].lookup(job, [local for _, local in places], at=at)
            bucket = d.pin_bucket
            for (pos, _), tier in zip(places, d.tiers, strict=True):
                tiers[pos] = tier
        indices = [int(i) for i in indices]
        return Decision(-1, 0, 0, indices, tiers, bucket)

    def glance_commands(self, indices: Sequence[int]) -> list[tuple]:
        """:meth:`OdsStore.glance_commands`: the usage of the shards of ``indices`` (of the
        first shard when none)."""
        touched = sorted(self.map.split(indices)) or [0]
        used = [self.shards[k].used_command() for k in touched]
        return [*used, self.shards[touched[0]].live_command(), self.home.budgets_command()]

    def glance(self, indices: Sequence[int], replies: Sequence[Any]) -> Glance:
        """:meth:`OdsStore.glance`: the room in the shards of ``indices`` (their budgets less
        their usage); the dataset's usage estimated from theirs (every shard a uniform share
        of the samples, and of the budgets)."""
        touched = sorted(self.map.split(indices)) or [0]
        tail = checked_tail(replies, len(touched) + 2)
        part = dict.fromkeys(TIERS, 0)
        for reply in tail[: len(touched)]:
            for t, v in zip(TIERS, reply, strict=True):
                part[t] += int(v or 0)
        live = self.shards[touched[0]].same_view(tail[-2])
        scale = self.samples / sum(self.sizes[k] for k in touched)
        return Glance(
            used={t: int(v * scale) for t, v in part.items()},
            part=part,
            shards=tuple(touched),
            live=live,
            budgets=tail[-1],
            replies=len(tail),
        )

    def room(self, glance: Glance) -> dict[str, int]:
        """The units left per tier in the shards ``glance`` read."""
        return {
            t: sum(self.shards[k].capacity[t] for k in glance.shards) - glance.part[t]
            for t in TIERS
        }

    def _keys(self, pattern: str) -> list[bytes]:
        return list(self.shards[0].client.scan_iter(match=pattern, count=1000))

    def memory(self) -> int:
        """Bytes Redis uses for the dataset's metadata, every shard's and its home's."""
        client = self.home.client
        keys = self._keys(self._patterns[0]) + self._keys(self._patterns[2])
        return sum(int(client.memory_usage(k, samples=0) or 0) for k in keys)

    def clear(self) -> int:
        """Delete every key of the dataset (its shards' and its home's: metadata, values,
        staged values); returns how many."""
        pipe = self.shards[0].client.pipeline(transaction=False)
        for pattern in self._patterns:
            for key in self._keys(pattern):
                pipe.unlink(key)
        return sum(pipe.execute())


def recorded_shard_size(client: Any, dataset: str, prefix: str = defaults.KEY_PREFIX) -> int | None:
    """The shard size a loader of ``dataset`` registered (:meth:`ShardedStore.register`), if
    any: every later loader keeps the dataset in the same shards."""
    client = routing.client_of(client)
    raw = client.hget(Keys(dataset, prefix).info, SHARD_SIZE_FIELD)
    return None if raw is None else int(raw)


def part_names(client: Any, dataset: str, prefix: str = defaults.KEY_PREFIX) -> list[str]:
    """The datasets whose keys hold ``dataset``'s entries and jobs: its shards, where its
    registration says it is kept in shards (:meth:`ShardedStore.register`), else itself."""
    client = routing.client_of(client)
    samples, size = client.hmget(Keys(dataset, prefix).info, "samples", SHARD_SIZE_FIELD)
    if samples is None or size is None:
        return [dataset]
    return shard_names(dataset, ShardMap(int(samples), int(size)).count)


def open_store(
    client: Any,
    dataset: str,
    samples: int,
    shard_size: int | None = None,
    lazy: bool = False,
    **kwargs: Any,
) -> Store:
    """The store of a dataset: one :class:`OdsStore` when it fits one shard of
    ``shard_size`` samples (None: ``ods.defaults.SHARD_SIZE``), else a :class:`ShardedStore`
    (``lazy``: see there)."""
    shard_size = defaults.SHARD_SIZE if shard_size is None else shard_size
    if samples <= shard_size:
        return OdsStore(client, dataset, samples, **kwargs)
    return ShardedStore(client, dataset, samples, shard_size=shard_size, lazy=lazy, **kwargs)
