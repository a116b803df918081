"""Run in a fresh interpreter: with every UserWarning an error (set after the imports, so no
module's own filter hides one), two jobs train with a transform whose tail
starts with ``PILToTensor`` (augmented values are tensors) on each cache URL given, with and
without a worker. torch warns once per process about a tensor made over read-only memory, so
only a fresh process shows whether any path makes one."""

import sys
import warnings

import torch
from torchvision.datasets import ImageFolder
from torchvision.transforms import v2

from seneca import SenecaLoader

TRANSFORM = v2.Compose(
    [v2.RandomResizedCrop(16), v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True)]
)


def main(root: str, urls: list[str]) -> None:
    warnings.simplefilter("error", UserWarning)  # forked workers inherit it
    for url in urls:
        for workers in (0, 1):
            jobs = [
                SenecaLoader(
                    ImageFolder(root, transform=TRANSFORM),
                    batch_size=8,
                    shuffle=True,
                    cache=url,
                    cache_size="20MB",
                    split=(0.3, 0.3, 0.4),
                    num_workers=workers,
                )
                for _ in range(2)
            ]
            for _ in range(2):
                for _ in zip(*jobs, strict=True):
                    pass
            hits = sum(jobs[0].stats()[t]["hits"] for t in ("augmented", "decoded", "encoded"))
            assert hits > 0, f"no hits on {url}"
            for job in jobs:
                job.close()
    print("ok")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
