"""Jobs as real training scripts run them, on the embedded cache with default settings.

Each job is a fresh interpreter running a training script: a training loader and a validation
loader (``shuffle=False``, ``Resize`` + ``CenterCrop``), steps that take seconds (a sleep stands
for the GPU's work), a validation pass after every epoch. ``--jobs`` of them start at once; after
they end, ``--then`` more start one after another (a sweep). While they run, the driver reads
``seneca cache status`` every second and counts the times a running job was shown with its
lease run out. It prints one line per job and epoch and checks the targets::

    python scripts/training_script.py --data data/script --jobs 2 --epochs 2 --step 2 --out /tmp/ts

Targets: the training storage reads of the concurrent jobs at most 1.5 x the training set;
at most 4 plans per dataset per job; validation at 100% hits from its second pass; a job
started after the others ended at >= 90% hits in its first epoch; no lease of a running job
seen run out.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: the job: a training script as a user writes it, with SenecaLoader for DataLoader
JOB = """
import json, sys, time
import torch
from torchvision import datasets
from torchvision.transforms import v2
import seneca
from seneca import SenecaLoader

root, epochs, step = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
batch, workers = int(sys.argv[4]), int(sys.argv[5])
to_float = [
    v2.ToDtype(torch.float32, scale=True),
    v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
]
train_tf = v2.Compose([
    v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(), v2.PILToTensor(),
    seneca.CacheBoundary(), *to_float,
])
val_tf = v2.Compose([v2.Resize(256), v2.CenterCrop(224), v2.PILToTensor(), *to_float])
train_set = datasets.ImageFolder(f"{root}/train", train_tf)
val_set = datasets.ImageFolder(f"{root}/val", val_tf)
train = SenecaLoader(train_set, batch_size=batch, shuffle=True, num_workers=workers)
val = SenecaLoader(val_set, batch_size=batch, num_workers=workers)


def hits(stats):
    return sum(stats[t]["hits"] for t in ("augmented", "decoded", "encoded"))


out = {"epochs": []}
start = time.monotonic()
for epoch in range(epochs):
    train.reset_stats()
    for images, labels in train:
        time.sleep(step)  # the training step
    t = train.stats()
    val.reset_stats()
    for images, labels in val:
        pass
    v = val.stats()
    out["epochs"].append({
        "train_samples": t["samples"], "train_reads": t["storage_reads"],
        "train_hits": hits(t), "val_samples": v["samples"],
        "val_reads": v["storage_reads"], "val_hits": hits(v),
    })
out["seconds"] = time.monotonic() - start
loaders = (("train", train), ("val", val))
out["plans"] = {n: sorted({r.version for r in x.planner.history}) for n, x in loaders}
out["splits"] = {n: [r.split_text() for r in x.planner.history] for n, x in loaders}
print("RESULT " + json.dumps(out), flush=True)
"""


def _job(args: argparse.Namespace, env: dict[str, str]) -> subprocess.Popen:
    cmd = [sys.executable, "-c", JOB, args.data, str(args.epochs), str(args.step)]
    cmd += [str(args.batch), str(args.workers)]
    return subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )


def _result(proc: subprocess.Popen) -> dict:
    out, _ = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"a job failed with status {proc.returncode}")
    [line] = [x for x in out.splitlines() if x.startswith("RESULT ")]
    return json.loads(line[7:])


def _watch(procs: list[subprocess.Popen], lapsed: list[str]) -> None:
    """Poll the cache's status every second until ``procs`` end; note every running job shown
    with its lease run out."""
    from seneca._cache.client import CacheClient
    from seneca._cache.embedded import embedded_url
    from seneca._cache.status import cache_status
    from seneca_base.errors import SenecaError

    while any(p.poll() is None for p in procs):
        time.sleep(1.0)
        try:
            client = CacheClient(embedded_url())
            status = cache_status(client.redis, client.redacted)
        except SenecaError:
            continue
        for d in status.datasets:
            for j in d.jobs:
                pid = j.name.split(":")[1] if j.name.count(":") >= 2 else ""
                running = pid.isdigit() and any(str(p.pid) == pid for p in procs)
                if running and not j.live and any(p.poll() is None for p in procs):
                    lapsed.append(f"{d.about}: {j.name} ({-j.lease_left_s:.0f} s ago)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data", default="data/script", help="dataset root: train/ and val/ (made)")
    p.add_argument("--train-images", type=int, default=600)
    p.add_argument("--val-images", type=int, default=150)
    p.add_argument("--jobs", type=int, default=2, help="jobs started at once")
    p.add_argument("--then", type=int, default=1, help="jobs started one after another later")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--step", type=float, default=2.0, help="seconds per training step")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", help="directory for results.json")
    args = p.parse_args()

    from seneca._bench.provenance import provenance
    from seneca._bench.synthetic import make_dataset
    from seneca._cache.embedded import stop_embedded

    root = Path(args.data)
    for part, n, seed in (("train", args.train_images, 0), ("val", args.val_images, 1)):
        if not (root / part).is_dir():
            make_dataset(root / part, n, 5, seed=seed)
    runtime = tempfile.mkdtemp(prefix="sn-ts-")  # a cache of its own, default settings
    os.environ["SENECA_RUNTIME_DIR"] = runtime
    env = dict(os.environ)
    results: dict = {"config": vars(args), "provenance": provenance()}
    results.update(concurrent=[], after=[], lapsed=[])
    try:
        procs = [_job(args, env) for _ in range(args.jobs)]
        _watch(procs, results["lapsed"])
        results["concurrent"] = [_result(p) for p in procs]
        for _ in range(args.then):
            proc = _job(args, env)
            _watch([proc], results["lapsed"])
            results["after"].append(_result(proc))
    finally:
        stop_embedded()
    _report(results, args)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        Path(args.out, "results.json").write_text(json.dumps(results, indent=2) + "\n")


def _report(r: dict, args: argparse.Namespace) -> None:
    n = args.train_images
    for kind in ("concurrent", "after"):
        for k, job in enumerate(r[kind]):
            for e, ep in enumerate(job["epochs"]):
                print(
                    f"{kind} job {k} epoch {e}: train {ep['train_reads']} reads, "
                    f"{ep['train_hits'] / ep['train_samples']:.0%} hits; val {ep['val_reads']} "
                    f"reads, {ep['val_hits'] / ep['val_samples']:.0%} hits"
                )
            print(f"  plans (versions seen) {job['plans']}, splits {job['splits']}")
    reads = sum(ep["train_reads"] for job in r["concurrent"] for ep in job["epochs"])
    plans = max(len(v) for job in r["concurrent"] + r["after"] for v in job["plans"].values())
    later = [ep["val_reads"] for job in r["concurrent"] + r["after"] for ep in job["epochs"][1:]]
    first = [j["epochs"][0]["train_hits"] / j["epochs"][0]["train_samples"] for j in r["after"]]
    checks = [
        (f"train storage reads of the {args.jobs} jobs <= 1.5 x {n}", reads, reads <= 1.5 * n),
        ("plans per dataset per job <= 4", plans, plans <= 4),
        ("validation storage reads after the first pass == 0", sum(later), sum(later) == 0),
        ("first-epoch hit rate of a job started after >= 90%", first, all(f >= 0.9 for f in first)),
        ("leases of running jobs seen run out == 0", len(r["lapsed"]), not r["lapsed"]),
    ]
    for what, value, ok in checks:
        print(f"{'MET' if ok else 'MISSED'}: {what}: {value}")


if __name__ == "__main__":
    main()
