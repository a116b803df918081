"""What a loader's workers cost when they start, under each start method, per epoch.

Each configuration runs as a fresh interpreter, as a training script does: a script of its own
that imports only what its loader needs (the DataLoader script never imports Seneca), makes
the loader over an ImageFolder (``RandomResizedCrop(224)``, flip, ``PILToTensor``,
``ToDtype``, ``Normalize``; batch 32; 2 workers; ``persistent_workers=False``, DataLoader's
default; Seneca against a private embedded cache) and runs ``--epochs`` short epochs of
``--batches`` batches. Per epoch it records:

* ``ready``: from ``iter(loader)`` until the last worker's ``worker_init_fn`` ran (the worker
  started, imported what it needs and unpickled the dataset);
* ``first``: from ``iter(loader)`` until the first batch came.

and each worker's CPU seconds up to ``worker_init_fn`` (``time.process_time`` there). It also
measures what importing Seneca's loader costs in a process that has imported torch and
torchvision already (what a spawned worker of a SenecaLoader script imports on top of a
DataLoader script's), with and without Python's garbage collector during the import. Seneca's
modules are compiled to bytecode first, as ``pip install`` does (with
``PYTHONDONTWRITEBYTECODE`` set, every process would compile them from source again).

Run from the repository root:
``.venv/bin/python scripts/worker_start.py --data data/bench1500``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import textwrap

_SCRIPT = """
import json, os, sys, time
import torch
import torch.multiprocessing as mp
from torchvision.datasets import ImageFolder
from torchvision.transforms import v2
{imports}

def _init(worker_id):
    with open(os.environ["WS_LOG"], "a") as f:
        f.write(json.dumps([time.time(), time.process_time()]) + "\\n")

def main():
    torch.set_num_threads(1)
    t = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(),
                    v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True),
                    v2.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
    ds = ImageFolder({data!r}, transform=t)
    kw = dict(batch_size=32, shuffle=True, num_workers=2, worker_init_fn=_init,
              multiprocessing_context={method!r})
    loader = {make}
    out = []
    for _ in range({epochs}):
        open(os.environ["WS_LOG"], "w").close()
        start = time.time()
        it = iter(loader)
        next(it)
        first = time.time() - start
        for _, _b in zip(range({batches} - 1), it):
            pass
        del it
        inits = [json.loads(line) for line in open(os.environ["WS_LOG"])]
        out.append({{"first": first, "ready": max(i[0] for i in inits) - start,
                     "worker_cpu": [i[1] for i in inits]}})
    print(json.dumps(out))

if __name__ == "__main__":
    main()
"""

_LOADERS = {
    "DataLoader": ("from torch.utils.data import DataLoader", "DataLoader(ds, **kw)"),
    "SenecaLoader": (
        "from seneca import SenecaLoader",
        "SenecaLoader(ds, cache_size='200MB', **kw)",
    ),
}

_IMPORT = """
import gc, time, torch, torchvision.datasets, torchvision.transforms.v2
{gc}
start, cpu = time.perf_counter(), time.process_time()
import seneca.loader.loader
print(time.perf_counter() - start, time.process_time() - cpu)
"""


def _run(code: str, env: dict[str, str]) -> str:
    """The last line ``code`` prints, run as a script file (a spawned worker imports it)."""
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".py", prefix="worker_start_") as f:
        f.write(code)
        f.flush()
        done = subprocess.run(
            [sys.executable, f.name], env=env, capture_output=True, text=True, check=True
        )
    return done.stdout.strip().splitlines()[-1]


def main() -> None:
    import os
    import tempfile

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--methods", default="fork,spawn,forkserver")
    args = p.parse_args()
    import compileall

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for package in ("seneca", "seneca_base", "ods", "mdp"):
        compileall.compile_dir(os.path.join(root, package), quiet=1)
    env = dict(os.environ, WS_LOG=tempfile.mktemp(prefix="worker-start-"))
    env["SENECA_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="ws-")
    print("per epoch after the first (median of the rounds' epochs), seconds:")
    columns = ("workers ready", "first batch", "worker CPU")
    print(f"{'method':11} {'loader':13} " + " ".join(f"{c:>14}" for c in columns))
    for method in args.methods.split(","):
        for name, (imports, make) in _LOADERS.items():
            ready, first, cpu = [], [], []
            for _ in range(args.rounds):
                code = textwrap.dedent(_SCRIPT).format(
                    imports=imports, data=args.data, method=method, make=make,
                    epochs=args.epochs, batches=args.batches,
                )  # fmt: skip
                epochs = json.loads(_run(code, env))[1:]  # the first epoch also warms caches
                ready += [e["ready"] for e in epochs]
                first += [e["first"] for e in epochs]
                cpu += [c for e in epochs for c in e["worker_cpu"]]
            values = (statistics.median(v) for v in (ready, first, cpu))
            print(f"{method:11} {name:13} " + " ".join(f"{v:14.3f}" for v in values))
    print("\nimporting seneca.loader.loader after torch and torchvision (wall, CPU seconds):")
    for label, gc in (("garbage collector on", ""), ("garbage collector off", "gc.disable()")):
        runs = [_run(_IMPORT.format(gc=gc), env).split() for _ in range(3)]
        walls, cpus = (sorted(float(r[i]) for r in runs) for i in (0, 1))
        print(f"  {label:22} {walls[1]:.3f} s wall, {cpus[1]:.3f} s CPU (median of 3)")


if __name__ == "__main__":
    main()
