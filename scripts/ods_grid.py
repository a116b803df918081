"""The ODS policies' hit rates over the Fig. 13 grid, with seeds, beside the ceiling.

    python scripts/ods_grid.py [--samples 20000] [--seeds 3] [--jobs 3]

For speeds 1:1:1 and 1:2:3 and caches of 10-80% of the dataset, each policy runs ``ods
simulate``'s simulation (payload-free samples on a private redis-server, batches of 64, 3
epochs) once per seed; the table shows the mean hit rate and its range over the seeds, and the
ceiling (J - 1 + c) / J: each sample loaded once serves all J jobs, and a cache of fraction c
carries over between epochs.
"""

from __future__ import annotations

import argparse
import statistics

import redis

from ods.simulate import SimConfig, simulate_ods
from seneca.cache.embedded import acquire_embedded

FRACS = (0.1, 0.2, 0.4, 0.6, 0.8)
SPEEDS = ((1, 1, 1), (1, 2, 3))
POLICIES = ("seneca", "paper")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=3)
    args = parser.parse_args()
    client = redis.Redis.from_url(acquire_embedded(256_000_000, name="ods-grid"))
    jobs = args.jobs
    for speeds in SPEEDS:
        speeds = speeds if jobs == 3 else (1,) * jobs
        print(f"speeds {':'.join(map(str, speeds))}, {jobs} jobs, {args.samples:,} samples")
        print(f"{'policy':<14}" + "".join(f"{f:>20.0%}" for f in FRACS))
        for policy in POLICIES:
            cells = []
            for frac in FRACS:
                rates = []
                for seed in range(args.seeds):
                    client.flushdb()
                    cfg = SimConfig(
                        samples=args.samples,
                        jobs=jobs,
                        cache_frac=frac,
                        speeds=speeds,
                        batch=64,
                        epochs=3,
                        policy=policy,
                        seed=seed,
                    )
                    rates.append(simulate_ods(client, cfg)["hit_rate"])
                mean = statistics.mean(rates)
                cells.append(f"{mean:.3f} ({min(rates):.3f}-{max(rates):.3f})")
            print(f"{'ods-' + policy:<14}" + "".join(f"{c:>20}" for c in cells), flush=True)
        ceiling = [(jobs - 1 + f) / jobs for f in FRACS]
        print(f"{'ceiling':<14}" + "".join(f"{c:>20.3f}" for c in ceiling))
        print()


if __name__ == "__main__":
    main()
