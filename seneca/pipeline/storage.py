"""Storage: where samples live before they are cached (an ImageFolder-style directory).

A :class:`Storage` is an ordered list of ``(path, label)`` and reads a sample's encoded bytes.
It is built either by scanning a directory laid out like ``torchvision.datasets.ImageFolder``
(one sub-directory per class) or from the ``samples`` list of an existing ImageFolder, so that
indices and labels match that dataset exactly.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from seneca_base.errors import DatasetError

__all__ = ["IMAGE_EXTENSIONS", "Storage", "throttled"]

#: Same list as torchvision.datasets.folder.IMG_EXTENSIONS.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


_throttle: Any = None


@contextlib.contextmanager
def throttled(throttle: Any) -> Iterator[None]:
    """Storage made in the block reads through ``throttle`` (a benchmark's emulated storage
    bandwidth: :class:`seneca._bench.throttle.Throttle`; None: none)."""
    global _throttle
    before, _throttle = _throttle, throttle
    try:
        yield
    finally:
        _throttle = before


class Storage:
    """Ordered ``(path, label)`` samples with reads of their encoded bytes."""

    def __init__(self, samples: Sequence[tuple[str, int]], root: str | None = None) -> None:
        if len(samples) == 0:
            raise DatasetError(f"no samples in dataset{f' at {root}' if root else ''}")
        self.samples = [(os.fspath(p), int(y)) for p, y in samples]
        self.root = root
        #: Class names when scanned with from_folder (index = label), else None.
        self.classes: list[str] | None = None
        #: Optional :class:`seneca._bench.throttle.Throttle` every read waits on (benchmarks:
        #: :func:`throttled`)
        self.throttle: Any = _throttle

    @classmethod
    def from_folder(cls, root: str | os.PathLike) -> Storage:
        """Scan an ImageFolder-style directory: classes are the sorted sub-directory names.

        Raises DatasetError naming the path for a missing directory, a directory without class
        folders, an empty class folder or a file that is not an image.
        """
        root = Path(root)
        if not root.is_dir():
            raise DatasetError(f"dataset directory not found: {root}")
        classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
        if not classes:
            raise DatasetError(f"no class folders in dataset directory {root}")
        samples: list[tuple[str, int]] = []
        for label, name in enumerate(classes):
            files = sorted(p for p in (root / name).rglob("*") if p.is_file())
            for path in files:
                if path.suffix.lower() not in IMAGE_EXTENSIONS:
                    raise DatasetError(
                        f"not an image file (extension not in {', '.join(IMAGE_EXTENSIONS)}): "
                        f"{path}"
                    )
                samples.append((str(path), label))
            if not files:
                raise DatasetError(f"empty class folder: {root / name}")
        storage = cls(samples, root=str(root))
        storage.classes = classes
        return storage

    def __len__(self) -> int:
        return len(self.samples)

    def label(self, index: int) -> int:
        return self.samples[index][1]

    def path(self, index: int) -> str:
        return self.samples[index][0]

    def read(self, index: int) -> bytes:
        """The encoded bytes of sample ``index``; DatasetError names the file on failure."""
        path = self.samples[index][0]
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise DatasetError(f"cannot read sample {index} from {path}: {e.strerror}") from e
        if self.throttle is not None:
            self.throttle.wait(len(data))
        return data

    def fingerprint(self) -> str:
        """A short id of the sample list (relative paths and labels), the same on every machine
        that has the same dataset, whatever its mount point."""
        base = os.path.commonpath([p for p, _ in self.samples]) if len(self.samples) > 1 else ""
        h = hashlib.sha1(str(len(self.samples)).encode())
        cut = len(base)
        for path, label in self.samples:
            h.update(path[cut:].encode() if base else Path(path).name.encode())
            h.update(b"\0%d\n" % label)
        return h.hexdigest()[:12]
