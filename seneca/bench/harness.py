"""``seneca bench``: every loader with K concurrent jobs, side by side, in one run.

For each cache fraction in ``--cache-frac``, each K in ``--jobs`` and each loader in
``--loaders`` (``--repeats`` rounds, each round in an order of its own) it warms (or drops) the
dataset's page cache, clears the cache node, starts K jobs as separate processes that begin
together (each: the loader, ``--epochs`` epochs, an optional ``--step-ms`` sleep per batch
standing in for the GPU step), and records per job the first-epoch and stable-epoch samples/s,
the loader's counters and the split it ended with; per configuration the makespan, aggregate
samples/s (all samples / makespan) and the machine's CPU utilisation (``/proc/stat``). Writes
``results.json``, ``results.md`` and PNG plots to ``--out``.
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ods import defaults as ods_defaults
from seneca import defaults
from seneca.bench.baselines import LOADERS, variant
from seneca.bench.spawn import ProcessGroup, job_context
from seneca_base.errors import ConfigError
from seneca_base.tiers import SPLIT_ORDER, TIERS

__all__ = ["BenchConfig", "clear_cache", "run_bench", "run_configuration"]


@dataclass
class BenchConfig:
    """What ``seneca bench`` runs (see the module docstring and ``seneca bench --help``)."""

    data: str
    out: str
    jobs: list[int] = field(default_factory=lambda: [1, 2, 3])
    loaders: list[str] = field(
        default_factory=lambda: ["pytorch", "pytorch-tuned", "minio", "quiver", "mdp", "seneca"]
    )
    #: cache / encoded dataset: one fraction, or several (each a configuration of its own)
    cache_frac: float | list[float] = 0.25
    epochs: int = 2
    batch_size: int = 32
    #: loader workers per job: one count, or several (each a configuration of its own)
    workers: int | list[int] = 0
    #: batches each worker loads ahead (DataLoader's prefetch_factor; None: its default, 2)
    prefetch_factor: int | None = None
    crop: int = 224
    step_ms: float = 0.0
    storage_mbps: float | None = None
    #: E, D, A fractions, or "auto": each job's loader plans the split (SenecaLoader's default)
    split: tuple[float, float, float] | str = tuple(defaults.SPLIT[t] for t in SPLIT_ORDER)
    cache: str | None = None
    repeats: int = 1  # rounds of every configuration, each round in its own shuffled order
    order_seed: int = 0
    page_cache: str = "warm"  # before each configuration: "warm" (read every file) or "drop"

    @property
    def fractions(self) -> list[float]:
        """The cache fractions to run, as a list."""
        return [self.cache_frac] if isinstance(self.cache_frac, (int, float)) else self.cache_frac

    @property
    def worker_counts(self) -> list[int]:
        """The numbers of workers per job to run, as a list."""
        return [self.workers] if isinstance(self.workers, int) else self.workers

    def check(self) -> None:
        for name in self.loaders:
            kind, _ = variant(name, self.split)  # raises ConfigError naming --loaders
            if kind not in LOADERS:
                raise ConfigError(f"--loaders: unknown {kind!r}; loaders are {', '.join(LOADERS)}")
        fractions = self.fractions
        pf = self.prefetch_factor
        for name, value, ok in (
            ("--jobs", self.jobs, self.jobs and all(k >= 1 for k in self.jobs)),
            ("--cache-frac", fractions, fractions and all(0 < f <= 10 for f in fractions)),
            ("--epochs", self.epochs, self.epochs >= 1),
            ("--batch-size", self.batch_size, self.batch_size >= 1),
            ("--workers", self.workers, self.worker_counts and min(self.worker_counts) >= 0),
            ("--repeats", self.repeats, self.repeats >= 1),
            ("--page-cache", self.page_cache, self.page_cache in ("warm", "drop")),
            ("--step-ms", self.step_ms, self.step_ms >= 0),
            ("--prefetch-factor", pf, pf is None or pf >= 1),
        ):
            if not ok:
                raise ConfigError(f"{name}: out of range: {value!r}")


def _cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine."""
    with open("/proc/stat") as f:
        parts = [float(v) for v in f.readline().split()[1:]]
    idle = parts[3] + (parts[4] if len(parts) > 4 else 0.0)
    return sum(parts) - idle, sum(parts)


def _job(spec: dict[str, Any], throttle: Any, barrier: Any, out: Any) -> None:
    """One training job (a separate process): run the loader and report what it measured."""
    try:
        import torch

        from seneca.bench.baselines import make_loader
        from seneca.pipeline.transforms import default_train_transform

        torch.set_num_threads(1)
        loader = make_loader(
            spec["loader"],
            spec["data"],
            transform=default_train_transform(spec["crop"]),
            batch_size=spec["batch_size"],
            num_workers=spec["workers"],
            cache=spec["cache"],
            cache_size=spec["cache_size"],
            split=spec["split"],
            job=spec["job"],
            throttle=throttle,
            persistent_workers=spec["workers"] > 0,
            **_prefetch(spec),
        )
        barrier.wait()
        epochs = [_epoch(loader, spec["step_ms"]) for _ in range(spec["epochs"])]
        stats = loader.stats() if hasattr(loader, "stats") else None
        split = getattr(loader, "split", None)  # the split in use at the end (auto: planned)
        planner = getattr(loader, "planner", None)
        plans = [
            {"split": p.split_text(), "version": p.version, "source": p.source, "at_ms": p.at_ms,
             "jobs": p.inputs.get("cluster.jobs"), "throughput": p.throughput, "gain": p.gain}
            for p in (planner.history if planner else [])
        ]  # fmt: skip
        report = {"job": spec["job"], "epochs": epochs, "stats": stats, "split": split}
        out.put({**report, "plans": plans, "end": time.time()})
    except BaseException as e:  # reported to the parent
        barrier.abort()
        out.put({"job": spec["job"], "error": f"{type(e).__name__}: {e}"})


def _prefetch(spec: dict[str, Any]) -> dict[str, int]:
    """DataLoader's ``prefetch_factor`` for a job: given only with workers (DataLoader refuses
    it without) and when the bench was given one."""
    if spec["workers"] > 0 and spec.get("prefetch_factor") is not None:
        return {"prefetch_factor": spec["prefetch_factor"]}
    return {}


def _epoch(loader: Any, step_ms: float) -> dict[str, float]:
    """One epoch: samples, batches and seconds, each batch followed by a ``step_ms`` sleep."""
    start, n, batches = time.perf_counter(), 0, 0
    for _, y in loader:
        n += len(y)
        batches += 1
        if step_ms:
            time.sleep(step_ms / 1000)
    return {"samples": n, "batches": batches, "seconds": time.perf_counter() - start}


def clear_cache(url: str) -> None:
    """Delete every Seneca key of the cache at ``url`` (what a configuration left behind)."""
    from ods import routing
    from seneca.cache.client import CacheClient

    cache = CacheClient(url)
    client = cache.redis  # every primary of a cluster
    keys = list(client.scan_iter(match=f"{ods_defaults.KEY_PREFIX}:*", count=1000))
    for k in range(0, len(keys), 500):
        routing.run(client, [("UNLINK", *keys[k : k + 500])])
    cache.close()


def _summary(
    kind: str, k: int, results: list[dict], makespan: float, cpu: float, n: int, step_s: float
) -> dict:
    """One configuration's figures from its jobs' reports (``step_s``: the emulated step)."""
    per_job = []
    decodes = transforms = served = 0
    for r in results:
        e = r["epochs"]
        first = e[0]["samples"] / e[0]["seconds"]
        stable = e[1:] or e
        job = {
            "job": r["job"],
            "first_epoch_samples_per_s": first,
            "stable_samples_per_s": sum(x["samples"] for x in stable)
            / sum(x["seconds"] for x in stable),
            "samples": sum(x["samples"] for x in e),
            # with a step, the emulated GPU's idle share: its steps' nominal time against the wall
            # time (a sleep that overruns on a busy machine is not time a GPU would be busy)
            "gpu_idle": 1 - sum(x["batches"] for x in e) * step_s / sum(x["seconds"] for x in e)
            if step_s
            else None,
        }
        s = r["stats"]  # every loader counts what it does where it happens
        job["hit_rate"] = {t: s[t]["hit_rate"] for t in TIERS}
        job["decodes"], job["transforms"] = s["decodes"], s["transforms"]
        job["storage_reads"], job["bytes_storage"] = s["storage_reads"], s["bytes_storage"]
        job["substitutions"] = s.get("substitutions", 0)
        if r.get("split"):
            job["split"] = "-".join(f"{100 * r['split'][t]:.0f}" for t in SPLIT_ORDER)
            job["plans"] = r["plans"]  # the plans it used, oldest first (auto)
        # a job never reads augmented copies it made (the engine marks them used by it): its
        # augmented hits are crops another job made
        job["crops_from_other_jobs"] = s["augmented"]["hits"] / max(job["samples"], 1)
        decodes += job["decodes"]
        transforms += job["transforms"]
        served += job["samples"]
        per_job.append(job)
    epochs = len(results[0]["epochs"])
    return {
        "loader": kind,
        "jobs": k,
        "makespan_s": makespan,
        "aggregate_samples_per_s": served / makespan,
        "cpu_utilisation": cpu,
        "decodes_per_sample_epoch": decodes / (n * epochs),
        "transforms_per_sample_epoch": transforms / (n * epochs),
        "per_job": per_job,
    }


def run_configuration(
    cfg: BenchConfig,
    name: str,
    k: int,
    url: str,
    cache_size: int,
    n: int,
    workers: int | None = None,
) -> dict:
    """Run ``k`` concurrent jobs of loader ``name`` (a kind of :data:`LOADERS`, or
    ``kind@split``) with ``workers`` each (default: the config's first count) and a cache of
    ``cache_size`` bytes (a cleared cache is the caller's task)."""
    if workers is None:
        workers = cfg.worker_counts[0]
    from seneca.bench.throttle import Throttle

    ctx = job_context()
    throttle = Throttle(cfg.storage_mbps * 1e6, ctx) if cfg.storage_mbps else None
    kind, split = variant(name, cfg.split)
    specs = []
    for j in range(k):
        job = f"bench-{name.replace('@', '-')}-{k}-{j}"
        spec = {**asdict(cfg), "loader": kind, "split": split, "job": job, "cache": url}
        spec["cache_size"], spec["workers"] = cache_size, workers
        specs.append((spec, throttle))
    group = ProcessGroup(_job, specs, parent_waits=True, context=ctx)
    group.start_together(timeout=600)
    busy0, total0 = _cpu_times()
    start = time.time()
    results = group.reports(3600, f"bench {name} x{k}")
    busy1, total1 = _cpu_times()
    makespan = max(r["end"] for r in results) - start
    cpu = (busy1 - busy0) / max(total1 - total0, 1e-9)
    return _summary(name, k, results, makespan, cpu, n, cfg.step_ms / 1000)


def _schedule(cfg: BenchConfig) -> list[tuple[int, float, int, int, str]]:
    """(round, cache fraction, workers, jobs, loader) of every run: each round runs every
    configuration once, in an order of its own (seeded by ``order_seed``), so no loader always
    runs first."""
    configs = [
        (f, w, k, kind)
        for f in cfg.fractions
        for w in cfg.worker_counts
        for k in cfg.jobs
        for kind in cfg.loaders
    ]
    out = []
    for r in range(cfg.repeats):
        order = list(configs)
        random.Random(cfg.order_seed + r).shuffle(order)
        out += [(r, *c) for c in order]
    return out


def prepare_page_cache(storage: Any, how: str) -> None:
    """Give every configuration the same page cache: ``warm`` reads every file of the dataset,
    ``drop`` asks the kernel to drop the files' cached pages (``posix_fadvise``; data on tmpfs
    stays in memory)."""
    for i in range(len(storage)):
        fd = os.open(storage.path(i), os.O_RDONLY)
        try:
            if how == "drop":
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            else:
                while os.read(fd, 1 << 20):
                    pass
        finally:
            os.close(fd)


def run_bench(cfg: BenchConfig, progress: bool = True) -> dict:
    """Run every configuration; write results.json, results.md and plots; return the results."""
    from tqdm import tqdm

    from seneca.bench.provenance import provenance
    from seneca.bench.report import write_reports
    from seneca.bench.splits import compare
    from seneca.bench.splits import markdown as splits_markdown
    from seneca.pipeline.storage import Storage

    cfg.check()
    storage = Storage.from_folder(cfg.data)
    n = len(storage)
    encoded = sum(os.path.getsize(storage.path(i)) for i in range(n))
    sizes = {f: max(1, int(f * encoded)) for f in cfg.fractions}
    url = cfg.cache
    if url is None:
        from seneca.cache.embedded import acquire_embedded

        url = acquire_embedded(int(max(sizes.values()) * 1.5) + 64_000_000, name="bench")
    Path(cfg.out).mkdir(parents=True, exist_ok=True)
    runs = []
    bar = tqdm(_schedule(cfg), desc="seneca bench", unit="config", disable=not progress)
    for r, f, w, k, kind in bar:
        bar.set_postfix_str(f"{kind} x{k}, {w} workers, cache {f:g}, round {r + 1}")
        prepare_page_cache(storage, cfg.page_cache)
        clear_cache(url)
        run = run_configuration(cfg, kind, k, url, sizes[f], n, w)
        runs.append({**run, "cache_frac": f, "cache_bytes": sizes[f], "workers": w, "round": r})
    clear_cache(url)
    result: dict[str, Any] = {
        "config": {
            **asdict(cfg),
            "samples": n,
            "encoded_bytes": encoded,
            "cache_frac": cfg.fractions[0] if len(sizes) == 1 else cfg.fractions,
            "cache_bytes": sizes[cfg.fractions[0]] if len(sizes) == 1 else list(sizes.values()),
        },
        "provenance": provenance(),
        "runs": runs,
    }
    Path(cfg.out, "results.json").write_text(json.dumps(result, indent=2) + "\n")
    write_reports(result, cfg.out)
    rows = compare(result)
    if rows:  # a planned split ran beside fixed ones
        with open(Path(cfg.out, "results.md"), "a") as f:
            f.write("\nThe planned split against fixed ones:\n\n" + splits_markdown(rows))
    return result
