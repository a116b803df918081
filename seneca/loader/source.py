"""Where a cached dataset's samples come from, and the protocol a dataset implements to be cached.

SenecaLoader caches a map-style dataset when it knows how the dataset makes sample ``i``: the
bytes it stores (the encoded tier), the object those bytes decode to (the decoded tier: the
transform's input), its target, and an id of the samples that is the same on every machine.
Then ``dataset[i]`` equals ``(transform(decode(read(i))), target_transform(target(i)))``, and
Seneca can serve any of those forms from the cache.

It knows this for:

* torchvision's ``DatasetFolder`` and ``ImageFolder`` (any ``loader``; with torchvision's
  default loader the file bytes are the encoded form, with another loader only the loader's
  output is cached);
* datasets that implement :class:`CacheableDataset`;
* ``Subset`` (and so ``random_split``) of either, nested or not: the loader reads the subset's
  samples, and jobs over overlapping subsets share one cache;
* ``ConcatDataset`` of folder datasets (subsets of them, or ConcatDatasets of those) with one
  loader and equal transforms: their samples are read as one list, each label from its part;
* a Hugging Face ``datasets.Dataset`` with one ``Image()`` column, without a format or with a
  ``set_transform``/``with_transform`` function (``seneca.loader._hf``);
* timm's ``ImageDataset`` over a folder (``seneca.loader._timm``).

Any other dataset is read exactly as DataLoader reads it (:func:`resolve` says why), and so is
a subclass of one of these that makes or counts samples its own way (its own ``__getitem__``,
``__getitems__`` or ``__len__``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from torch.utils.data import ConcatDataset, IterableDataset, Subset
from torchvision.datasets import DatasetFolder

from seneca.loader._folder import FolderSource, MergedSamples, decoder_name, pil_decode
from seneca.loader._source_base import NotCacheable, Source, refuse_overrides
from seneca.pipeline.fingerprint import fingerprint

__all__ = [
    "CacheableDataset",
    "HeadedSource",
    "NotCacheable",
    "Resolved",
    "Source",
    "members",
    "pil_decode",
    "resolve",
]


@runtime_checkable
class CacheableDataset(Protocol):
    """A map-style dataset that says how SenecaLoader may cache it.

    ``dataset[i]`` must equal ``(transform(seneca_decode(seneca_read(i), i)),
    target_transform(seneca_target(i)))`` (each step skipped when it is None); ``transform``
    and ``target_transform`` are read from the dataset's attributes of those names.
    """

    def __len__(self) -> int: ...

    def seneca_id(self) -> str:
        """An id of the samples (not of the transform): equal for the same samples on every
        machine, different when any sample or target differs. The loader asks again when each
        epoch starts: an id changed since it was made means the cached values are the old
        samples', and the loader reads from storage from then on."""
        ...

    def seneca_read(self, index: int) -> bytes:
        """The stored bytes of sample ``index`` (what the encoded tier keeps)."""
        ...

    def seneca_decode(self, data: bytes | memoryview, index: int) -> Any:
        """The transform's input made from ``data`` (what the decoded tier keeps). Its values
        are named by what it does (its code and the settings it reads), as a loader
        function's are."""
        ...

    def seneca_target(self, index: int) -> Any:
        """The target of sample ``index``, before ``target_transform``."""
        ...


class HeadedSource(Source):
    """``inner``'s samples whose decoded form is a deterministic transform head (``head``,
    named ``fingerprint``) applied to what ``inner`` decodes: a validation transform's
    resized, centre-cropped image, made once and reused by every job and epoch. Its id names
    the head too, so its values never mix with the plain decoded images of ``inner``."""

    def __init__(self, inner: Source, head: Callable[[Any], Any], fingerprint: str) -> None:
        self.inner, self.head = inner, head
        self.id = f"{inner.id}.{fingerprint}"
        self.encoded, self.rows = inner.encoded, inner.rows

    def __len__(self) -> int:
        return len(self.inner)

    def __getattr__(self, name: str) -> Any:  # what else the source offers (its storage)
        if name.startswith("__") or name in ("inner", "head"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def read(self, index: int) -> bytes | None:
        return self.inner.read(index)

    def decode(self, index: int, raw: bytes | memoryview | None) -> Any:
        return self.head(self.inner.decode(index, raw))

    def target(self, index: int) -> Any:
        return self.inner.target(index)

    def size(self, index: int) -> int:
        return self.inner.size(index)

    def sample(self, image: Any, target: Any) -> Any:
        return self.inner.sample(image, target)

    def batch(self, samples: list[Any]) -> list[Any]:
        return self.inner.batch(samples)

    def changed(self) -> str | None:
        return self.inner.changed()

    def changed_among(self, indices: Sequence[int]) -> list[int]:
        return self.inner.changed_among(indices)

    def file_of(self, index: int) -> str:
        return self.inner.file_of(index)

    def decodes_otherwise(self) -> str | None:
        return self.inner.decodes_otherwise()


class ProtocolSource(Source):
    """A :class:`CacheableDataset`, known by its ``seneca_id()`` and, as a folder dataset's
    loader function is, by its ``seneca_decode`` (what makes its decoded values)."""

    def __init__(self, dataset: CacheableDataset) -> None:
        self.dataset = dataset
        self.named = str(dataset.seneca_id())
        self.decoder = decoder_name(dataset.seneca_decode)
        made = f"{self.named}\0{self.decoder}"
        self.id = "p" + hashlib.sha1(made.encode()).hexdigest()[:12]

    def __len__(self) -> int:
        return len(self.dataset)

    def read(self, index: int) -> bytes:
        return self.dataset.seneca_read(index)

    def decode(self, index: int, raw: bytes | memoryview | None) -> Any:
        return self.dataset.seneca_decode(raw if raw is not None else b"", index)

    def target(self, index: int) -> Any:
        return self.dataset.seneca_target(index)

    def changed(self) -> str | None:
        now = str(self.dataset.seneca_id())
        if now != self.named:
            return (
                f"the dataset's seneca_id() is {now!r}, not {self.named!r} as when SenecaLoader "
                "was made"
            )
        return None

    def decodes_otherwise(self) -> str | None:
        if decoder_name(self.dataset.seneca_decode) == self.decoder:
            return None
        return (
            "the dataset's seneca_decode changed (its code or a setting it reads) since "
            "SenecaLoader was made, or cannot be named"
        )


@dataclass
class Resolved:
    """A cacheable dataset: its source, the dataset whose transforms make its samples, and
    ``positions`` (the source's index of each of the user's samples; None: the same)."""

    source: Source
    base: Any
    positions: list[int] | None

    @property
    def others(self) -> tuple[Any, ...]:
        """The other datasets whose samples the source holds (a ConcatDataset's later parts,
        its parts' parts too): they make their samples as :attr:`base` does, with its
        transforms and loader function, only while they agree (:meth:`made_otherwise`)."""
        source = self.source
        if not isinstance(source, FolderSource) or source.merged is None:
            return ()
        return tuple(source.merged.holders[1:])

    def made_otherwise(self) -> str | None:
        """Why :attr:`others` make their samples otherwise than :attr:`base` now (their
        transforms or loader function set otherwise since), in words; None while they agree."""
        return _unlike([self.base, *self.others])

    def follow(self, dataset: Any) -> str | None:
        """Take the labels of ``dataset``'s samples as they are now (a script may set them
        between epochs, as pseudo-labelling does), and say what else changed since ``dataset``
        was resolved into this, which cached reads cannot follow (None: nothing did): samples
        added, removed or moved, a Subset's other indices, another dataset in a part's place,
        another loader function, a dataset no longer cacheable."""
        try:
            now = resolve(dataset)
        except NotCacheable as why:
            return str(why)
        if now.positions != self.positions:
            return "the dataset's samples changed (a Subset's indices)"
        parts, were = (now.source.dataset, *now.others), (self.source.dataset, *self.others)
        if len(parts) != len(were) or any(a is not b for a, b in zip(parts, were, strict=True)):
            # the source reads the samples, and takes the transforms, of those it was made of
            return "the dataset's parts changed (another dataset in a part's place)"
        if not isinstance(self.source, FolderSource) or not isinstance(now.source, FolderSource):
            return None if type(now.source) is type(self.source) else "the dataset changed"
        old, new = self.source.storage.samples, now.source.storage.samples
        if len(old) != len(new) or any(a[0] != b[0] for a, b in zip(old, new, strict=True)):
            return "the dataset's samples changed (files added, removed or moved in its list)"
        otherwise = self.source.decodes_otherwise()
        if otherwise is not None:
            return otherwise
        # the same files, their labels as they are now: the cached values are still theirs
        self.source.storage.samples = new
        return None


def resolve(dataset: Any, version: str | None = None) -> Resolved:
    """How to cache ``dataset``; NotCacheable says why it cannot be. ``version``: the folder
    dataset's version the user vouches for (:class:`FolderSource`)."""
    name = type(dataset).__name__
    if isinstance(dataset, IterableDataset):
        raise NotCacheable(f"{name} is an IterableDataset (Seneca caches map-style datasets)")
    if isinstance(dataset, Subset):
        refuse_overrides(dataset, Subset)
        inner = resolve(dataset.dataset, version)
        outer = inner.positions if inner.positions is not None else range(len(inner.source))
        positions = [outer[int(i)] for i in dataset.indices]  # IndexError as Subset's would
        return Resolved(inner.source, inner.base, positions)
    if isinstance(dataset, ConcatDataset):
        refuse_overrides(dataset, ConcatDataset)
        return _concat(dataset, version)
    if isinstance(dataset, CacheableDataset):
        return Resolved(ProtocolSource(dataset), dataset, None)
    if isinstance(dataset, DatasetFolder):
        refuse_overrides(dataset, DatasetFolder)
        return Resolved(FolderSource(dataset, version=version), dataset, None)
    from seneca.loader._hf import HFImageSource, hf_dataset
    from seneca.loader._timm import TimmFolderSource, timm_class

    if hf_dataset(dataset):
        source = HFImageSource(dataset)
        return Resolved(source, source.base, None)
    timm = timm_class(dataset)
    if timm is not None:
        refuse_overrides(dataset, timm)
        return Resolved(TimmFolderSource(dataset, version), dataset, None)
    raise NotCacheable(
        f"{name} is not a torchvision DatasetFolder/ImageFolder or a Subset of one, a Hugging "
        "Face datasets.Dataset with an Image() column or timm's ImageDataset of a folder, and "
        "does not implement seneca.CacheableDataset"
    )


def _concat(dataset: ConcatDataset, version: str | None) -> Resolved:
    """One folder source of the parts' samples, when they agree on how a sample is made."""
    parts = [resolve(d, version) for d in dataset.datasets]
    if not parts or not all(type(p.source) is FolderSource for p in parts):
        raise NotCacheable("ConcatDataset: Seneca caches concatenated DatasetFolders only")
    # each part's samples as its own source holds them (a ConcatDataset part's: all its parts')
    sources = [p.source for p in parts if isinstance(p.source, FolderSource)]
    held = [s.dataset if s.merged is None else s.merged for s in sources]
    merged = MergedSamples.of([(h, p.positions) for h, p in zip(held, parts, strict=True)])
    unlike = _unlike(merged.holders)
    if unlike is not None:
        raise NotCacheable(f"ConcatDataset: {unlike}")
    first = merged.holders[0]
    return Resolved(FolderSource(first, merged, version), first, None)


def _unlike(bases: Sequence[Any]) -> str | None:
    """Why the datasets ``bases`` make their samples otherwise than each other (None: they
    make them alike): other transforms, named by what they do (a repr may hide it; one that
    cannot be named differs), or another loader function."""
    if len(bases) < 2:
        return None
    first = bases[0]
    same = all(
        b.transform is first.transform and b.target_transform is first.target_transform
        for b in bases
    )
    how = {fingerprint([b.transform, b.target_transform]) for b in bases} if not same else ()
    loaders = {getattr(b, "loader", None) for b in bases}
    if len(how) > 1 or len(loaders) > 1:
        return "its parts differ in loader or transforms"
    return None


def members(resolved: Resolved) -> Sequence[int] | None:
    """The source's samples a job over ``resolved`` trains on, when ODS can serve them (each
    at most once per epoch): None for all of them; raises NotCacheable when a sample repeats."""
    positions = resolved.positions
    if positions is None:
        return None
    if len(set(positions)) != len(positions):
        raise NotCacheable("the subset repeats samples (ODS serves each sample once per epoch)")
    return positions
