"""A torchvision ``DatasetFolder``'s files as a cached dataset's source: read as the file's bytes
and decoded as its loader function decodes them (torchvision's default ``pil_loader``: the bytes
opened and converted to RGB), named by the files and by what decodes them."""

from __future__ import annotations

import functools
import io
import os
import sys
from array import array
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from PIL import Image, UnidentifiedImageError
from torchvision import get_image_backend

from seneca.loader._source_base import Source
from seneca.pipeline.fingerprint import fingerprint, runtime
from seneca.pipeline.storage import Storage

__all__ = ["FolderSource", "MergedSamples", "decoder_name", "pil_decode"]


def pil_decode(data: bytes | memoryview) -> Image.Image:
    """Decode image bytes exactly as torchvision's default ``pil_loader`` decodes a file: the
    file's image converted to RGB, a plain image with the file's ``info`` and no ``format``
    (for an RGB file a copy, which the 0.1 ms it takes buys: a transform may read them)."""
    return Image.open(io.BytesIO(data)).convert("RGB")


#: torchvision's module of folder datasets and their loader functions
_FOLDER = "torchvision.datasets.folder"


def _decodes_bytes(loader: Callable | None) -> bool:
    """Whether ``loader(path)`` equals ``pil_decode(file bytes)``: torchvision's defaults, its
    ``default_loader`` only while torchvision's image backend is PIL (not accimage)."""
    if loader is None:
        return True
    if getattr(loader, "__module__", "") != _FOLDER:
        return False
    name = getattr(loader, "__name__", "")
    if name == "pil_loader":
        return True
    # default_loader calls the module's pil_loader, which a script may have replaced
    pil = getattr(sys.modules[_FOLDER], "pil_loader", None)
    own = getattr(pil, "__module__", "") == _FOLDER and getattr(pil, "__name__", "") == "pil_loader"
    return name == "default_loader" and get_image_backend() == "PIL" and own


def _loader_parts(loader: Callable | None) -> tuple[Any, ...]:
    """What ``loader`` decodes with: itself and, for torchvision's ``default_loader``, the
    module's loader functions it calls as they are now (a script may have replaced one)."""
    if getattr(loader, "__module__", "") != _FOLDER or loader.__name__ != "default_loader":
        return (loader,)
    folder = sys.modules[_FOLDER]
    return (loader, getattr(folder, "pil_loader", None), getattr(folder, "accimage_loader", None))


def decoder_name(*made_by: Any) -> str:
    """The short name of a function that decodes samples and what it decodes with
    (``made_by``): by what they do (``describe``: code, what they are given, the settings they
    read) and the libraries that decode (``runtime``); a name of its own each time when they
    cannot be named (``fingerprint``)."""
    return fingerprint(list(made_by), about="the dataset's loader function")[:8]


class MergedSamples:
    """The samples of several folder datasets as one list (a ``ConcatDataset``'s parts, or
    subsets of them): sample ``i`` is entry ``at[i]`` of the ``samples`` list its dataset
    ``holders[part[i]]`` holds now, as the ``ConcatDataset`` reads it at each fetch."""

    def __init__(self, holders: list[Any], part: Sequence[int], at: Sequence[int]) -> None:
        self.holders = holders
        self.part, self.at = array("q", part), array("q", at)

    @classmethod
    def of(cls, lists: Sequence[tuple[Any, Sequence[int] | None]]) -> MergedSamples:
        """The samples of ``lists``, in order: each a folder dataset's (its ``samples``, or
        those at the given positions) or, as a :class:`MergedSamples`, the samples of merged
        datasets (those at the given positions)."""
        holders: list[Any] = []
        part: list[int] = []
        at: list[int] = []
        for source, positions in lists:
            if isinstance(source, MergedSamples):
                taken = range(len(source)) if positions is None else positions
                part += [len(holders) + source.part[i] for i in taken]
                at += [source.at[i] for i in taken]
                holders += source.holders
            else:
                taken = range(len(source.samples)) if positions is None else positions
                part += [len(holders)] * len(taken)
                at += taken
                holders.append(source)
        return cls(holders, part, at)

    def __len__(self) -> int:
        return len(self.at)

    def __getitem__(self, i: int) -> tuple[str, Any]:
        return self.holders[self.part[i]].samples[self.at[i]]

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        return (self[i] for i in range(len(self)))


class FolderSource(Source):
    """A ``DatasetFolder``'s files (``samples``: another list of them, as a
    :class:`MergedSamples` the files of several); ``storage`` reads them (and may be
    throttled). ``version``: the user's version of the files, in place of their modification
    times in the id (``Storage.fingerprint``)."""

    def __init__(
        self,
        dataset: Any,
        samples: Sequence[tuple[str, Any]] | None = None,
        version: str | None = None,
    ) -> None:
        root = getattr(dataset, "root", None) if samples is None else None
        self.storage = Storage(dataset.samples if samples is None else samples, root=root)
        self.dataset = dataset
        #: the datasets whose files are merged into this source's (None: ``dataset``'s own)
        self.merged = samples if isinstance(samples, MergedSamples) else None
        self.encoded = _decodes_bytes(self.loader)
        self.version = version

    @property
    def loader(self) -> Callable | None:
        """The dataset's loader function as it is now (a ``worker_init_fn`` may set another,
        as it may for DataLoader's workers)."""
        return getattr(self.dataset, "loader", None)

    @functools.cached_property
    def id(self) -> str:  # type: ignore[override]
        """The files' id (``Storage.fingerprint``: a stat per file) and the decoder's, made
        when first asked (the parts of a ConcatDataset, merged into one source, never are)."""
        return f"{self.storage.fingerprint(self.version)}.{self.decoded_by}"

    @functools.cached_property
    def decoded_by(self) -> str:
        """:meth:`decoder` when the id was made (what the cached values are decoded by)."""
        return self.decoder()

    def decoder(self) -> str:
        """The name of what decodes a file: ``pil`` (torchvision's default loader), else the
        loader function named by what it does (its code and what it is given), so that a
        loader changed between runs makes other decoded values than those cached; either
        with the libraries that decode and their settings (``fingerprint.runtime``)."""
        if _decodes_bytes(self.loader):
            return f"pil{runtime()}"
        # (torchvision's default loader decodes with the image backend set, accimage's or PIL's)
        return decoder_name(get_image_backend(), *_loader_parts(self.loader))

    def decodes_otherwise(self) -> str | None:
        if "decoded_by" not in self.__dict__ or self.decoder() == self.decoded_by:
            return None
        return (
            "how the dataset's files decode changed (its loader function, or a setting), or "
            "cannot be named"
        )

    def __len__(self) -> int:
        return len(self.storage)

    def read(self, index: int) -> bytes | None:
        return self.storage.read(index) if self.encoded else None

    def decode(self, index: int, raw: bytes | memoryview | None) -> Any:
        try:
            return self.decode_file(index, raw)
        except (UnidentifiedImageError, OSError, SyntaxError) as e:
            # what DataLoader raises for this file (PIL's error), with the file named
            e.add_note(f"seneca: cannot decode sample {index}: {self.storage.path(index)}")
            raise

    def decode_file(self, index: int, raw: bytes | memoryview | None) -> Any:
        """Sample ``index``'s file decoded as the dataset decodes it (from ``raw``, its bytes,
        when read), raising what that raises."""
        if raw is None or not _decodes_bytes(self.loader):  # (pil_loader replaced since)
            return self.loader(self.storage.path(index))
        return pil_decode(raw)

    def samples_now(self) -> Any:
        """The list of ``(file, label)`` samples the user's dataset reads a sample from at each
        fetch, as it is now (for merged datasets, each from its own dataset's list)."""
        return self.merged if self.merged is not None else getattr(self.dataset, "samples", None)

    def target(self, index: int) -> Any:
        """Sample ``index``'s label as this process's copy of the user's dataset holds it now:
        DataLoader reads it at every fetch, so a label the script sets within an epoch is used
        from the next sample made (a worker's copy is the one it started with). A sample that
        names another file now keeps the label taken with its file, until the next iteration
        looks at the samples (``Resolved.follow``)."""
        path, label = self.storage.samples[index]
        now = self.samples_now()
        if now is None:
            return label
        try:
            now_path, now_label = now[index]
        except (IndexError, TypeError, ValueError):
            return label
        return now_label if now_path == path else label

    def changed_among(self, indices: Sequence[int]) -> list[int]:
        """Those of samples ``indices`` whose files were made again or changed since the id
        was made (a stat each: ``Storage.changed_among``), looked at for each batch (so not all
        at once as each epoch starts); not looked at under a ``version``, which vouches for the
        files."""
        if self.version is not None or "id" not in self.__dict__:
            return []
        return self.storage.changed_among(indices)

    def file_of(self, index: int) -> str:
        return os.fspath(self.storage.path(index))

    def size(self, index: int) -> int:
        try:
            return os.path.getsize(self.storage.path(index))
        except OSError:
            return 0
