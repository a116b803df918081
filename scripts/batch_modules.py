"""The modules of this repository that a batch's path calls into, counted: a SenecaLoader with
ODS over a warm cache (a second job keeps the first job's crops cached) serves an epoch while
every function call is traced (``sys.setprofile``, in the loader process and, with
``--workers``, in each worker, which is forked during the traced epoch). Prints each module
called, in which processes, and the count per package:

    seneca make-dataset /tmp/hp --images 300 --classes 4
    .venv/bin/python scripts/batch_modules.py --data /tmp/hp --workers 0
    .venv/bin/python scripts/batch_modules.py --data /tmp/hp --workers 2

The loader process's count includes what runs between batches (the budget look, the plan's
tick with ``split="auto"``, the progress and the lease), as those are stages of the path too.

Then one batch on its own: the modules called in the loader process while the loop waits for
each batch (from one ``next`` to the next, its threads included) and in a worker while it makes
each batch (from one call of the dataset's ``__getitems__`` to the next), the epoch's first and
last batches left out. Printed: the most modules one batch's window called in each process, and
in both together, with the modules of the largest.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the packages whose modules are counted
PACKAGES = ("seneca", "ods", "mdp", "seneca_base")
#: the module whose ``__getitems__`` starts a worker's batch
_DATASET = "seneca/loader/_dataset.py"


def ours(filename: str) -> str | None:
    """The repository path of a module of ours, else None."""
    try:
        rel = Path(filename).resolve().relative_to(ROOT)
    except ValueError:
        return None
    return str(rel) if rel.parts[0] in PACKAGES else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="an ImageFolder dataset")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--samples", type=int, default=256)
    args = parser.parse_args()

    from torchvision.datasets import ImageFolder
    from torchvision.transforms import v2

    from seneca import SenecaLoader

    tmp = tempfile.mkdtemp()
    sock = f"{tmp}/redis.sock"
    server = subprocess.Popen(
        ["redis-server", "--port", "0", "--unixsocket", sock, "--save", ""],
        stdout=subprocess.DEVNULL,
    )
    while not os.path.exists(sock):
        time.sleep(0.05)
    ds = ImageFolder(args.data, transform=v2.Compose([v2.RandomResizedCrop(64), v2.PILToTensor()]))
    ds.samples = ds.imgs = ds.samples[: args.samples]
    ds.targets = ds.targets[: args.samples]
    options = dict(batch_size=32, shuffle=True, cache=f"unix://{sock}", cache_size="200MB")
    called: collections.Counter[str] = collections.Counter()
    out = Path(tmp, "called")
    out.mkdir()
    parent = os.getpid()
    started: list[int] = []  # the worker whose modules are counted (its pid)

    windows: list[set[str]] = [set()]  # the modules called per batch, in this process

    def dump() -> None:
        Path(out, str(os.getpid())).write_text("\n".join(sorted(called)))
        Path(out, f"{os.getpid()}.batches").write_text(
            json.dumps([sorted(w) for w in windows[:-1]])
        )

    def profile(frame, event, arg):
        if event != "call":
            return
        worker = os.getpid() != parent
        if worker and started != [os.getpid()]:  # a worker's first call
            started[:] = [os.getpid()]
            called.clear()
            windows[:] = [set()]
        code = frame.f_code
        if worker and code.co_name == "__getitems__" and code.co_filename.endswith(_DATASET):
            windows.append(set())  # a worker's next batch
            dump()
        name = ours(code.co_filename)
        if name is not None:
            known = name in called
            called[name] += 1
            windows[-1].add(name)
            if not known and worker:  # (a worker may leave by os._exit)
                dump()

    # traced from the start, so that the threads the loaders start are too; counted from the
    # second epoch
    threading.setprofile(profile)
    sys.setprofile(profile)
    context = "fork" if args.workers else None
    loader = SenecaLoader(ds, num_workers=args.workers, multiprocessing_context=context, **options)
    other = SenecaLoader(ds, **options)
    live = iter(other)  # a second live job: the first job's crops stay cached for it
    for _ in loader:  # fills the cache
        pass
    called.clear()
    windows[:] = [set()]
    batches = 0
    for _ in loader:  # a window per batch the loop waits for
        batches += 1
        windows.append(set())
    sys.setprofile(None)
    threading.setprofile(None)
    dump()
    loader.close()
    other.close()
    del live
    server.terminate()
    server.wait()

    processes: dict[str, set[str]] = collections.defaultdict(set)
    for f in out.iterdir():
        if f.suffix:  # the per-batch windows, below
            continue
        role = "loader" if int(f.name) == os.getpid() else "worker"
        for name in f.read_text().split():
            processes[name].add(role)
    print(f"{batches} batches, {args.workers} workers")
    for name in sorted(processes):
        print(f"  {name:45} {', '.join(sorted(processes[name]))}")
    per = collections.Counter(name.split("/")[0] for name in processes)
    print(f"{len(processes)} modules: " + ", ".join(f"{p} {per[p]}" for p in PACKAGES))

    largest: dict[str, set[str]] = {"loader": set(), "worker": set()}
    sizes: dict[str, list[int]] = {"loader": [], "worker": []}
    for f in out.glob("*.batches"):
        role = "loader" if int(f.name.split(".")[0]) == os.getpid() else "worker"
        for window in json.loads(f.read_text())[2:-1]:  # not the epoch's first or last
            sizes[role].append(len(window))
            if len(window) > len(largest[role]):
                largest[role] = set(window)
    one = largest["loader"] | largest["worker"]
    print(
        f"one batch: at most {len(largest['loader'])} modules in the loader process "
        f"(median {statistics.median(sizes['loader'] or [0])}), {len(largest['worker'])} in a "
        f"worker (median {statistics.median(sizes['worker'] or [0])}), {len(one)} in both"
    )
    for name in sorted(one):
        where = [role for role in largest if name in largest[role]]
        print(f"  {name:45} {', '.join(where)}")


if __name__ == "__main__":
    main()
