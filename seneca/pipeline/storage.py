"""Storage: where samples live before they are cached (an ImageFolder-style directory).

A :class:`Storage` is an ordered list of ``(path, label)`` and reads a sample's encoded bytes.
It is built either by scanning a directory laid out like ``torchvision.datasets.ImageFolder``
(one sub-directory per class) or from the ``samples`` list of an existing ImageFolder, so that
indices and labels match that dataset exactly.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from seneca import defaults
from seneca_base.errors import DatasetError

__all__ = ["IMAGE_EXTENSIONS", "STAMP", "Storage", "file_stamps", "stamps_differ", "throttled"]

#: Same list as torchvision.datasets.folder.IMG_EXTENSIONS.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")

#: the numbers of a file's stamp (:func:`file_stamps`)
STAMP = 3

_throttle: Any = None
log = logging.getLogger("seneca")


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

    def __init__(
        self, samples: Sequence[tuple[str | os.PathLike, Any]], root: str | None = None
    ) -> None:
        if len(samples) == 0:
            raise DatasetError(f"no samples in dataset{f' at {root}' if root else ''}")
        # a path and a label are what the dataset's samples hold (a str or a Path; a class
        # index, a float to regress, a tuple, an array), as DatasetFolder hands them on
        self.samples = [(p, y) for p, y in samples]
        self.root = root
        #: Class names when scanned with from_folder (index = label), else None.
        self.classes: list[str] | None = None
        #: Optional :class:`seneca._bench.throttle.Throttle` every read waits on (benchmarks:
        #: :func:`throttled`)
        self.throttle: Any = _throttle
        # each file's stamp (``_stat``) when the fingerprint was made (None: not yet), handed
        # to the workers with the rest, which look at the files they read from the cache
        self._stamps: np.ndarray | None = None
        # whether a stat took a round trip (a network file system) when the fingerprint was made
        self._slow = False

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

    def label(self, index: int) -> Any:
        return self.samples[index][1]

    def path(self, index: int) -> str | os.PathLike:
        return self.samples[index][0]

    def read(self, index: int) -> bytes:
        """The encoded bytes of sample ``index``. A file that cannot be read raises what
        ``open`` raised (``FileNotFoundError``, ``PermissionError``: what DataLoader's read
        raises), with a note naming the sample."""
        path = self.samples[index][0]
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            e.add_note(f"seneca: cannot read sample {index} from {path}")
            raise
        if self.throttle is not None:
            self.throttle.wait(len(data))
        return data

    def fingerprint(self, version: str | None = None) -> str:
        """A short id of the samples: their paths relative to the dataset's folder, labels,
        file sizes and modification times; the same on every machine that has the same files
        (copied with their times: ``rsync -a``, ``cp -p``), whatever its mount point, and
        another one when a file is made again or rewritten at the same path, so that the cache
        never serves what it held before. ``version``: the user vouches that copies with these
        paths, labels and sizes are the same dataset (copies whose times differ): the version
        stands for the times."""
        paths = [os.fspath(p) for p, _ in self.samples]
        # the folder every path is in: the least and the greatest path share what all share
        # (os.path.commonpath of them all splits every path: 1 s for 200,000 of them)
        base = os.path.commonpath([min(paths), max(paths)]) if len(paths) > 1 else ""
        cut = len(base)
        names = [path[cut:] for path in paths] if base else [Path(p).name for p in paths]
        labels = [label for _, label in self.samples]
        stats, self._slow = file_stamps(paths)
        self._stamps = np.array(stats, dtype=np.int64).reshape(len(stats), STAMP)
        # a version stands for the times: the rows leave them out, the version comes first
        rows = [] if version is None else [f"version\0{version}\n"]
        rows += [
            f"{name}\0{label}\0{size}" + ("\n" if version is not None else f"\0{mtime}\n")
            for name, label, (size, mtime, _) in zip(names, labels, stats, strict=True)
        ]
        # one string hashed at once (a third faster than an update per file); names that are
        # not UTF-8 (bytes the file system holds) hash as those bytes
        h = hashlib.sha1(str(len(paths)).encode())
        h.update("".join(rows).encode("utf-8", "surrogateescape"))
        return h.hexdigest()[:12]

    def changed_among(self, indices: Sequence[int]) -> list[int]:
        """Those of the samples ``indices`` whose file is not as it was when :meth:`fingerprint`
        was made (:func:`_stat`: a stat each, in threads where a stat takes a round trip):
        files made again or rewritten since, also with their old size and modification time put
        back, or whose metadata changed. None are before a fingerprint is made."""
        if self._stamps is None or not indices:
            return []
        before = self._stamps[np.asarray(indices, dtype=np.int64)]
        paths = [self.samples[i][0] for i in indices]
        return [indices[k] for k in np.flatnonzero(stamps_differ(paths, before, self._slow))]


def _stat(path: str | os.PathLike) -> tuple[int, int, int]:
    """``path``'s size in bytes, modification time and change time (ns); -1s when it cannot be
    read (reading the sample fails later and names the file, as DataLoader's would). A program
    can put a file's old size and modification time back (``cp -p``, ``rsync -a`` and ``tar``
    keep a file's time; image optimizers keep it as they rewrite a file), but not its change
    time, which the system sets whenever the file or its metadata changes, also when another
    file is renamed over it. (Its inode number would say no more, and is not stable on some
    network and FUSE file systems.)"""
    try:
        st = os.stat(path)
    except OSError:
        return -1, -1, -1
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns


def file_stamps(
    paths: Sequence[str | os.PathLike], slow: bool | None = None
) -> tuple[list[tuple[int, int, int]], bool]:
    """Each file's stamp in ``paths`` (:func:`_stat`: its size, modification time and change
    time in ns; -1s for a file that cannot be read), looked at one at a time where that
    is quick (a local disk, about a microsecond each), in threads where each takes a round trip
    (a network file system); and whether it does. ``slow``: whether it does, known (else the
    first ``defaults.STAT_PROBE`` files tell)."""
    start = time.perf_counter()
    probe = 0 if slow is not None else min(len(paths), defaults.STAT_PROBE)
    stats = [_stat(p) for p in paths[:probe]]
    if slow is None:
        slow = (time.perf_counter() - start) / max(probe, 1) > defaults.STAT_SLOW_US * 1e-6
    rest = paths[probe:]
    if slow and rest:
        other = "the other " if probe else ""
        log.debug("%s%d files looked at in %d threads", other, len(rest), defaults.STAT_THREADS)
        # chunks of at most STAT_PROBE files, as many as there are threads where that is fewer
        step = min(defaults.STAT_PROBE, -(-len(rest) // defaults.STAT_THREADS))
        chunks = [rest[i : i + step] for i in range(0, len(rest), step)]
        with ThreadPoolExecutor(defaults.STAT_THREADS, thread_name_prefix="seneca-stat") as pool:
            for part in pool.map(lambda chunk: [_stat(p) for p in chunk], chunks):
                stats += part
    else:
        stats += [_stat(p) for p in rest]
    took = time.perf_counter() - start
    if took > 1.0:
        log.info("looked at %d files in %.1f s", len(paths), took)
    return stats, slow


def stamps_differ(
    paths: Sequence[str | os.PathLike], before: np.ndarray, slow: bool | None = None
) -> np.ndarray:
    """Whether each file in ``paths`` is not as its row of ``before`` (its stamps as
    :func:`file_stamps` took them) says: made again or changed since. ``slow``: as for
    :func:`file_stamps`."""
    now, _ = file_stamps(paths, slow=slow)
    return (np.array(now, dtype=np.int64).reshape(before.shape) != before).any(1)
