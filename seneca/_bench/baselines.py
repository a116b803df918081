"""The loaders ``seneca bench`` compares, behind one interface: :func:`make_loader`.

* ``pytorch``: torch's DataLoader over ImageFolder; ``pytorch-tuned``: the same with every
  non-cache trick SenecaLoader uses (``seneca._bench.torch_loaders``), the reference the
  headline ratios are stated against.
* ``minio``: MINIO as in CoorDL: a static cache of encoded bytes, filled while there is room
  and never evicted (SenecaLoader with split 100-0-0, no ODS).
* ``quiver``: Quiver's substitution: each batch over-samples 10 x the batch size from the job's
  remaining random order and takes the cached samples first (MINIO's cache).
* ``mdp``: the tiers split by the MDP plan, plain random sampling (no ODS).
* ``seneca``: MDP's split plus ODS.
* ``none``: no loader, the ceiling: one uint8 batch made once, its batch tail run per step
  (``seneca._bench.torch_loaders.NoLoader``).

``mdp`` and ``seneca`` take the split of ``seneca bench --split`` (or ``--plan``); a name
``kind@split`` (:func:`variant`) gives one a split of its own, ``E-D-A`` in percent or ``auto``,
so one run can compare splits side by side (``seneca@auto,seneca@50-30-20,seneca@0-0-100``).

Every loader gets the same dataset, transform, batch size and workers. With a ``device``
every loader yields batches there: SenecaLoader through its ``device=`` option, the DataLoaders
with ``pin_memory=True`` and a copy per batch (``pytorch-tuned`` then runs its batch tail on the
device).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
from torchvision.datasets import ImageFolder

from ods.routing import CACHE_FAILURES
from seneca._bench.torch_loaders import Counted, CountedDataLoader, NoLoader, counted_folder
from seneca.loader import SenecaLoader
from seneca.pipeline.storage import throttled
from seneca.pipeline.transforms import split_transform
from seneca_base.errors import ConfigError
from seneca_base.split import Split

__all__ = ["LOADERS", "QuiverBatchSampler", "make_loader", "variant"]

LOADERS = ("pytorch", "pytorch-tuned", "minio", "quiver", "mdp", "seneca", "none")
_ENCODED_ONLY = (1.0, 0.0, 0.0)
_SPLIT_LOADERS = ("mdp", "seneca")  # the loaders a split applies to

#: a split as SenecaLoader's ``split=`` takes it: (e, d, a) fractions, or "auto"
SplitArg = tuple[float, float, float] | str


def variant(name: str, split: SplitArg) -> tuple[str, SplitArg]:
    """``(kind, split)`` of the loader ``name``: a kind of :data:`LOADERS`, with ``split`` (E, D,
    A fractions, or ``"auto"``), or ``kind@E-D-A`` / ``kind@auto`` for ``mdp`` and ``seneca``,
    with the split it names."""
    kind, at, text = name.partition("@")
    if not at:
        return kind, split
    if kind not in _SPLIT_LOADERS:
        raise ConfigError(f"--loaders: {name!r}: only {' and '.join(_SPLIT_LOADERS)} take @split")
    if text == "auto":
        return kind, "auto"
    try:
        return kind, tuple(Split.parse(text).fractions.values())
    except ConfigError as e:
        raise ConfigError(f"--loaders: {name!r}: {e}") from None


class QuiverBatchSampler:
    """Quiver-style batches: from the next ``factor`` x ``batch_size`` samples of a random
    order, the cached ones first. ``store`` (set after the loader exists) says what is cached."""

    def __init__(self, samples: int, batch_size: int, factor: int = 10) -> None:
        self.samples = samples
        self.batch_size = batch_size
        self.factor = factor
        self.store: Any = None

    def __len__(self) -> int:
        return math.ceil(self.samples / self.batch_size)

    def _cached(self, window: Sequence[int]) -> list[bool]:
        if self.store is None:
            return [False] * len(window)
        try:
            return self.store.cached("encoded", window)
        except CACHE_FAILURES:
            return [False] * len(window)

    def __iter__(self) -> Iterator[list[int]]:
        """One epoch: each sample once. The order is seeded from torch's global random state
        (as RandomSampler's is); each batch looks at a window of the next ``factor`` x
        ``batch_size`` samples, those it did not take carried into the next window (linear in
        the dataset per epoch)."""
        rng = random.Random(int(torch.empty((), dtype=torch.int64).random_().item()))
        order = list(range(self.samples))
        rng.shuffle(order)
        size, pos, pending = self.factor * self.batch_size, 0, []
        while pending or pos < len(order):
            fill = max(size - len(pending), 0)
            window = pending + order[pos : pos + fill]
            pos += fill
            chosen = [i for i, hit in zip(window, self._cached(window), strict=True) if hit]
            chosen = chosen[: self.batch_size]
            taken = set(chosen)
            for i in window:
                if len(chosen) >= self.batch_size:
                    break
                if i not in taken:
                    chosen.append(i)
                    taken.add(i)
            pending = [i for i in window if i not in taken]
            yield chosen


def make_loader(
    kind: str,
    root: str,
    *,
    transform: Callable[[Any], Any],
    batch_size: int,
    num_workers: int,
    cache: str | None,
    cache_size: int | None = None,
    split: Mapping[str, float] | Sequence[float] | None = None,
    job: str | None = None,
    throttle: Any = None,
    device: str | None = None,
    **kwargs: Any,
) -> Any:
    """A loader of ``kind`` (one of :data:`LOADERS`) over the ImageFolder at ``root``.

    ``split`` is the MDP split for ``mdp`` and ``seneca`` (MINIO and Quiver cache encoded bytes
    only); ``throttle`` limits storage reads (:class:`seneca._bench.throttle.Throttle`);
    ``device``: where the batches go (None: they stay on the CPU).
    """
    if kind not in LOADERS:
        raise ConfigError(f"loader: expected one of {', '.join(LOADERS)}, got {kind!r}")
    common = {"batch_size": batch_size, "num_workers": num_workers, **kwargs}
    if kind in ("pytorch", "pytorch-tuned"):
        counted, tuned = Counted(), kind == "pytorch-tuned"
        ds, tail = counted_folder(root, transform, counted, throttle, tuned=tuned)
        return CountedDataLoader(ds, counted, tail, tuned, device, shuffle=True, **common)
    ds = ImageFolder(root, transform=transform)
    if kind == "none":
        tail = split_transform(transform).batch_tail
        crop = _crop_of(ds[0][0])
        return NoLoader(len(ds), batch_size, crop, len(ds.classes), device, tail)
    cached = {"cache": cache, "cache_size": cache_size, "job": job, "device": device}
    with throttled(throttle):  # the storage the loader reads
        if kind == "quiver":
            sampler = QuiverBatchSampler(len(ds), batch_size)
            loader = SenecaLoader(
                ds,
                batch_sampler=sampler,
                num_workers=num_workers,
                split=_ENCODED_ONLY,
                ods=False,
                **cached,
                **kwargs,
            )
            sampler.store = loader.store
        elif kind == "minio":
            loader = SenecaLoader(
                ds, shuffle=True, split=_ENCODED_ONLY, ods=False, **cached, **common
            )
        else:
            loader = SenecaLoader(
                ds, shuffle=True, split=split, ods=kind == "seneca", **cached, **common
            )
    return loader


def _crop_of(image: Any) -> int:
    """The side of the transform's (square) output ``image``."""
    return int(image.shape[-1])
