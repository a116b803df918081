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
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the packages whose modules are counted
PACKAGES = ("seneca", "ods", "mdp", "seneca_base")


def _ours(filename: str) -> str | None:
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

    def dump() -> None:
        Path(out, str(os.getpid())).write_text("\n".join(sorted(called)))

    def profile(frame, event, arg):
        if event != "call":
            return
        if os.getpid() != parent and started != [os.getpid()]:  # a worker's first call
            started[:] = [os.getpid()]
            called.clear()
        name = _ours(frame.f_code.co_filename)
        if name is not None:
            known = name in called
            called[name] += 1
            if not known and os.getpid() != parent:  # (a worker may leave by os._exit)
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
    batches = sum(1 for _ in loader)
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
        role = "loader" if int(f.name) == os.getpid() else "worker"
        for name in f.read_text().split():
            processes[name].add(role)
    print(f"{batches} batches, {args.workers} workers")
    for name in sorted(processes):
        print(f"  {name:45} {', '.join(sorted(processes[name]))}")
    per = collections.Counter(name.split("/")[0] for name in processes)
    print(f"{len(processes)} modules: " + ", ".join(f"{p} {per[p]}" for p in PACKAGES))


if __name__ == "__main__":
    main()
