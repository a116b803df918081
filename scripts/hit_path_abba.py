"""The loader's cache-hit path of two source trees, side by side: ``seneca hit-path`` run by
fresh interpreters in A B B A order, ``--rounds`` times, tree A (``--base``, for example a
``git worktree`` of main) against tree B (``--tree``, by default this checkout), against one
redis-server started here. Prints each run's median loader rate, its best turn's, and its
median ratio to redis-py's MGET in the same turns, then the medians per tree:

    git worktree add /tmp/base main
    seneca make-dataset /tmp/hp --images 1600 --classes 4
    .venv/bin/python scripts/hit_path_abba.py --base /tmp/base --data /tmp/hp --rounds 2

Each run imports the tree it measures ahead of this environment's editable install.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

#: what a run executes: the tree's package imported, not the editable install's
_RUN = """
import json, statistics, sys
root, data, url, samples = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in getattr(f, "__module__", "")]
sys.path.insert(0, root)
import seneca
assert seneca.__file__.startswith(root), seneca.__file__
from seneca._bench.hitpath import run_hit_path
r = run_hit_path(data, samples=samples, repeats=1, passes=3, cache=url)
print(json.dumps({
    "loader": statistics.median(r["rounds"]["loader"]),
    "best": max(r["rounds"]["loader"]),
    "vs_redis_py": r["median_turn_loader_vs_redis_py"],
}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="tree A (a checkout's root)")
    parser.add_argument("--tree", default=str(Path(__file__).resolve().parents[1]))
    parser.add_argument("--data", required=True, help="an ImageFolder dataset")
    parser.add_argument("--samples", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=2, help="A B B A rounds")
    args = parser.parse_args()
    trees = {"A": str(Path(args.base).resolve()), "B": str(Path(args.tree).resolve())}
    results: dict[str, list[dict]] = {"A": [], "B": []}
    with tempfile.TemporaryDirectory() as tmp:
        sock = f"{tmp}/redis.sock"
        server = subprocess.Popen(
            ["redis-server", "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly",
             "no", "--maxmemory", "2gb"],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            while not Path(sock).exists():
                time.sleep(0.05)
            url = f"unix://{sock}"
            redis.Redis(unix_socket_path=sock).ping()
            for name in "ABBA" * args.rounds:
                out = subprocess.run(
                    [sys.executable, "-c", _RUN, trees[name], args.data, url, str(args.samples)],
                    capture_output=True, text=True, check=True,
                )  # fmt: skip
                run = json.loads(out.stdout.strip().splitlines()[-1])
                results[name].append(run)
                print(f"{name} loader {run['loader'] / 1e6:7.0f} MB/s (best turn "
                      f"{run['best'] / 1e6:.0f}), vs redis-py {run['vs_redis_py']:.2f}",
                      flush=True)  # fmt: skip
        finally:
            server.terminate()
            server.wait()
    for name, runs in results.items():
        rate = statistics.median(r["loader"] for r in runs) / 1e6
        best = statistics.median(r["best"] for r in runs) / 1e6
        ratio = statistics.median(r["vs_redis_py"] for r in runs)
        print(f"{name} ({trees[name]}): median loader {rate:.0f} MB/s (of best turns {best:.0f}), "
              f"vs redis-py {ratio:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
