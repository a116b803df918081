"""timm's ``ImageDataset`` over a folder, as ``timm.data.create_dataset`` makes it for one: cached
as a folder dataset is, from its reader's files and labels, each image opened and converted to
the dataset's ``input_img_mode`` as timm's ``__getitem__`` does.

Another reader (a tar file, a Hugging Face or TFDS dataset), ``load_bytes``, extra features, no
``input_img_mode`` (timm then hands the transform the lazily opened file) or an unlabelled
sample make the dataset read as DataLoader reads it. A file that cannot be opened raises, naming
it, where timm's dataset would skip to the next sample with a warning. timm is not imported
here: its classes are known by their module and name.
"""

from __future__ import annotations

import io
from typing import Any

from PIL import Image

from seneca.loader._folder import FolderSource
from seneca.loader._source_base import NotCacheable
from seneca.pipeline.fingerprint import runtime

__all__ = ["TimmFolderSource", "timm_class"]

#: timm's dataset class, and the reader of a folder it is given for one (module, name)
_DATASET = ("timm.data.dataset", "ImageDataset")
_READER = ("timm.data.readers.reader_image_folder", "ReaderImageFolder")


def _is(cls: type, named: tuple[str, str]) -> bool:
    return (cls.__module__, cls.__qualname__) == named


def timm_class(dataset: Any) -> type | None:
    """timm's ``ImageDataset`` class where ``dataset`` is one (or of a subclass), else None."""
    return next((k for k in type(dataset).__mro__ if _is(k, _DATASET)), None)


class TimmFolderSource(FolderSource):
    """A timm ``ImageDataset``'s files, through its folder reader (``reader.samples``)."""

    def __init__(self, dataset: Any, version: str | None = None) -> None:
        why = _uncacheable(dataset)
        if why is not None:
            raise NotCacheable(f"{type(dataset).__name__} (timm): {why}")
        super().__init__(dataset, dataset.reader.samples, version)

    def samples_now(self) -> Any:
        """The reader's samples, which timm's dataset reads a sample from at each fetch."""
        return getattr(getattr(self.dataset, "reader", None), "samples", None)

    @property
    def loader(self) -> None:
        """No loader function: the file's bytes are the encoded form."""
        return None

    def decoder(self) -> str:
        """The mode each image is converted to, with the libraries that decode."""
        return f"timm-{self.dataset.input_img_mode}{runtime()}"

    def decode_file(self, index: int, raw: bytes | memoryview | None) -> Any:
        """The file opened and converted to the dataset's ``input_img_mode``, as timm does."""
        data = raw if raw is not None else self.storage.read(index)
        return Image.open(io.BytesIO(data)).convert(self.dataset.input_img_mode)


def _uncacheable(dataset: Any) -> str | None:
    """Why timm's ``dataset`` cannot be cached as a folder's files (None: it can)."""
    reader = getattr(dataset, "reader", None)
    if reader is None or not _is(type(reader), _READER):
        return f"its reader is a {type(reader).__name__}, not timm's folder reader"
    if getattr(dataset, "load_bytes", False):
        return "load_bytes hands the transform the file's bytes"
    if getattr(dataset, "additional_features", None):
        return "it gives additional features"
    mode = getattr(dataset, "input_img_mode", None)
    if not isinstance(mode, str) or not mode:
        return "no input_img_mode: the transform is handed the file as opened"
    if any(label is None for _, label in reader.samples):
        return "it has unlabelled samples"
    return None
