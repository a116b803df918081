"""What a cache holds, read for operators (``seneca cache status`` and ``metrics``): per dataset
its tiers (bytes, entries, budget), its jobs (live or not, epoch, progress, hit rate) and its
running totals (samples served, hits per tier, substitutions), and the server's memory.

Everything is read with plain commands on the dataset's metadata (``ods.keys``); datasets are
found with SCAN (never KEYS), on every primary of a cluster. Reading changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ods import defaults as ods_defaults
from ods import routing
from ods.keys import BUDGET_FIELD, Keys
from ods.shards import part_names
from seneca._autoplan.record import PlanRecord
from seneca._cache.client import server_ms, text_of
from seneca._cache.shares import NodeShares, allocate
from seneca_base.tiers import LETTER, SPLIT_ORDER

__all__ = [
    "CacheStatus",
    "DatasetStatus",
    "JobStatus",
    "TierStatus",
    "cache_status",
    "find_datasets",
]

_TIER_OF = {letter: tier for tier, letter in LETTER.items()}


@dataclass(frozen=True)
class TierStatus:
    """One tier of a dataset (an augmented tier per view: ``form`` is ``a:<view>``)."""

    tier: str
    form: str
    bytes: int
    entries: int
    budget: int | None  # in force: the dataset's share split by its split (None: unknown)


@dataclass(frozen=True)
class JobStatus:
    """A job of a dataset, as the engine names it (``<job>|<view>``)."""

    name: str
    live: bool
    lease_left_s: float  # negative: the lease ran out that long ago
    epoch: int
    samples: int  # samples of the job per epoch (all ranks)
    served: int  # served in its latest epoch
    total: int  # served over all its epochs
    hits: int

    @property
    def ods(self) -> bool:
        """Whether the job's batches come from ODS: it registered its samples, or began an
        epoch (a loader without ODS, reading in order or from a sampler of its own, only
        counts its hits here)."""
        return self.samples > 0 or self.epoch >= 0

    @property
    def progress(self) -> float:
        return self.served / self.samples if self.samples else 0.0

    @property
    def hit_rate(self) -> float:
        return self.hits / self.total if self.total else 0.0


@dataclass(frozen=True)
class DatasetStatus:
    """One dataset's cache."""

    dataset: str
    about: str
    samples: int | None
    tiers: list[TierStatus]
    jobs: list[JobStatus]
    served: int
    hits: dict[str, int]  # per tier (augmented: over every view)
    substitutions: int
    plan: PlanRecord | None = None  # the split its loaders share (split="auto"), if any
    share: int | None = None  # its share of the node's memory now (None: not registered)
    want: int | None = None  # what its loaders ask (0: whatever the node gives)
    shards: int = 1  # the shards its metadata is kept in (``ods.shards``; 1: one store)

    @property
    def hit_rate(self) -> float:
        return sum(self.hits.values()) / self.served if self.served else 0.0

    @property
    def live_jobs(self) -> int:
        return sum(j.live for j in self.jobs)


@dataclass(frozen=True)
class CacheStatus:
    """A cache node (or cluster): its memory (a cluster's: summed over its primaries) and the
    datasets it holds."""

    url: str
    used_memory: int
    maxmemory: int
    maxmemory_policy: str
    datasets: list[DatasetStatus] = field(default_factory=list)
    #: what the tiers of every dataset on the node may hold together now
    #: (``seneca._cache.shares``; None: no dataset registered)
    tiers_total: int | None = None


def _int(v: Any, default: int = 0) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def find_datasets(client: Any, prefix: str = ods_defaults.KEY_PREFIX) -> list[str]:
    """The datasets with metadata under ``prefix`` (SCAN over every node); a dataset kept in
    shards is one, not its shards."""
    found = set()
    for pattern in Keys.dataset_patterns(prefix):
        for key in client.scan_iter(match=pattern, count=1000):
            dataset = Keys.dataset_of(text_of(key), prefix)
            if dataset is not None:
                found.add(dataset)
    for dataset in list(found):
        parts = part_names(client, dataset, prefix)
        if parts != [dataset]:
            found -= set(parts)
    return sorted(found)


def _jobs(client: Any, keys: Keys, now: int) -> list[JobStatus]:
    entries = client.zrange(keys.jobs, 0, -1, withscores=True)
    out = []
    for name, score in entries:
        name = text_of(name)
        h = {text_of(k): text_of(v) for k, v in client.hgetall(keys.job(name)[0]).items()}
        epoch = _int(h.get("epoch"), -1)
        out.append(
            JobStatus(
                name=name,
                live=score >= now,
                lease_left_s=(score - now) / 1000,
                epoch=epoch,
                samples=_int(h.get("n")),
                served=_int(h.get(f"s{epoch}")),
                total=_int(h.get("total")),
                hits=_int(h.get("hits")),
            )
        )
    return out


def _merged(jobs: list[JobStatus]) -> list[JobStatus]:
    """The jobs of a dataset kept in shards, each job's shards as one: its samples, served
    and hits summed (served: in its latest epoch's shards), live while any shard has it."""
    by_name: dict[str, list[JobStatus]] = {}
    for job in jobs:
        by_name.setdefault(job.name, []).append(job)
    out = []
    for name, parts in by_name.items():
        epoch = max(j.epoch for j in parts)
        out.append(
            JobStatus(
                name=name,
                live=any(j.live for j in parts),
                lease_left_s=max(j.lease_left_s for j in parts),
                epoch=epoch,
                samples=sum(j.samples for j in parts),
                served=sum(j.served for j in parts if j.epoch == epoch),
                total=sum(j.total for j in parts),
                hits=sum(j.hits for j in parts),
            )
        )
    return out


def _tiers(used: dict[str, str], info: dict[str, str]) -> list[TierStatus]:
    forms = ["e", "d"]
    forms += sorted(
        {
            f
            for f in list(used)
            + [k.removeprefix(BUDGET_FIELD) for k in info if k.startswith(BUDGET_FIELD)]
            if f == "a" or f.startswith("a:")
        }
    )
    out = []
    for form in forms:
        tier = _TIER_OF[form[0]]
        budget = info.get(BUDGET_FIELD + form)
        out.append(
            TierStatus(
                tier=tier,
                form=form,
                bytes=_int(used.get(form)),
                entries=_int(used.get(f"n{form}")),
                budget=None if budget is None else _int(budget),
            )
        )
    return out


def dataset_status(client: Any, dataset: str, now: int, prefix: str) -> DatasetStatus:
    """What the cache holds of ``dataset`` at server time ``now``."""
    keys = Keys(dataset, prefix)
    info = {text_of(k): text_of(v) for k, v in client.hgetall(keys.info).items()}
    parts = part_names(client, dataset, prefix)  # (its shards, where it is kept in shards)
    counts: dict[str, int] = {}
    jobs: list[JobStatus] = []
    for part in parts:
        for k, v in client.hgetall(Keys(part, prefix).used).items():
            counts[text_of(k)] = counts.get(text_of(k), 0) + _int(text_of(v))
        jobs += _jobs(client, Keys(part, prefix), now)
    used = {k: str(v) for k, v in counts.items()}
    hits = {t: _int(used.get(f"hits:{LETTER[t]}")) for t in SPLIT_ORDER}
    return DatasetStatus(
        dataset=dataset,
        about=info.get("about", ""),
        samples=_int(info["samples"]) if "samples" in info else None,
        tiers=_tiers(used, info),
        jobs=jobs if len(parts) == 1 else _merged(jobs),
        shards=len(parts),
        served=_int(used.get("served")),
        hits=hits,
        substitutions=_int(used.get("subs")),
        plan=PlanRecord.from_json(client.get(keys.plan)),
    )


def cache_status(
    client: Any,
    url: str,
    datasets: list[str] | None = None,
    prefix: str = ods_defaults.KEY_PREFIX,
) -> CacheStatus:
    """The status of ``datasets`` (default: every dataset found) in the cache ``client`` talks
    to (``url``: how to name it, password redacted)."""
    if routing.is_cluster(client):  # per primary
        memory = client.info("memory", target_nodes=client.PRIMARIES)
    else:
        memory = client.info("memory")
    if "used_memory" not in memory:  # a cluster: per node
        nodes = list(memory.values())
        used = sum(_int(n.get("used_memory")) for n in nodes)
        maxmemory = sum(_int(n.get("maxmemory")) for n in nodes)
        policy = ",".join(sorted({str(n.get("maxmemory_policy", "")) for n in nodes}))
    else:
        used, maxmemory = _int(memory["used_memory"]), _int(memory.get("maxmemory"))
        policy = str(memory.get("maxmemory_policy", ""))
    now = server_ms(client)
    names = find_datasets(client, prefix) if datasets is None else datasets
    shares = NodeShares(client, prefix)
    total, claims, _ = shares.claims()
    given = allocate(total, claims)
    found = [dataset_status(client, d, now, prefix) for d in names]
    found = [
        replace(d, share=given.get(d.dataset), want=claims[d.dataset].want)
        if d.dataset in claims
        else d
        for d in found
    ]
    return CacheStatus(
        url=url,
        used_memory=used,
        maxmemory=maxmemory,
        maxmemory_policy=policy,
        datasets=found,
        tiers_total=total if claims else None,
    )
