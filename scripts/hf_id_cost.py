"""What a Hugging Face table's id costs (``seneca.loader._hf``): every image the table holds
is hashed once when a loader is made. Builds an in-memory ``datasets.Dataset`` of ``--rows``
rows, each a 500x375 JPEG (in tables of at most 10,000 rows, concatenated), and prints, for
``--repeats`` rounds, the id's time and the bytes hashed per second. Needs the extras
(``make test-ecosystem`` makes .venv-ecosystem):

    .venv-ecosystem/bin/python scripts/hf_id_cost.py --rows 20000
"""

from __future__ import annotations

import argparse
import io
import time

import datasets
import numpy as np
from PIL import Image

from seneca.loader._hf import HFImageSource


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (375, 500, 3), dtype=np.uint8)).save(out, "JPEG")
    jpeg = out.getvalue()
    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    parts = []
    for start in range(0, args.rows, 10_000):
        n = min(10_000, args.rows - start)
        rows = {"image": [{"bytes": jpeg, "path": None}] * n, "label": list(range(n))}
        parts.append(datasets.Dataset.from_dict(rows, features=features))
    table = datasets.concatenate_datasets(parts)
    size = args.rows * len(jpeg)
    print(f"{args.rows} rows, {size / 1e9:.2f} GB of JPEGs")
    for _ in range(args.repeats):
        start = time.perf_counter()
        HFImageSource(table).id  # noqa: B018 (made when first asked)
        took = time.perf_counter() - start
        print(f"id: {took:.2f} s ({size / took / 1e9:.2f} GB/s)")


if __name__ == "__main__":
    main()
