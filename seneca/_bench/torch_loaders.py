"""The DataLoader baselines of ``seneca bench``, instrumented like SenecaLoader, and the
no-loader ceiling.

* ``pytorch``: torch's DataLoader over ImageFolder with the transform as given.
* ``pytorch-tuned``: the same DataLoader given every non-cache trick SenecaLoader uses: the
  transform's trailing ``ToDtype``/``Normalize`` run once per collated uint8 batch in the loading
  process, and glibc's malloc tuned the same way. No cache.

Both count what they do (decodes, transforms, storage reads and bytes) where it happens, in the
loading process or its workers (shared counters), and report it through ``stats()`` with the
keys SenecaLoader's stats use.
"""

from __future__ import annotations

import math
import multiprocessing
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader
from torchvision.datasets import ImageFolder

from seneca._bench.training import on_device
from seneca.loader.source import pil_decode
from seneca.pipeline.malloc import tune_malloc
from seneca.pipeline.transforms import split_transform
from seneca_base.tiers import TIERS

__all__ = ["Counted", "CountedDataLoader", "CountingLoader", "NoLoader", "counted_folder"]

_KEYS = ("decodes", "transforms", "storage_reads", "bytes_storage")


class Counted:
    """Counters shared with fork workers (``multiprocessing.Value``)."""

    def __init__(self) -> None:
        self.values = {k: multiprocessing.Value("q", 0) for k in _KEYS}

    def add(self, key: str, n: int = 1) -> None:
        v = self.values[key]
        with v.get_lock():
            v.value += n

    def stats(self, samples: int) -> dict[str, Any]:
        out: dict[str, Any] = {k: int(v.value) for k, v in self.values.items()}
        out["samples"] = samples
        for t in TIERS:
            out[t] = {"hits": 0, "misses": samples, "hit_rate": 0.0}
        return out


class CountingLoader:
    """ImageFolder's ``loader``: reads the file (through ``throttle`` when given), decodes it as
    torchvision's ``pil_loader`` does, and counts both."""

    def __init__(self, counted: Counted, throttle: Any = None) -> None:
        self.counted, self.throttle = counted, throttle

    def __call__(self, path: str) -> Any:
        with open(path, "rb") as f:
            data = f.read()
        if self.throttle is not None:
            self.throttle.wait(len(data))
        self.counted.add("storage_reads")
        self.counted.add("bytes_storage", len(data))
        image = pil_decode(data)
        self.counted.add("decodes")
        return image


class _CountingTransform:
    def __init__(self, steps: list[Callable | None], counted: Counted) -> None:
        self.steps, self.counted = [s for s in steps if s is not None], counted

    def __call__(self, x: Any) -> Any:
        for step in self.steps:
            x = step(x)
        self.counted.add("transforms")
        return x


def counted_folder(
    root: str, transform: Callable, counted: Counted, throttle: Any = None, tuned: bool = False
) -> tuple[ImageFolder, Callable | None]:
    """ImageFolder at ``root`` whose reads, decodes and transforms are counted; with ``tuned``
    the transform's batch tail is left out and returned (to run once per batch)."""
    split = split_transform(transform) if tuned else None
    if split is not None and split.batch_tail is not None:
        steps, tail = [split.head, split.sample_tail], split.batch_tail
    else:
        steps, tail = [transform], None
    ds = ImageFolder(
        root, transform=_CountingTransform(steps, counted), loader=CountingLoader(counted, throttle)
    )
    return ds, tail


class CountedDataLoader(DataLoader):
    """A DataLoader over a :func:`counted_folder` with ``stats()``; its collated images go
    through ``tail`` (when given) in the loading process; ``tuned``: glibc's malloc tuned as
    SenecaLoader tunes it. With ``device``, each batch is copied there as a training script
    copies it (``pin_memory=True``, then ``.to(device, non_blocking=True)``) and ``tail`` runs
    on the device, on the uint8 images."""

    def __init__(
        self,
        dataset: Any,
        counted: Counted,
        tail: Callable | None = None,
        tuned: bool = False,
        device: str | None = None,
        **kwargs: Any,
    ) -> None:
        if tuned:
            tune_malloc()
        if device is not None and torch.device(device).type == "cuda":
            kwargs["pin_memory"] = True
        super().__init__(dataset, **kwargs)
        self._tail, self._counted, self._served = tail, counted, 0
        self._device = None if device is None else torch.device(device)

    def __iter__(self) -> Iterator[Any]:
        for batch in super().__iter__():
            if self._device is not None:
                batch = on_device(batch, self._device)
            if self._tail is not None:
                batch[0] = self._tail(batch[0])
            self._served += len(batch[1])
            yield batch

    def stats(self) -> dict[str, Any]:
        """What was counted, with SenecaLoader's keys (no cache: no hits)."""
        return self._counted.stats(self._served)


class NoLoader:
    """The ceiling, loader ``none``: ``samples`` per epoch as batches of one uint8 batch made
    once on ``device``, each turned into float images by ``tail`` (the transform's batch tail)
    there: what the accelerator does when input costs nothing. Counts what it serves as the
    DataLoader baselines do (nothing read or decoded)."""

    def __init__(
        self,
        samples: int,
        batch_size: int,
        crop: int,
        classes: int,
        device: str | None,
        tail: Callable[[Any], Any] | None,
    ) -> None:
        where = torch.device(device or "cpu")
        self.images = torch.randint(0, 256, (batch_size, 3, crop, crop), dtype=torch.uint8)
        self.images = self.images.to(where)
        self.labels = torch.randint(0, classes, (batch_size,)).to(where)
        self.tail = tail
        self.samples = samples
        self.batch_size = batch_size
        self._counted, self._served = Counted(), 0

    def __len__(self) -> int:
        return math.ceil(self.samples / self.batch_size)

    def __iter__(self) -> Iterator[list[torch.Tensor]]:
        for start in range(0, self.samples, self.batch_size):
            n = min(self.samples - start, self.batch_size)
            images = self.images[:n]
            self._served += n
            yield [self.tail(images) if self.tail is not None else images, self.labels[:n]]

    def stats(self) -> dict[str, Any]:
        """What was counted, with SenecaLoader's keys (no reads, no decodes)."""
        return self._counted.stats(self._served)
