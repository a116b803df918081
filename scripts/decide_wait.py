"""How long a SenecaLoader epoch waits for the ODS decisions that were posted early.

Fills an embedded cache with 3,000 augmented 224x224 crops of ``data/bench5k`` (as ``seneca
hit-path`` does), then runs 5 fresh jobs' epochs (every sample a hit, no workers) and prints,
per epoch, its wall time and the time the sampler spent collecting its prefetched decisions
(``OdsBatchSampler._collect``: reading a reply the server may still be computing). Run from the
repository root: ``.venv/bin/python scripts/decide_wait.py``.
"""

from __future__ import annotations

import time

import ods.sampler
from seneca._bench.hitpath import _dataset, _fill, _loader
from seneca._cache.embedded import acquire_embedded

SAMPLES, BATCH, CROP = 3000, 32, 224


def main() -> None:
    spent = {"seconds": 0.0, "calls": 0}
    collect = ods.sampler.OdsBatchSampler._collect

    def timed(self, *args):  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        try:
            return collect(self, *args)
        finally:
            spent["seconds"] += time.perf_counter() - start
            spent["calls"] += 1

    ods.sampler.OdsBatchSampler._collect = timed  # type: ignore[method-assign]
    ds = _dataset("data/bench5k", SAMPLES, CROP)
    size = SAMPLES * (3 * CROP * CROP + 4096)
    url = acquire_embedded(2 * size + 64_000_000, name="decide-wait")
    store = _fill(ds, url, 0, BATCH, size)
    for turn in range(5):
        store.join("hit-b0")  # keeps the copies: a live job that has not used them
        loader = _loader(ds, url, f"wait-{turn}", BATCH, size)
        spent.update(seconds=0.0, calls=0)
        start = time.perf_counter()
        for _ in loader:
            pass
        epoch = time.perf_counter() - start
        print(
            f"epoch {epoch * 1000:6.1f} ms, collecting {spent['calls']} decisions "
            f"{spent['seconds'] * 1000:5.1f} ms"
        )


if __name__ == "__main__":
    main()
