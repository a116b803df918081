"""``ods simulate``: drive the real ODS code against a real Redis with payload-free samples.

Setup: N samples, K jobs reading batches of B for E epochs, a cache holding F x N samples (one
tier, capacity in samples). A miss loads instantly and is admitted if the policy finds room.
Jobs are interleaved by their speeds: each batch advances a job's virtual clock by 1 / speed,
and the job with the earliest clock goes next (ties: lower job number).

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
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import redis

from ods.servertime import NOISE_NAME, ServerTimes, summarize
from ods.store import OdsStore
from seneca_base.errors import ConfigError

__all__ = ["BASELINES", "SimConfig", "simulate_baseline", "simulate_ods"]

BASELINES = ("random", "minio", "quiver")
_TIER = "encoded"


@dataclass(frozen=True)
class SimConfig:
    """What ``ods simulate`` runs; see the module docstring."""

    samples: int
    jobs: int
    cache_frac: float
    speeds: tuple[float, ...] = ()
    batch: int = 64
    epochs: int = 3
    policy: str = "seneca"
    seed: int = 0
    max_batches: int | None = None

    def __post_init__(self) -> None:
        checks = [
            ("--samples", self.samples, self.samples >= 1),
            ("--jobs", self.jobs, self.jobs >= 1),
            ("--batch", self.batch, self.batch >= 1),
            ("--epochs", self.epochs, self.epochs >= 1),
            ("--cache-frac", self.cache_frac, 0 <= self.cache_frac <= 1),
        ]
        for name, value, ok in checks:
            if not ok:
                raise ConfigError(f"{name}: out of range: {value!r}")
        if self.speeds and len(self.speeds) != self.jobs:
            raise ConfigError(f"--speeds: expected {self.jobs} values, got {len(self.speeds)}")
        if any(s <= 0 for s in self.speeds):
            raise ConfigError(f"--speeds: must be positive, got {list(self.speeds)}")

    @property
    def capacity(self) -> int:
        return int(self.cache_frac * self.samples)

    def job_speeds(self) -> list[float]:
        return list(self.speeds) or [1.0] * self.jobs


@dataclass
class _Job:
    name: str
    speed: float
    clock: float = 0.0
    epoch: int = 0
    served: int = 0
    hits: int = 0
    substitutions: int = 0
    done: bool = False
    extra: dict = field(default_factory=dict)


def _schedule(jobs: list[_Job], max_batches: int | None) -> Iterator[_Job]:
    """Jobs in virtual-time order until all are done (or ``max_batches`` batches)."""
    count = 0
    while True:
        active = [j for j in jobs if not j.done]
        if not active or (max_batches is not None and count >= max_batches):
            return
        job = min(active, key=lambda j: (j.clock, jobs.index(j)))
        yield job
        job.clock += 1.0 / job.speed
        count += 1


def _report(name: str, cfg: SimConfig, jobs: list[_Job], loads: int) -> dict:
    served = sum(j.served for j in jobs)
    hits = sum(j.hits for j in jobs)
    return {
        "loader": name,
        "hit_rate": hits / served if served else 0.0,
        "served": served,
        "storage_loads": loads,
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
    store = OdsStore(
        client,
        f"simulate-{uuid.uuid4().hex[:8]}",
        cfg.samples,
        policy=cfg.policy,
        capacity={_TIER: cfg.capacity},
        lease=3600,
        seed=cfg.seed,
    )
    jobs = [_Job(f"job{k}", s) for k, s in enumerate(cfg.job_speeds())]
    latencies: list[float] = []
    loads, memory = 0, None
    with ServerTimes(client) as server:
        try:
            loads, memory = _run(client, store, cfg, jobs, latencies, server)
        finally:
            store.clear()
    out = _report(f"ods-{cfg.policy}", cfg, jobs, loads)
    ms = sorted(x * 1e3 for x in latencies)
    out["decision_ms"] = {
        "p50": statistics.median(ms) if ms else 0.0,
        "p99": ms[min(len(ms) - 1, int(0.99 * len(ms)))] if ms else 0.0,
        "batches": len(ms),
    }
    out["metadata_bytes"] = memory
    out["server_ms"] = {}
    if server.ms:  # the engine's calls by name, then the constant-work script's
        noise = {NOISE_NAME: server.noise_calls}
        out["server_ms"] = summarize(server.ms, store.commands) | summarize(server.ms, noise)
    return out


def _run(
    client: redis.Redis,
    store: OdsStore,
    cfg: SimConfig,
    jobs: list[_Job],
    latencies: list[float],
    server: ServerTimes,
) -> tuple[int, int]:
    """The batches of ``jobs``; returns storage loads and the metadata bytes with every job
    registered."""
    rng = random.Random(cfg.seed)
    loads, memory = 0, None
    for job in jobs:
        store.join(job.name)
        store.start_epoch(job.name, 0)
    for count, job in enumerate(_schedule(jobs, cfg.max_batches)):
        if count % 16 == 15:
            server.noise()
            server.drain()
        start = time.perf_counter()
        d = store.decide(job.name, cfg.batch)
        latencies.append(time.perf_counter() - start)
        if not d.indices:
            if job.epoch + 1 < cfg.epochs:
                job.epoch += 1
                store.start_epoch(job.name, job.epoch)
            else:
                if memory is None:
                    memory = store.memory()  # every job still registered
                job.done = True
                store.leave(job.name)
            continue
        job.served += len(d.indices)
        job.hits += d.hits
        job.substitutions += d.substitutions
        evicted = store.release(job.name, d)
        misses = [(i, _TIER, 1, b"") for i, t in zip(d.indices, d.tiers, strict=True) if not t]
        loads += len(misses)
        store.admit(job.name, misses)
        if evicted:  # 'paper' policy: refill the room with random samples from storage
            refill = _uncached(client, store, rng, len(evicted), cfg.samples)
            loads += len(refill)
            store.admit(job.name, [(i, _TIER, 1, b"") for i in refill])
    if memory is None:
        memory = store.memory()
    return loads, memory


def _uncached(
    client: redis.Redis, store: OdsStore, rng: random.Random, count: int, n: int
) -> list[int]:
    key = store.tier_key(_TIER)
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
    rng = random.Random(cfg.seed)
    jobs = [_Job(f"job{k}", s) for k, s in enumerate(cfg.job_speeds())]
    cache: OrderedDict[int, None] = OrderedDict()
    loads = 0
    for job in jobs:
        job.extra["order"] = _order(rng, cfg.samples)
    for job in _schedule(jobs, cfg.max_batches):
        order: list[int] = job.extra["order"]
        if not order:
            job.epoch += 1
            if job.epoch >= cfg.epochs:
                job.done = True
            else:
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
