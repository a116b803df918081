"""What every kind of cached dataset's source is (:class:`Source`), and :class:`NotCacheable`:
the kinds themselves and the choice among them are ``seneca.loader.source``'s (a Hugging Face
table's: ``seneca.loader._hf``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["NotCacheable", "Source", "refuse_overrides"]


class NotCacheable(Exception):
    """The dataset is read as DataLoader reads it; the message says why."""


#: what DataLoader calls on a dataset to make and count its samples
_SAMPLE_METHODS = ("__getitem__", "__getitems__", "__len__")


def refuse_overrides(dataset: Any, known: type) -> None:
    """NotCacheable when ``dataset``'s class makes or counts samples otherwise than ``known``
    (the class Seneca reads it as) does: a subclass's own ``__getitem__``, ``__getitems__``
    (which DataLoader calls for a batch when a dataset has it) or ``__len__``. A subclass of
    the library's own (torchvision's ``EuroSAT`` has its own ``__len__``) keeps its meaning."""
    library = known.__module__.split(".")[0]
    kind = type(dataset)
    for method in _SAMPLE_METHODS:
        owner = next((k for k in kind.__mro__ if method in vars(k)), None)
        if owner is not None and owner.__module__.split(".")[0] != library:
            raise NotCacheable(
                f"{kind.__name__} overrides {method}, so Seneca cannot know what a sample is "
                "made of (implement seneca.CacheableDataset to have it cached)"
            )


class Source:
    """How the loader reads and decodes sample ``i`` of a cacheable dataset."""

    #: the samples' id in cache keys
    id: str
    #: the user's dataset the samples are read from (a ConcatDataset's first part)
    dataset: Any
    #: :meth:`sample` makes a row (a mapping), not an ``(image, target)`` pair: no batch tail
    #: runs on its batches
    rows: bool = False
    #: :meth:`read` gives each sample's encoded form (else the encoded tier stays empty)
    encoded: bool = True

    def __len__(self) -> int:
        raise NotImplementedError

    def read(self, index: int) -> bytes | None:
        """The encoded form of sample ``index``; None when it has none (decoded from its file)."""
        raise NotImplementedError

    def decode(self, index: int, raw: bytes | memoryview | None) -> Any:
        """The transform's input of sample ``index`` (from ``raw`` when given)."""
        raise NotImplementedError

    def target(self, index: int) -> Any:
        raise NotImplementedError

    def size(self, index: int) -> int:
        """Bytes read from storage for a sample decoded without :meth:`read`."""
        return 0

    def changed(self) -> str | None:
        """What changed in the samples since :attr:`id` was made, in words for the user (the
        loader asks when each epoch starts); None when nothing did, or the source cannot tell
        (or tells for each batch: :meth:`changed_among`)."""
        return None

    def changed_among(self, indices: Sequence[int]) -> list[int]:
        """Those of samples ``indices`` whose files were made again or changed since :attr:`id`
        was made (the loader asks before it uses a batch's cached values); none when none
        were, or the source tells only for all its samples (:meth:`changed`)."""
        return []

    def file_of(self, index: int) -> str:
        """Sample ``index``'s file, in words for the user (one :meth:`changed_among` found)."""
        return f"sample {index}'s file"

    def decodes_otherwise(self) -> str | None:
        """Why this process would decode a sample otherwise than the values named by
        :attr:`id` were decoded, in words for the user: the decoding function, or a setting of
        the libraries that decode, changed since (a ``worker_init_fn`` may set one in the
        workers only). None when it would not, or the source cannot tell. Reads no sample."""
        return None

    def sample(self, image: Any, target: Any) -> Any:
        """The user's sample from the transformed ``image`` and ``target``: the pair, as a
        folder dataset gives it (a table's row, for a Hugging Face dataset)."""
        return image, target

    def batch(self, samples: list[Any]) -> list[Any]:
        """A batch's samples as the dataset makes them together, from :meth:`sample`'s of each
        (a Hugging Face table's format function runs on the batch, as the table's
        ``__getitems__`` runs it for DataLoader)."""
        return samples
