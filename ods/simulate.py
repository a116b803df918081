"""``ods simulate``: drive the real ODS code against a real Redis with payload-free samples.

Setup: N samples, K jobs reading batches of B for E epochs, a cache holding F x N samples (one
tier, capacity in samples). A miss loads instantly and is admitted if the policy finds room.
Jobs call in the order of their virtual clocks (``ods.schedule``): each call advances a job's
clock by 1 / speed, and a job may start late. Every result carries the ceiling of the run
(``ods.ceiling``): the hit rate left by the fewest storage loads any policy can make.

Baselines (``compare``), on the same setup, in plain Python: ``random`` (each job's own random
order, no substitution, an LRU cache), ``minio`` (same order, a static cache: admitted while
there is room, never evicted) and ``quiver`` (over-sample 10 x B of the job's unseen samples,
take the cached ones first; an LRU cache, so samples one job loads are there for the others: with
a static cache reordering alone cannot raise an epoch's hit rate).
"""

from __future__ import annotations

import random
import statistics
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import redis

from ods import defaults
from ods.ceiling import ceiling, crop_ceiling
from ods.losses import LossTrace, ShardedTrace
from ods.schedule import Step, schedule
from ods.servertime import NOISE_NAME, ServerTimes, summarize
from ods.shards import ShardedStore, open_store
from ods.store import OdsStore
from ods.store_api import Store
from seneca_base.errors import ConfigError

__all__ = ["BASELINES", "SIM_TIERS", "SimConfig", "simulate_baseline", "simulate_ods"]

BASELINES = ("random", "minio", "quiver")
#: the tiers a run's cache may be: one any job may read again, or crops (a job reads each once,
#: never its own)
SIM_TIERS = ("encoded", "augmented")


@dataclass(frozen=True)
class SimConfig:
    """What ``ods simulate`` runs; see the module docstring."""

    samples: int
    jobs: int
    cache_frac: float
    speeds: tuple[float, ...] = ()
    #: each job's start time, in epochs of a job of speed 1 (empty: all start at once)
    starts: tuple[float, ...] = ()
    batch: int = 64
    epochs: int = 3
    policy: str = "seneca"
    seed: int = 0
    max_batches: int | None = None
    #: batches a job has in the making: a batch's misses are admitted only after the job's
    #: next ``in_making`` calls (a loader's workers each make one; 0: at once)
    in_making: int = 0
    #: calls a job makes at a time (``ods.schedule``: workers that decide together)
    together: int = 1
    #: the cache's tier (see SIM_TIERS)
    tier: str = "encoded"
    #: a miss the engine promised (another job is making it: ``Decision.promised``) is read
    #: from the maker's copy when the batch is made (a load if the copy is not cached then), as
    #: SenecaLoader's workers do; off: it is loaded like any miss
    promise: bool = False
    #: a batch's misses past its first ``swap_every`` are swapped, when the batch is made, for
    #: copies cached since it was decided (``OdsStore.swap``), as SenecaLoader's workers swap
    #: the misses they have still to make (0: none swapped)
    swap_every: int = 0
    #: the metadata's shard size (``ods.shards``): a dataset of more samples is kept in shards
    shard_size: int = defaults.SHARD_SIZE

    def __post_init__(self) -> None:
        checks = [
            ("--samples", self.samples, self.samples >= 1),
            ("--jobs", self.jobs, self.jobs >= 1),
            ("--batch", self.batch, self.batch >= 1),
            ("--epochs", self.epochs, self.epochs >= 1),
            ("--cache-frac", self.cache_frac, 0 <= self.cache_frac <= 1),
            ("--in-making", self.in_making, self.in_making >= 0),
            ("--together", self.together, self.together >= 1),
            ("--swap-every", self.swap_every, self.swap_every >= 0),
            ("--tier", self.tier, self.tier in SIM_TIERS),
            ("--shard-size", self.shard_size, self.shard_size >= 1),
        ]
        for name, value, ok in checks:
            if not ok:
                raise ConfigError(f"{name}: out of range: {value!r}")
        if self.speeds and len(self.speeds) != self.jobs:
            raise ConfigError(f"--speeds: expected {self.jobs} values, got {len(self.speeds)}")
        if any(s <= 0 for s in self.speeds):
            raise ConfigError(f"--speeds: must be positive, got {list(self.speeds)}")
        if self.starts and len(self.starts) != self.jobs:
            raise ConfigError(f"--starts: expected {self.jobs} values, got {len(self.starts)}")
        if any(s < 0 for s in self.starts):
            raise ConfigError(f"--starts: must not be negative, got {list(self.starts)}")
        if self.samples > self.shard_size and (self.swap_every or self.policy == "paper"):
            raise ConfigError(
                f"--shard-size: a dataset in shards ({self.samples:,} samples, shards of "
                f"{self.shard_size:,}) is simulated without --swap-every and with the seneca "
                f"policy; give --shard-size {self.samples} to keep it in one"
            )

    @property
    def capacity(self) -> int:
        return int(self.cache_frac * self.samples)

    def job_speeds(self) -> list[float]:
        return list(self.speeds) or [1.0] * self.jobs

    def steps(self) -> list[Step]:
        """The run's calls, in order (``ods.schedule``)."""
        starts = list(self.starts) or None
        return schedule(
            self.samples,
            self.batch,
            self.epochs,
            self.job_speeds(),
            starts,
            self.max_batches,
            self.together,
        )


@dataclass
class _Job:
    name: str
    speed: float
    served: int = 0
    hits: int = 0
    substitutions: int = 0
    promised: int = 0  # misses taken as promised hits (--promise), and those read as hits
    kept: int = 0
    swapped: int = 0  # misses swapped for copies cached since their batch was decided
    extra: dict = field(default_factory=dict)


def _report(name: str, cfg: SimConfig, jobs: list[_Job], loads: int) -> dict:
    served = sum(j.served for j in jobs)
    hits = sum(j.hits for j in jobs)
    best = (crop_ceiling if cfg.tier == "augmented" else ceiling)(cfg.steps(), cfg.capacity)
    return {
        "loader": name,
        "hit_rate": hits / served if served else 0.0,
        "served": served,
        "storage_loads": loads,
        "loads_per_sample": loads / served if served else 0.0,
        "ceiling": {"hit_rate": best.hit_rate, "storage_loads": best.loads},
        "jobs": [
            {
                "job": j.name,
                "speed": j.speed,
                "served": j.served,
                "hit_rate": j.hits / j.served if j.served else 0.0,
                "substitutions": j.substitutions,
            }
            for j in jobs
        ],
    }


def simulate_ods(client: redis.Redis, cfg: SimConfig) -> dict:
    """Run the setup with the real ODS store; adds decision latency (at the client), server
    time per engine call (``server_ms``, see ``ods.servertime``) and metadata memory."""
    store = open_store(
        client,
        f"simulate-{uuid.uuid4().hex[:8]}",
        cfg.samples,
        cfg.shard_size,
        policy=cfg.policy,
        capacity={cfg.tier: cfg.capacity},
        lease=3600,
        seed=cfg.seed,
        lazy=True,
    )
    jobs = [_Job(f"job{k}", s) for k, s in enumerate(cfg.job_speeds())]
    latencies: list[float] = []
    trace = LossTrace(cfg.samples) if isinstance(store, OdsStore) else ShardedTrace(store.map)
    with ServerTimes(client) as server:
        try:
            memory = _run(client, store, cfg, jobs, latencies, server, trace)
        finally:
            store.clear()
    out = _report(f"ods-{cfg.policy}", cfg, jobs, trace.loads)
    out["loads_by_cause"] = dict(trace.counts)
    if cfg.promise:
        out["promised"] = {
            "taken": sum(j.promised for j in jobs),
            "kept": sum(j.kept for j in jobs),
        }
    if cfg.swap_every:
        out["swapped"] = sum(j.swapped for j in jobs)
    ms = sorted(x * 1e3 for x in latencies)
    out["decision_ms"] = {
        "p50": statistics.median(ms) if ms else 0.0,
        "p99": ms[min(len(ms) - 1, int(0.99 * len(ms)))] if ms else 0.0,
        "batches": len(ms),
    }
    out["metadata_bytes"] = memory
    out["server_ms"] = {}
    out["server_busy_ms"] = server.busy if server.ms else []  # (none: not measured)
    if server.ms:  # the engine's calls by name, then the constant-work script's
        noise = {NOISE_NAME: server.noise_calls}
        out["server_ms"] = summarize(server.ms, store.commands) | summarize(server.ms, noise)
    return out


def _run(
    client: redis.Redis,
    store: Store,
    cfg: SimConfig,
    jobs: list[_Job],
    latencies: list[float],
    server: ServerTimes,
    trace: LossTrace | ShardedTrace,
) -> int:
    """The calls of the run, its loads noted in ``trace``; returns the metadata bytes when
    the first job leaves (every job that has joined still registered)."""
    rng = random.Random(cfg.seed)
    memory = None
    joined: set[int] = set()
    making: dict[int, deque[_Making]] = {}  # per job, its batches in the making

    def admit(k: int, keep: int) -> None:
        """Make job ``k``'s oldest batches in the making until ``keep`` are left: its promised
        samples read from their makers' copies (a load where one is not cached), its loads
        admitted."""
        while len(making.get(k, ())) > keep:
            batch = making[k].popleft()
            made = batch.misses + swapped_late(k, batch)
            if batch.promised:
                cached = store.cached(cfg.tier, batch.promised)
                gone = [i for i, c in zip(batch.promised, cached, strict=True) if not c]
                jobs[k].hits += len(batch.promised) - len(gone)
                jobs[k].kept += len(batch.promised) - len(gone)
                trace.loaded(k, gone)
                made = made + gone
            store.admit(jobs[k].name, [(i, cfg.tier, 1, b"") for i in made])
            _cache_is(client, store, trace, cfg.tier, made)

    def swapped_late(k: int, batch: _Making) -> list[int]:
        """Swap the misses of job ``k``'s ``batch`` past its first ``swap_every``; returns
        those left to load (loaded)."""
        if not batch.later:
            return []
        name = jobs[k].name
        picks = store.swap(name, batch.epoch, batch.later)
        if picks:
            store.release(name, picks)
            trace.unserved(k, batch.later[: len(picks)])
            trace.served(k, [p.index for p in picks])
            jobs[k].hits += len(picks)
            jobs[k].swapped += len(picks)
        left = batch.later[len(picks) :]
        trace.loaded(k, left)
        return left

    for count, step in enumerate(cfg.steps()):
        job = jobs[step.job]
        if step.job not in joined:  # a job joins at its first call (late joiners: later)
            joined.add(step.job)
            store.join(job.name)
            store.start_epoch(job.name, 0)
            trace.start(step.job, 0)
        if count % 16 == 15:
            server.noise()
            server.drain()
        start = time.perf_counter()
        d = store.decide(job.name, cfg.batch)
        latencies.append(time.perf_counter() - start)
        if len(d.indices) != step.served:
            raise AssertionError(f"{job.name}: served {len(d.indices)}, expected {step.served}")
        if not d.indices:
            admit(step.job, 0)  # the epoch's last batches are made before the next starts
            if step.epoch + 1 < cfg.epochs:
                store.start_epoch(job.name, step.epoch + 1)
                trace.start(step.job, step.epoch + 1)
            else:
                if memory is None:
                    memory = store.memory()  # every job that has joined still registered
                store.leave(job.name)
                trace.leave(step.job)
            continue
        job.served += len(d.indices)
        job.hits += d.hits
        job.substitutions += d.substitutions
        evicted = store.release(job.name, d)
        trace.served(step.job, d.indices)
        misses = [i for i, t in zip(d.indices, d.tiers, strict=True) if not t]
        promised: list[int] = []
        if cfg.promise:  # the misses the engine promised: other jobs are making them now
            promised = [i for i in misses if i in d.promised]
            misses = [i for i in misses if i not in d.promised]
            job.promised += len(promised)
        later: list[int] = []
        if cfg.swap_every:  # (never a promised one: another job's mark)
            later = [i for i in misses if i not in d.promised][cfg.swap_every :]
            swapping = set(later)
            misses = [i for i in misses if i not in swapping]
        trace.loaded(step.job, misses)
        making.setdefault(step.job, deque()).append(_Making(misses, promised, later, d.epoch))
        admit(step.job, cfg.in_making)
        if evicted and cfg.policy == "paper":  # refill the room with samples from storage
            refill = _uncached(client, store, rng, len(evicted), cfg.samples, cfg.tier)
            trace.loaded(None, refill)
            store.admit(job.name, [(i, cfg.tier, 1, b"") for i in refill])
            _cache_is(client, store, trace, cfg.tier, refill)
    if memory is None:
        memory = store.memory()
    return memory


def _cache_is(
    client: redis.Redis,
    store: OdsStore | ShardedStore,
    trace: LossTrace | ShardedTrace,
    tier: str,
    loaded: list[int],
) -> None:
    """Show ``trace`` the cache after a call that loaded ``loaded``: its tier's bitmap, in
    shards each shard's that a call changed since it last looked."""
    if isinstance(store, OdsStore):
        trace.cache_is(client.get(store.tier_key(tier)) or b"", loaded)  # type: ignore[arg-type]
        return
    changed = store.changed() | set(store.map.split(loaded))
    bitmaps = {k: client.get(store.shards[k].tier_key(tier)) or b"" for k in changed}
    trace.cache_is(bitmaps, loaded)  # type: ignore[arg-type]


@dataclass
class _Making:
    """A batch in the making: its misses (loaded), its promised samples, and with swaps its
    misses to swap when it is made (``later``; of ``epoch``)."""

    misses: list[int]
    promised: list[int]
    later: list[int] = field(default_factory=list)
    epoch: int = 0


def _uncached(
    client: redis.Redis, store: OdsStore, rng: random.Random, count: int, n: int, tier: str
) -> list[int]:
    key = store.tier_key(tier)
    out: set[int] = set()
    for _ in range(count * 20):
        if len(out) >= count:
            break
        i = rng.randrange(n)
        if i not in out and not client.getbit(key, i):
            out.add(i)
    return sorted(out)


# -- baselines ----------------------------------------------------------------------------


def simulate_baseline(kind: str, cfg: SimConfig) -> dict:
    """Run a baseline (``random``, ``minio``, ``quiver``) on the same setup, in Python."""
    if kind not in BASELINES:
        raise ConfigError(f"baseline: expected one of {', '.join(BASELINES)}, got {kind!r}")
    if cfg.tier != "encoded":
        raise ConfigError(f"baseline {kind}: its cache is one any job reads again, not {cfg.tier}")
    rng = random.Random(cfg.seed)
    jobs = [_Job(f"job{k}", s) for k, s in enumerate(cfg.job_speeds())]
    cache: OrderedDict[int, None] = OrderedDict()
    loads = 0
    for job in jobs:
        job.extra["order"] = _order(rng, cfg.samples)
    for step in cfg.steps():
        job = jobs[step.job]
        order: list[int] = job.extra["order"]
        if not step.served:  # the epoch is over
            job.extra["order"] = _order(rng, cfg.samples)
            continue
        batch = _take(order, cfg.batch, cache, quiver=kind == "quiver")
        for i in batch:
            job.served += 1
            if i in cache:
                job.hits += 1
                if kind != "minio":
                    cache.move_to_end(i)
                continue
            loads += 1
            if len(cache) < cfg.capacity:
                cache[i] = None
            elif kind != "minio" and cfg.capacity > 0:
                cache.popitem(last=False)
                cache[i] = None
    return _report(kind, cfg, jobs, loads)


def _order(rng: random.Random, n: int) -> list[int]:
    order = list(range(n))
    rng.shuffle(order)
    order.reverse()  # pop() from the end takes the shuffled order front to back
    return order


def _take(order: list[int], batch: int, cache: Sequence | OrderedDict, quiver: bool) -> list[int]:
    if not quiver:
        return [order.pop() for _ in range(min(batch, len(order)))]
    window = order[-10 * batch :][::-1]  # the next 10 x B samples of this job's order
    hits = [i for i in window if i in cache][:batch]
    chosen = set(hits)
    for i in window:
        if len(chosen) >= batch:
            break
        chosen.add(i)
    keep = [i for i in order[-10 * batch :] if i not in chosen]
    del order[-10 * batch :]
    order.extend(keep)
    return [i for i in window if i in chosen]
