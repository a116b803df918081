"""Hugging Face ``datasets.Dataset`` with an image column, as a cached source.

A table whose one decodable column is an ``Image()`` feature (``load_dataset("imagefolder",
...)``, the Hub's image datasets, ``Dataset.from_dict`` with images) is cached as a folder
dataset is: the image's stored bytes (encoded tier) and the image ``datasets`` decodes from
them (decoded tier), decoded by the feature itself so that it is the same image. A row is made
as ``datasets`` makes it: the row's values with the decoded image in its column, then the
dataset's ``set_transform`` / ``with_transform`` function, if any, on the rows of a batch
together (as the table's ``__getitems__`` runs it for DataLoader), with the format's
``columns`` and ``output_all_columns``. A ``seneca.ColumnTransform`` there
is split as a folder dataset's transform is (its head cached, ``_Base`` shows it to the
loader); any other function runs at every fetch, its output uncached. Other formats
(``"torch"``, ``"numpy"``, ...) are read as DataLoader reads them.

The samples' id is made from the table's content as the dataset shows it (its row order too):
each row's image by its bytes or, for an image kept as a file's path, by the file's path, size
and modification time; the other columns by their values; and the image feature (its mode)
with the release of ``datasets`` that decodes it.
Files regenerated in place, a ``shuffle``/``select`` or another ``mode`` give another id:
never another table's values.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from seneca.loader._source_base import NotCacheable, Source, refuse_overrides
from seneca.pipeline.fingerprint import runtime
from seneca.pipeline.storage import STAMP, file_stamps, stamps_differ
from seneca.pipeline.transforms import ColumnTransform
from seneca_base.errors import ConfigError

__all__ = ["HFImageSource", "hf_dataset"]

#: a row of ``HFImageSource``'s file stamps whose image the table holds (not a file)
_NO_FILE = -2

#: the formats whose rows are made here as ``datasets`` makes them
FORMATS = (None, "python", "custom")


def hf_dataset(dataset: Any) -> bool:
    """Whether ``dataset`` is a ``datasets.Dataset`` (not imported when it is not loaded)."""
    module = sys.modules.get("datasets")
    return module is not None and isinstance(dataset, module.Dataset)


def _image_column(dataset: Any) -> str:
    """The one decodable column, an ``Image()``; NotCacheable says why there is none."""
    import datasets

    decodable = {
        name: f for name, f in dataset.features.items() if getattr(f, "decode", False) is True
    }
    images = [name for name, f in decodable.items() if isinstance(f, datasets.Image)]
    if len(images) != 1 or len(decodable) != 1:
        raise NotCacheable(
            "a Hugging Face dataset is cached when one column is an Image() feature and no other "
            f"column needs decoding (its decodable columns: {sorted(decodable) or 'none'})"
        )
    return images[0]


def _check_format(dataset: Any) -> None:
    fmt = dataset.format
    if fmt["type"] not in FORMATS:
        raise NotCacheable(
            f"a Hugging Face dataset in format {fmt['type']!r} (Seneca makes the rows of "
            "datasets without a format or with set_transform/with_transform)"
        )


def _format_transform(fmt: dict) -> Any:
    """The function a dataset's format ``fmt`` runs on its rows (None: none)."""
    return fmt["format_kwargs"].get("transform") if fmt["type"] == "custom" else None


def _column_transform(fmt: dict, column: str) -> ColumnTransform | None:
    """The function of a dataset's format ``fmt`` when it is a :class:`ColumnTransform` of
    ``column`` (else None: another function, or none)."""
    fn = _format_transform(fmt)
    return fn if isinstance(fn, ColumnTransform) and fn.column == column else None


class _Base:
    """What the loader reads a dataset's ``transform`` from (as a folder dataset's): the
    image transform of the table's :class:`ColumnTransform`, as it is now (None without
    one); setting it sets the ColumnTransform's."""

    target_transform = None

    def __init__(self, dataset: Any, column: str) -> None:
        self.dataset, self.column = dataset, column

    @property
    def transform(self) -> Any:
        fn = _column_transform(self.dataset.format, self.column)
        return None if fn is None else fn.transform

    @transform.setter
    def transform(self, value: Any) -> None:
        fn = _column_transform(self.dataset.format, self.column)
        if fn is None:
            raise ConfigError("the Hugging Face dataset has no seneca.ColumnTransform to set")
        fn.transform = value


class HFImageSource(Source):
    """The rows of a ``datasets.Dataset`` with one ``Image()`` column (see the module docs):
    :meth:`target` is the row without its image, :meth:`sample` the row as the dataset gives
    it. :attr:`base` is what the loader reads the image transform from."""

    rows = True

    def __init__(self, dataset: Any) -> None:
        import datasets

        refuse_overrides(dataset, datasets.Dataset)
        self.column = _image_column(dataset)
        _check_format(dataset)
        self.dataset = dataset
        self.base = _Base(dataset, self.column)
        self.feature = dataset.features[self.column]
        undecoded = dataclasses.replace(self.feature, decode=False)
        #: the rows as python values, the image as its stored ``{"bytes", "path"}``
        self.raw = dataset.cast_column(self.column, undecoded).with_format(None)
        # views of the same table: a sample's image alone (its bytes read once), and its
        # other columns alone (read at every fetch, hits too, without the image's bytes)
        self.images = self.raw.select_columns([self.column])
        self.others = self.raw.remove_columns([self.column])
        # made with the id (``_digest``): the id, what decoded the images it names, and the
        # image files' stamps and paths (None: the table holds every image)
        self._id: str | None = None
        self._decoded_by: str | None = None
        self._files: tuple[np.ndarray, Any] | None = None

    def __len__(self) -> int:
        return len(self.raw)

    @property
    def id(self) -> str:  # type: ignore[override]
        if self._id is None:
            self._id = "hf" + self._digest()
        return self._id

    def _digest(self) -> str:
        import datasets

        self._decoded_by = made = runtime()
        # what decodes, how: datasets' own release too (its Image feature decodes: a release
        # that turns an image by its EXIF orientation makes another image of the same bytes)
        version = datasets.__version__.split("+")[0]
        h = hashlib.sha1(f"{made}|datasets {version}|{self.feature!r}".encode())
        # each row's image file's stamp (``file_stamps``) where it is kept as a path, and the
        # rows' paths (Arrow's strings, as the table keeps them)
        stamps = np.full((len(self.raw), STAMP), _NO_FILE, dtype=np.int64)
        paths = []
        at = 0
        for name, column in self._columns(self.raw.column_names):
            if name == self.column:
                _image_ids(column, h, stamps[at : at + len(column)])
                paths.append(_fields(column)["path"])
                at += len(column)
            else:
                h.update(name.encode() + repr(column.to_pylist()).encode())
        # (none when the table holds every image: nothing to look at again)
        if (stamps[:, 0] != _NO_FILE).any():
            import pyarrow as pa

            self._files = (stamps, pa.concat_arrays(paths))
        return h.hexdigest()[:16]

    def _columns(self, names: list[str]) -> Iterator[tuple[str, Any]]:
        """The table's columns ``names``, a chunk at a time (joined, one could pass 2 GB)."""
        table = self.raw.with_format("arrow")
        for start in range(0, len(table), 65536):
            chunk = table[start : start + 65536]
            for name in names:
                for column in chunk.column(name).chunks:
                    yield name, column

    def changed_among(self, indices: Sequence[int]) -> list[int]:
        """Those of rows ``indices`` whose image files, kept as paths, were made again or
        changed since the id was made (``file_stamps``: a stat each; the table's own bytes
        cannot change)."""
        if self._files is None:
            return []
        stamps, paths = self._files
        rows = np.asarray(indices, dtype=np.int64)
        rows = rows[stamps[rows, 0] != _NO_FILE]
        if not len(rows):
            return []
        names = [path or "" for path in paths.take(rows).to_pylist()]
        return [int(i) for i in rows[stamps_differ(names, stamps[rows])]]

    def file_of(self, index: int) -> str:
        path = self._files[1][index].as_py() if self._files is not None else None
        return f"{path} (row {index}'s {self.column!r})" if path else super().file_of(index)

    def decodes_otherwise(self) -> str | None:
        before = self._decoded_by
        if before is None or runtime() == before:
            return None
        return "how the dataset's images decode changed (a setting of the libraries that decode)"

    def read(self, index: int) -> bytes:
        value = self.images[index][self.column]
        if value["bytes"] is not None:
            return value["bytes"]
        with open(value["path"], "rb") as f:  # OSError names the file, as decoding it would
            return f.read()

    def decode(self, index: int, raw: bytes | memoryview | None) -> Any:
        data = self.read(index) if raw is None else bytes(raw)
        try:
            return self.feature.decode_example({"path": None, "bytes": data})
        except (OSError, SyntaxError, ValueError) as e:
            e.add_note(f"seneca: cannot decode the image of row {index}")
            raise

    def target(self, index: int) -> dict:
        return self.others[index]

    def size(self, index: int) -> int:
        value = self.images[index][self.column]
        if value["bytes"] is not None:
            return len(value["bytes"])
        try:
            return os.path.getsize(value["path"])
        except OSError:
            return 0

    def sample(self, image: Any, target: Any) -> Any:
        """Row ``target`` with ``image`` in its column, as the dataset's format makes it now
        (a transform set between epochs is used, as DataLoader would), less the format's
        function, which :meth:`batch` runs on the batch's rows."""
        fmt = self.dataset.format
        if fmt["type"] not in FORMATS:
            raise ConfigError(  # set after the loader was made: no row it could make is right
                f"the Hugging Face dataset's format became {fmt['type']!r} after its "
                "SenecaLoader was made; make the loader again"
            )
        row = {}
        for name in self.raw.column_names:  # the table's column order, as datasets gives it
            row[name] = image if name == self.column else target[name]
        made = _column_transform(fmt, self.column)
        if made is None and _format_transform(fmt) is not None:
            return row  # made into the format's row by batch()
        columns = fmt["columns"]
        formatted = row if columns is None else {k: v for k, v in row.items() if k in columns}
        if made is not None:  # the loader made the image with its transform already
            formatted = {k: v for k, v in formatted.items() if k != self.column}
            formatted[made.output] = image
        return _with_the_rest(fmt, formatted, row)

    def batch(self, samples: list[Any]) -> list[Any]:
        """The rows :meth:`sample` made, the format's function run on them together, as
        ``datasets`` runs it on the rows DataLoader asks for at once (``__getitems__``): a
        function may pad its batch to its largest image, as an image processor does."""
        fmt = self.dataset.format
        transform = _format_transform(fmt)
        if not samples or transform is None or _column_transform(fmt, self.column) is not None:
            return samples
        columns = fmt["columns"]
        names = [n for n in samples[0] if columns is None or n in columns]
        made = transform({name: [row[name] for row in samples] for name in names})
        rest = {name: [row[name] for row in samples] for name in samples[0]}
        made = _with_the_rest(fmt, made, rest)
        count = len(next(iter(made.values()))) if made else 0  # as datasets counts them
        return [{name: values[i] for name, values in made.items()} for i in range(count)]


def _with_the_rest(fmt: dict, formatted: dict, row: dict) -> dict:
    """``formatted`` with the columns of ``row`` (a row, or a batch's columns) the format
    leaves out, as python values, when its ``output_all_columns`` asks for them."""
    columns = fmt["columns"]
    if columns is not None and fmt["output_all_columns"]:
        formatted.update((k, v) for k, v in row.items() if k not in columns)
    return formatted


def _image_ids(column: Any, h: Any, stamps: Any) -> None:
    """Hash the stored images of ``column`` (an ``Image()`` column's Arrow struct of bytes and
    path) into ``h``: each row's bytes (their lengths, then all of them, read where Arrow keeps
    them), and for a row kept as a path, the file's path, size and modification time (a
    missing file: its path alone; reading it fails later), those into its row of ``stamps``
    too."""
    import pyarrow as pa

    data = _fields(column)["bytes"]
    nulls = data.is_null().to_numpy(zero_copy_only=False)
    if pa.types.is_binary(data.type) or pa.types.is_large_binary(data.type):
        wide = np.int64 if pa.types.is_large_binary(data.type) else np.int32
        _, offsets_buf, values = data.buffers()
        offsets = np.frombuffer(offsets_buf, wide)[data.offset : data.offset + len(data) + 1]
        lengths = np.where(nulls, -1, np.diff(offsets).astype(np.int64))
        h.update(lengths.tobytes())
        if values is not None:
            h.update(memoryview(values)[int(offsets[0]) : int(offsets[-1])])
    else:  # another layout: value by value
        for value in data.to_pylist():
            h.update(b"-" if value is None else b"%d:" % len(value) + value)
    kept = np.flatnonzero(nulls)
    if not len(kept):
        return
    names = _fields(column)["path"].to_pylist()
    paths = [names[i] for i in kept]
    found, _ = file_stamps([path or "" for path in paths])
    for path, (size, mtime, _) in zip(paths, found, strict=True):
        if path is None:
            h.update(b"-")
        else:
            h.update(f"p{path}".encode() + (f":{size}:{mtime}".encode() if size >= 0 else b""))
    stamps[kept] = found


def _fields(column: Any) -> dict[str, Any]:
    """An ``Image()`` column's Arrow struct as its fields (``bytes``, ``path``)."""
    return dict(zip((f.name for f in column.type), column.flatten(), strict=True))
