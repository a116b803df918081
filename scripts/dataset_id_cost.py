"""What a folder dataset's id costs (``Storage.fingerprint``): one ``stat`` per file, then a
hash of every file's path, label, size and modification time. Makes ``--files`` small files in
100 class folders under a temporary directory and prints, for ``--repeats`` rounds, the id's
time beside a bare ``os.stat`` of every file (the floor any id that looks at each file pays).

    python scripts/dataset_id_cost.py --files 200000
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

from seneca.pipeline.storage import Storage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="seneca-id-")
    try:
        per = max(1, args.files // 100)
        samples = []
        for c in range(100):
            folder = os.path.join(root, f"c{c:03d}")
            os.makedirs(folder)
            for i in range(per):
                path = os.path.join(folder, f"{i:06d}.jpg")
                with open(path, "wb") as f:
                    f.write(b"x" * (100 + i % 50))
                samples.append((path, c))
        storage = Storage(samples)
        paths = [p for p, _ in samples]
        for _ in range(args.repeats):
            start = time.perf_counter()
            for p in paths:
                os.stat(p)
            bare = time.perf_counter() - start
            start = time.perf_counter()
            storage.fingerprint()
            took = time.perf_counter() - start
            start = time.perf_counter()
            storage.fingerprint("v1")
            versioned = time.perf_counter() - start
            print(
                f"{len(paths):,} files: id {took:.3f} s, with dataset_version {versioned:.3f} s,"
                f" bare os.stat of each {bare:.3f} s"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
