"""What reading cached crops into a batch tensor costs, against reading them into buffers.

3,000 values of one 3x224x224 uint8 tensor (our codec) in a private embedded Redis, read in
batches of 32 with ``seneca._cache.resp.execute``, three ways, alternating per batch:

* ``buffers``: each value into its own fresh ``bytearray`` (the socket MGET of hit-path);
* ``new rows``: payloads into the rows of a new batch tensor per batch (what the loader does);
* ``same rows``: payloads into the rows of one batch tensor reused for every batch;
* ``placed buffers``: payloads through the same placing path as the rows, each into its own
  fresh ``bytearray`` (the path's own cost, without the batch tensor).

Prints milliseconds per pass over the 94 batches (mean of 5 passes). Run from the repository
root: ``.venv/bin/python scripts/batch_rows_cost.py``.
"""

from __future__ import annotations

import time

import redis
import torch

from ods.decision import Pick
from seneca._cache.embedded import acquire_embedded
from seneca._cache.resp import execute
from seneca.loader._read import _placer
from seneca.loader._rows import BatchRows
from seneca.pipeline import codec
from seneca.pipeline.malloc import tune_malloc

PASSES = 5


def main() -> None:
    tune_malloc()
    client = redis.Redis.from_url(acquire_embedded(1_000_000_000, name="batch-rows-cost"))
    value = codec.encode(torch.randint(0, 255, (3, 224, 224), dtype=torch.uint8))
    keys = [f"batch-rows-cost:{i}" for i in range(3000)]
    for k in range(0, len(keys), 100):
        client.mset({key: value for key in keys[k : k + 100]})
    batches = [keys[k : k + 32] for k in range(0, len(keys), 32)]
    picks = [Pick(i, "augmented", 0) for i in range(32)]
    same = BatchRows(32)

    def buffers(batch: list[str]) -> None:
        execute(client, [("MGET", *batch)])

    def new_rows(batch: list[str]) -> None:
        execute(client, [("MGET", *batch)], place=_placer(BatchRows(len(batch)), picks))

    def same_rows(batch: list[str]) -> None:
        execute(client, [("MGET", *batch)], place=_placer(same, picks))

    def placed_buffers(batch: list[str]) -> None:
        place = lambda j, header, total: memoryview(bytearray(total - len(header)))  # noqa: E731
        execute(client, [("MGET", *batch)], place=place)

    ways = {
        "buffers": buffers,
        "new rows": new_rows,
        "same rows": same_rows,
        "placed buffers": placed_buffers,
    }
    spent = dict.fromkeys(ways, 0.0)
    for turn in range(PASSES):
        order = list(ways) if turn % 2 else list(reversed(ways))
        for batch in batches:
            for name in order:
                start = time.perf_counter()
                ways[name](batch)
                spent[name] += time.perf_counter() - start
    client.delete(*keys)
    for name, seconds in spent.items():
        print(f"{name:14s} {seconds / PASSES * 1000:7.1f} ms per {len(batches)} batches")


if __name__ == "__main__":
    main()
