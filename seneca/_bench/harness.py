"""``seneca bench``: every loader with K concurrent jobs, side by side, in one run.

For each cache fraction in ``--cache-frac``, each K in ``--jobs`` and each loader in
``--loaders`` (``--repeats`` rounds, each round in an order of its own) it warms (or drops) the
dataset's page cache, clears the cache node, starts K jobs that begin together, each a fresh
interpreter as a user's training script is (``seneca._bench.fresh``): the loader, ``--epochs``
epochs, and per batch nothing, a ``--step-ms`` sleep standing in for the GPU step, or a real
step of a torchvision ``--model`` on ``--device`` (``seneca._bench.training``). It records per
job the first-epoch and stable-epoch samples/s, the wait for each epoch's first batch, the
loader's counters and the split it ended with; per configuration the makespan, aggregate
samples/s (all samples / makespan), the machine's CPU utilisation (``/proc/stat``) and, on a
CUDA device, how busy the GPU was (NVML, ``seneca._bench.gpu_busy``). Writes ``results.json``,
``results.md`` and PNG plots to ``--out``.
"""

from __future__ import annotations

import gc
import json
import os
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from seneca import defaults
from seneca._bench.baselines import LOADERS, variant
from seneca.loader.timeline import ENV as TIMELINE_ENV
from seneca_base.errors import ConfigError
from seneca_base.tiers import SPLIT_ORDER, TIERS

__all__ = ["BenchConfig", "clear_cache", "run_bench", "run_configuration", "run_job"]


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
    #: DataLoader's ``persistent_workers`` for every loader (its default: off)
    persistent_workers: bool = False
    crop: int = 224
    step_ms: float = 0.0
    #: of each emulated step, the milliseconds spent holding the GIL (spinning in Python) before
    #: the rest of it sleeps, as a training loop holds it while it launches kernels
    step_gil_ms: float = 0.0
    #: each job's speed: job k's step (and the part of it holding the GIL) is the emulated
    #: step divided by ``speeds[k % len(speeds)]`` (empty: every job at speed 1)
    speeds: list[float] = field(default_factory=list)
    #: a torchvision model each job trains (None: no model; ``step_ms`` or nothing per batch)
    model: str | None = None
    #: where the jobs' batches go and the model trains ("cuda", "cuda:1", "cpu"; None: the
    #: batches stay on the CPU, as a loader yields them)
    device: str | None = None
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

    def speed_of(self, job: int) -> float:
        """The speed of the ``job``-th job (:attr:`speeds`)."""
        return self.speeds[job % len(self.speeds)] if self.speeds else 1.0

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
            ("--step-gil-ms", self.step_gil_ms, 0 <= self.step_gil_ms <= self.step_ms),
            ("--prefetch-factor", pf, pf is None or pf >= 1),
        ):
            if not ok:
                raise ConfigError(f"{name}: out of range: {value!r}")
        if self.model and self.step_ms:
            raise ConfigError("give --model or --step-ms, not both")
        if self.speeds and (not self.step_ms or min(self.speeds) <= 0):
            raise ConfigError(f"--speeds: positive numbers with --step-ms, got {self.speeds!r}")
        if self.model:
            import torchvision

            if self.model not in torchvision.models.list_models():
                raise ConfigError(
                    f"--model: torchvision has no model {self.model!r} (resnet18, resnet50, "
                    "mobilenet_v3_large, ...: torchvision.models.list_models())"
                )
        if self.device is not None:
            from seneca.loader import resolve_device

            try:
                resolve_device(self.device)
            except ConfigError as e:
                raise ConfigError(f"--{e}") from None


def _cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine."""
    with open("/proc/stat") as f:
        parts = [float(v) for v in f.readline().split()[1:]]
    idle = parts[3] + (parts[4] if len(parts) > 4 else 0.0)
    return sum(parts) - idle, sum(parts)


def run_job(spec: dict[str, Any], ready: Callable[[], None]) -> dict[str, Any]:
    """One training job (a fresh interpreter, ``seneca._bench.fresh``): make the loader (and
    the model), call ``ready`` (it returns when every job is ready), run the epochs and return
    what the job measured."""
    import torch

    from seneca._bench.baselines import make_loader
    from seneca._bench.throttle import Throttle
    from seneca._bench.training import Trainer
    from seneca.pipeline.transforms import default_train_transform

    torch.set_num_threads(1)
    throttle = spec["throttle"] and Throttle(spec["throttle"]["rate"], spec["throttle"]["path"])
    if spec.get("timeline"):  # read when the loader is made: its batches' stage times
        os.environ[TIMELINE_ENV] = spec["timeline"]
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
        device=spec["device"],
        persistent_workers=spec["workers"] > 0 and spec["persistent_workers"],
        **_prefetch(spec),
    )
    trainer = Trainer(
        spec["model"], spec["device"], spec["step_ms"], spec["classes"], spec["crop"],
        gil_ms=spec["step_gil_ms"],
    )  # fmt: skip
    trainer.warm_up(spec["batch_size"])
    ready()
    cpu = _cpu_used()
    epochs = [_epoch(loader, trainer) for _ in range(spec["epochs"])]
    stats = loader.stats()
    split = getattr(loader, "split", None)  # the split in use at the end (auto: planned)
    planner = getattr(loader, "planner", None)
    del loader  # its workers (persistent ones too) end, so their CPU time is counted
    end = time.time()  # the job's end: trained, its loader gone
    # the harness's own collection, not the job's: a full collection of the interpreter's
    # objects (torch's) took 0.2-0.4 s a job on 2 busy cores, whatever the loader
    gc.collect()
    cpu = {k: v - cpu[k] for k, v in _cpu_used().items()}
    plans = [
        {"split": p.split_text(), "version": p.version, "source": p.source, "at_ms": p.at_ms,
         "jobs": p.inputs.get("cluster.jobs"), "throughput": p.throughput, "gain": p.gain}
        for p in (planner.history if planner else [])
    ]  # fmt: skip
    report = {"job": spec["job"], "epochs": epochs, "stats": stats, "split": split}
    report["step_ms"] = spec["step_ms"]  # the job's own (--speeds)
    cpu["step"] = trainer.step_cpu_s
    return {**report, "plans": plans, "cpu_s": cpu, "end": end}


def _cpu_used() -> dict[str, float]:
    """CPU seconds (user + system) of this process (the loader process and the training loop)
    and of its ended children (the loader's workers), and this process's minor page faults."""
    import resource

    own, children = (
        resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return {
        "loader": own.ru_utime + own.ru_stime,
        "workers": children.ru_utime + children.ru_stime,
        "loader_page_faults": own.ru_minflt,
    }


def _prefetch(spec: dict[str, Any]) -> dict[str, int]:
    """DataLoader's ``prefetch_factor`` for a job: given only with workers (DataLoader refuses
    it without) and when the bench was given one."""
    if spec["workers"] > 0 and spec.get("prefetch_factor") is not None:
        return {"prefetch_factor": spec["prefetch_factor"]}
    return {}


def _epoch(loader: Any, trainer: Any) -> dict[str, float]:
    """One epoch: samples, batches, seconds, the wait for its first batch, the time from its
    last step to the loop's end (the loader's wind-down) and the decodes it made (from the
    loader's counters), each batch followed by ``trainer``'s step."""
    decodes = loader.stats()["decodes"]
    start, n, batches, first, stepped = time.perf_counter(), 0, 0, 0.0, 0.0
    for x, y in loader:
        if not batches:
            first = time.perf_counter() - start
        n += len(y)
        batches += 1
        trainer.step(x, y)
        stepped = time.perf_counter()
    end = time.perf_counter()
    trainer.drain()
    seconds = time.perf_counter() - start
    decodes = loader.stats()["decodes"] - decodes
    return {"samples": n, "batches": batches, "seconds": seconds, "first_batch_s": first,
            "end_s": end - (stepped or end), "decodes": decodes}  # fmt: skip


def clear_cache(url: str) -> None:
    """Delete every Seneca key of the cache at ``url`` (what a configuration left behind)."""
    from ods import routing
    from ods.keys import Keys
    from seneca._cache.client import CacheClient

    cache = CacheClient(url)
    client = cache.redis  # every primary of a cluster
    keys = list(client.scan_iter(match=Keys.everything(), count=1000))
    for k in range(0, len(keys), 500):
        routing.run(client, [("UNLINK", *keys[k : k + 500])])
    cache.close()


def _summary(kind: str, k: int, results: list[dict], makespan: float, cpu: float, n: int) -> dict:
    """One configuration's figures from its jobs' reports."""
    per_job = []
    decodes = transforms = served = 0
    for r in results:
        e = r["epochs"]
        step_s = r["step_ms"] / 1000  # the job's emulated step
        first = e[0]["samples"] / e[0]["seconds"]
        stable = e[1:] or e
        job = {
            "job": r["job"],
            "first_epoch_samples_per_s": first,
            "stable_samples_per_s": sum(x["samples"] for x in stable)
            / sum(x["seconds"] for x in stable),
            "samples": sum(x["samples"] for x in e),
            "epochs": e,
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
        job["cpu_s"] = r.get("cpu_s")
        job["loop_cpu_ms_per_batch"] = _loop_cpu_ms(r)
        job["ods_gone"] = s.get("ods_gone", 0)
        job["promised"] = [s.get("promised", 0), s.get("promises_kept", 0)]
        job["swapped"] = s.get("swapped", 0)
        job["admitted"] = {t: s[t].get("admitted", 0) for t in TIERS}
        job["full"] = {t: s[t].get("full", 0) for t in TIERS}
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


def _loop_cpu_ms(report: dict) -> float | None:
    """The training process's CPU per batch outside the step, in milliseconds: its CPU time
    (the loop and the loader's threads in it; not the workers) less the steps' own, as the
    loop's thread measured it."""
    cpu, batches = report.get("cpu_s"), sum(e["batches"] for e in report["epochs"])
    if not cpu or not batches:
        return None
    return 1000 * (cpu["loader"] - cpu.get("step", 0.0)) / batches


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
    from seneca._bench.fresh import FreshJobs
    from seneca._bench.gpu_busy import GpuBusy
    from seneca._bench.throttle import Throttle
    from seneca._cache.client import CacheClient

    throttle = Throttle(cfg.storage_mbps * 1e6) if cfg.storage_mbps else None
    kind, split = variant(name, cfg.split)
    classes = sum(1 for e in os.scandir(cfg.data) if e.is_dir())
    # a Seneca job with workers records its batches' timeline: the run's decode ceiling
    timeline = _timeline_folder(name, k) if kind == "seneca" and workers > 0 else None
    specs = []
    for j in range(k):
        job = f"bench-{name.replace('@', '-')}-{k}-{j}"
        spec = {**asdict(cfg), "loader": kind, "split": split, "job": job, "cache": url}
        spec["cache_size"], spec["workers"], spec["classes"] = cache_size, workers, classes
        spec["throttle"] = throttle and {"rate": throttle.rate, "path": throttle.path}
        spec["timeline"] = timeline and str(timeline)
        speed = cfg.speed_of(j)
        spec["step_ms"], spec["step_gil_ms"] = cfg.step_ms / speed, cfg.step_gil_ms / speed
        specs.append(spec)
    what = f"bench {name} x{k}"
    jobs = FreshJobs("seneca._bench.harness:run_job", specs)
    server = CacheClient(url)
    jobs.start_together(timeout=600, what=what)
    busy0, total0 = _cpu_times()
    start, served0 = time.time(), server.cpu_seconds()
    with GpuBusy(_cuda_index(cfg.device)) as gpu:
        results = jobs.reports(3600, what)
    busy1, total1 = _cpu_times()
    wall, served1 = time.time() - start, server.cpu_seconds()
    server.close()
    makespan = max(r["end"] for r in results) - start
    cpu = (busy1 - busy0) / max(total1 - total0, 1e-9)
    summary = _summary(name, k, results, makespan, cpu, n)
    summary["ceiling"] = timeline and _ceiling(cfg, timeline, n, cache_size, results[0]["split"])
    return {**summary, "gpu_busy": gpu.busy, "cache_cpu": _server_cores(served0, served1, wall)}


def _timeline_folder(name: str, k: int) -> Path:
    """Where a run's jobs write their timelines: in ``$SENECA_TIMELINE`` (kept) when it is
    set, else in a temporary directory (removed once read)."""
    import tempfile

    kept = os.environ.get(TIMELINE_ENV)
    if kept:
        folder = Path(kept, f"{name.replace('@', '-')}-{k}-{time.strftime('%H%M%S')}")
        folder.mkdir(parents=True, exist_ok=True)
        return folder
    return Path(tempfile.mkdtemp(prefix="seneca-timeline-"))


def _ceiling(
    cfg: BenchConfig, folder: Path, n: int, cache_size: int, split: dict | None
) -> dict | None:
    """The run's decode ceiling (``seneca._bench.ceiling``) from its jobs' timelines."""
    import shutil

    from seneca._bench.ceiling import capacity, decode_ceiling, value_bytes

    try:
        if not split:
            return None
        copies = capacity(cache_size, split, value_bytes(cfg.data, cfg.crop))
        crops_only = not split.get("decoded") and bool(split.get("augmented"))
        return decode_ceiling(folder, n, cfg.batch_size, cfg.epochs, copies, crops_only)
    finally:
        if not os.environ.get(TIMELINE_ENV):
            shutil.rmtree(folder, ignore_errors=True)


def _server_cores(
    before: tuple[float, float] | None, after: tuple[float, float] | None, seconds: float
) -> dict[str, float] | None:
    """The cache server's CPU over a run, in cores: all its threads, and its main thread (the
    one that serves every command, whose saturation caps the cache's rate)."""
    if before is None or after is None or seconds <= 0:
        return None
    return {
        "cores": (after[0] - before[0]) / seconds,
        "main_thread": (after[1] - before[1]) / seconds,
    }


def _cuda_index(device: str | None) -> int | None:
    """The index of the CUDA device ``device`` names (None: not a CUDA device)."""
    import torch

    where = torch.device(device) if device else None
    return None if where is None or where.type != "cuda" else where.index or 0


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

    from seneca._bench.provenance import provenance
    from seneca._bench.report import write_reports
    from seneca._bench.splits import compare
    from seneca._bench.splits import markdown as splits_markdown
    from seneca.pipeline.storage import Storage

    cfg.check()
    storage = Storage.from_folder(cfg.data)
    n = len(storage)
    encoded = sum(os.path.getsize(storage.path(i)) for i in range(n))
    sizes = {f: max(1, int(f * encoded)) for f in cfg.fractions}
    url = cfg.cache
    if url is None:
        from seneca._cache.embedded import acquire_embedded

        url = acquire_embedded(int(max(sizes.values()) * 1.5) + 64_000_000, name="bench", idle=0)
    Path(cfg.out).mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "config": {
            **asdict(cfg),
            "samples": n,
            "encoded_bytes": encoded,
            "cache_frac": cfg.fractions[0] if len(sizes) == 1 else cfg.fractions,
            "cache_bytes": sizes[cfg.fractions[0]] if len(sizes) == 1 else list(sizes.values()),
        },
        "provenance": provenance(),
        "runs": [],
    }
    # a progress bar on a terminal only (None: tqdm decides)
    bar = tqdm(
        _schedule(cfg), desc="seneca bench", unit="config", disable=None if progress else True
    )
    for r, f, w, k, kind in bar:
        bar.set_postfix_str(f"{kind} x{k}, {w} workers, cache {f:g}, round {r + 1}")
        prepare_page_cache(storage, cfg.page_cache)
        clear_cache(url)
        run = run_configuration(cfg, kind, k, url, sizes[f], n, w)
        result["runs"].append(
            {**run, "cache_frac": f, "cache_bytes": sizes[f], "workers": w, "round": r}
        )
        # written after every configuration: a run cut short keeps what it measured
        Path(cfg.out, "results.json").write_text(json.dumps(result, indent=2) + "\n")
    clear_cache(url)
    write_reports(result, cfg.out)
    rows = compare(result)
    if rows:  # a planned split ran beside fixed ones
        with open(Path(cfg.out, "results.md"), "a") as f:
            f.write("\nThe planned split against fixed ones:\n\n" + splits_markdown(rows))
    return result
