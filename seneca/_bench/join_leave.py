"""``seneca bench-timeline``: how the planned split and throughput move as jobs come and go.

Job ``a`` starts alone and trains ``epochs`` epochs with ``split="auto"`` (SenecaLoader's
default); when it starts epoch ``join_at`` (0-based: after ``join_at`` epochs), job ``b`` joins
(its process started with ``a``'s and waited, imports done) and trains ``epochs`` epochs too;
``a`` leaves when its epochs are done (its loader closed), so ``b`` finishes alone. Each job is
a separate process over one cache node; it reports every batch (time, samples) and every plan
it adopts (split, version, the live jobs it was planned for). Writes ``timeline.json`` (with
provenance) and ``timeline.png``: the split over time above, each job's and the aggregate
throughput (1 s bins) below, the join and the leave marked.
"""

from __future__ import annotations

import json
import queue
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from seneca._bench.spawn import job_context
from seneca_base.errors import ConfigError, SenecaError

__all__ = ["TimelineConfig", "plot_timeline", "run_timeline", "throughput_bins"]


@dataclass
class TimelineConfig:
    """What ``seneca bench-timeline`` runs (see the module docstring)."""

    data: str
    out: str
    epochs: int = 4
    join_at: int = 2
    cache_frac: float = 0.25
    batch_size: int = 32
    workers: int = 0
    crop: int = 224
    cache: str | None = None

    def check(self) -> None:
        for name, ok in (
            ("--epochs", self.epochs >= 1),
            ("--join-at", 0 < self.join_at < self.epochs),
            ("--cache-frac", 0 < self.cache_frac <= 10),
            ("--batch-size", self.batch_size >= 1),
            ("--workers", self.workers >= 0),
        ):
            if not ok:
                raise ConfigError(f"{name}: out of range ({asdict(self)})")


def _job(name: str, cfg: dict[str, Any], cache_size: int, url: str, events: Any, go: Any) -> None:
    """One job (a separate process): once ``go`` is set (None: at once), train, reporting
    batches, epochs and plans. Its imports come first, so that it starts when told to."""
    try:
        import torch

        from seneca._bench.baselines import make_loader
        from seneca.pipeline.transforms import default_train_transform

        torch.set_num_threads(1)
        if go is not None:
            go.wait()
        loader = make_loader(
            "seneca", cfg["data"], transform=default_train_transform(cfg["crop"]),
            batch_size=cfg["batch_size"], num_workers=cfg["workers"], cache=url,
            cache_size=cache_size, split="auto", job=f"timeline-{name}",
            persistent_workers=cfg["workers"] > 0,
        )  # fmt: skip
        seen = None
        for epoch in range(cfg["epochs"]):
            events.put(("epoch", name, time.time(), epoch))
            for _, y in loader:
                record = loader.planner.record if loader.planner else None
                if record is not None and record != seen:
                    seen = record
                    jobs = record.inputs.get("cluster.jobs")
                    events.put(("plan", name, time.time(), record.split_text(), record.version,
                                record.source, jobs))  # fmt: skip
                events.put(("batch", name, time.time(), len(y)))
        loader.close()  # leaves its job: the others see one job fewer
        events.put(("done", name, time.time()))
    except BaseException as e:  # reported to the parent
        events.put(("error", name, time.time(), f"{type(e).__name__}: {e}"))


def _collect(cfg: TimelineConfig, cache_size: int, url: str) -> list[tuple]:
    """Run the two jobs (``b`` starts when ``a`` starts epoch ``join_at``); every event."""
    ctx = job_context()
    events, go = ctx.Queue(), ctx.Event()
    body = asdict(cfg)
    procs = {
        "a": ctx.Process(target=_job, args=("a", body, cache_size, url, events, None)),
        "b": ctx.Process(target=_job, args=("b", body, cache_size, url, events, go)),
    }
    for p in procs.values():
        p.start()
    out: list[tuple] = []
    done = 0
    try:
        while done < 2:
            try:
                event = events.get(timeout=600)
            except queue.Empty:
                raise SenecaError("bench-timeline: a job stopped reporting") from None
            out.append(event)
            kind, name = event[0], event[1]
            if kind == "error":
                raise SenecaError(f"bench-timeline: job {name} failed: {event[3]}")
            done += kind == "done"
            if (kind, name) == ("epoch", "a") and event[3] == cfg.join_at:
                go.set()
    finally:
        go.set()  # (b never waits past a failure)
        for p in procs.values():
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    return out


def throughput_bins(events: list[tuple], start: float, width: float = 1.0) -> dict[str, list]:
    """Samples per second in bins of ``width`` seconds from ``start``: per job and in all
    (``"all"``), as lists over the bins (``"t"``: each bin's middle)."""
    batches = [e for e in events if e[0] == "batch"]
    end = max(e[2] for e in batches)
    n = int((end - start) // width) + 1
    per: dict[str, list[float]] = {}
    for _, name, t, size in batches:
        per.setdefault(name, [0.0] * n)[int((t - start) // width)] += size / width
    per["all"] = [sum(v[i] for v in per.values()) for i in range(n)]
    return {"t": [(i + 0.5) * width for i in range(n)], **per}


def run_timeline(cfg: TimelineConfig) -> dict[str, Any]:
    """Run the jobs, write ``timeline.json`` and ``timeline.png``; return the result."""
    import os

    from seneca._bench.harness import clear_cache
    from seneca._bench.provenance import provenance
    from seneca.pipeline.storage import Storage

    cfg.check()
    storage = Storage.from_folder(cfg.data)
    encoded = sum(os.path.getsize(storage.path(i)) for i in range(len(storage)))
    cache_size = max(1, int(cfg.cache_frac * encoded))
    url = cfg.cache
    if url is None:
        from seneca._cache.embedded import acquire_embedded

        url = acquire_embedded(int(cache_size * 1.5) + 64_000_000, name="bench", idle=0)
    clear_cache(url)
    events = _collect(cfg, cache_size, url)
    clear_cache(url)
    start = min(e[2] for e in events)
    result = {
        "config": {**asdict(cfg), "samples": len(storage), "cache_bytes": cache_size},
        "provenance": provenance(),
        "start": start,
        "events": [[e[0], e[1], e[2] - start, *e[3:]] for e in events],
        "throughput": throughput_bins(events, start),
    }
    Path(cfg.out).mkdir(parents=True, exist_ok=True)
    Path(cfg.out, "timeline.json").write_text(json.dumps(result, indent=1) + "\n")
    plot_timeline(result, str(Path(cfg.out, "timeline.png")))
    return result


def plot_timeline(result: dict[str, Any], path: str) -> None:
    """The split each job used over time (top) and throughput (bottom), joins and leaves
    marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    events = result["events"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
    end = max(e[2] for e in events)
    for name, style in (("a", "-"), ("b", "--")):
        plans = [e for e in events if e[0] == "plan" and e[1] == name]
        stop = next((e[2] for e in events if e[0] == "done" and e[1] == name), end)
        for tier, pos, color in (
            ("encoded", 0, "C0"),
            ("decoded", 1, "C1"),
            ("augmented", 2, "C2"),
        ):
            xs = [e[2] for e in plans] + [stop]
            ys = [int(e[3].split("-")[pos]) for e in plans]
            top.step(xs, ys + ys[-1:], where="post", linestyle=style, color=color,
                     label=f"{tier} (job {name})")  # fmt: skip
    top.set_ylabel("split, % of the cache")
    top.legend(fontsize=7, ncol=2)
    bins = result["throughput"]
    for name in [k for k in bins if k not in ("t",)]:
        bottom.plot(bins["t"], bins[name], label="all jobs" if name == "all" else f"job {name}",
                    linewidth=2 if name == "all" else 1)  # fmt: skip
    bottom.set_ylabel("samples/s (1 s bins)")
    bottom.set_xlabel("seconds")
    bottom.legend(fontsize=7)
    for e in events:
        if e[0] == "epoch" and e[1] == "b" and e[3] == 0:
            for ax in (top, bottom):
                ax.axvline(e[2], color="grey", linestyle=":")
            top.annotate("b joins", (e[2], 102), fontsize=7)
        if e[0] == "done" and e[1] == "a":
            for ax in (top, bottom):
                ax.axvline(e[2], color="grey", linestyle=":")
            top.annotate("a leaves", (e[2], 102), fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
