"""Hugging Face ``datasets``: a ``datasets.Dataset`` with an ``Image()`` column is cached as a
folder dataset is (encoded and decoded tiers, shared by jobs), its rows made as ``datasets``
makes them (with ``set_transform`` / ``with_transform``), bit-identical to DataLoader's."""

import io
import os
import shutil

import datasets
import numpy as np
import pytest
import torch
from helpers.rewrite import made_again_keeping_times
from PIL import Image
from torch.utils.data import DataLoader
from torchvision.transforms import v2

from seneca import ColumnTransform, SenecaLoader
from seneca.loader._hf import HFImageSource

pytestmark = pytest.mark.ecosystem

CROP = v2.Compose([v2.CenterCrop(16), v2.PILToTensor()])


def pixels(batch):
    """A deterministic set_transform: the crop of each image as ``pixel_values``."""
    return {"pixel_values": [CROP(im) for im in batch["image"]], "label": batch["label"]}


def random_pixels(batch):
    crop = v2.Compose([v2.RandomResizedCrop(16), v2.PILToTensor()])
    return {"pixel_values": [crop(im) for im in batch["image"]], "label": batch["label"]}


@pytest.fixture
def folder(tiny_dataset, tmp_path):
    """A copy of the tiny dataset as ``load_dataset("imagefolder")`` reads it: the images kept
    as their files' paths (a test may rewrite them), the table cached under ``tmp_path``."""
    root = shutil.copytree(tiny_dataset, tmp_path / "images")
    return datasets.load_dataset(
        "imagefolder", data_dir=str(root), split="train", cache_dir=str(tmp_path / "hf")
    )


def first_path(ds):
    """Where the first row's image file is."""
    return ds.cast_column("image", datasets.Image(decode=False)).with_format(None)[0]["image"][
        "path"
    ]


def jpeg(seed, size=(40, 30)):
    rng = np.random.default_rng(seed)
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (*size[::-1], 3), dtype=np.uint8)).save(out, "JPEG")
    return out.getvalue()


def in_memory(n=24):
    """A table built in memory, the images' bytes in it."""
    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    rows = {"image": [{"bytes": jpeg(i), "path": None} for i in range(n)], "label": list(range(n))}
    return datasets.Dataset.from_dict(rows, features=features)


def assert_equal_batches(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            same = torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k]
            assert same, k


def warmed(table, redis_url):
    """A loader of ``table`` after two epochs, the second read from the cache (every row)."""
    loader = SenecaLoader(table, batch_size=8, cache=redis_url, cache_size="20MB")
    list(loader)
    list(loader)
    assert loader.stats()["storage_reads"] == len(table)  # the second epoch from the cache
    return loader


@pytest.mark.parametrize("how", ["set_transform", "with_transform", "columns"])
def test_rows_equal_dataloaders_and_the_second_epoch_reads_no_file(folder, redis_url, how):
    if how == "set_transform":
        folder.set_transform(pixels)
        ds = folder
    elif how == "with_transform":
        ds = folder.with_transform(pixels)
    else:  # the transform sees the image only; the label comes as a python value
        ds = folder.with_transform(
            lambda b: {"pixel_values": [CROP(im) for im in b["image"]]},
            columns=["image"],
            output_all_columns=True,
        )
    loader = SenecaLoader(ds, batch_size=8, num_workers=1, cache=redis_url, cache_size="20MB")
    assert loader.not_cached is None
    want = list(DataLoader(ds, batch_size=8))
    for epoch in range(2):
        loader.reset_stats()
        assert_equal_batches(list(loader), want)
        stats = loader.stats()
        if epoch:
            assert stats["storage_reads"] == 0 and stats["decoded"]["hits"] == 48, stats
    loader.close()


def test_rows_without_a_format_are_the_tables_rows(redis_url):
    ds = in_memory()
    loader = SenecaLoader(ds, batch_size=4, collate_fn=list, cache=redis_url, cache_size="20MB")
    for _ in range(2):
        got = [row for batch in loader for row in batch]
        assert [r["label"] for r in got] == list(range(24))
        for r, w in zip(got, ds, strict=True):
            assert r.keys() == w.keys() and r["image"].tobytes() == w["image"].tobytes()
    assert loader.stats()["decoded"]["hits"] == 24
    loader.close()


def test_concurrent_jobs_share_the_decoded_images(folder, redis_url):
    folder.set_transform(random_pixels)
    a, b = (
        SenecaLoader(folder, batch_size=8, shuffle=True, cache=redis_url, cache_size="20MB")
        for _ in range(2)
    )
    assert a.ods and a.store.keys.dataset == b.store.keys.dataset
    seen = sorted(int(y) for batch in a for y in batch["label"])
    assert len(seen) == 48 and all(x["pixel_values"].shape == (3, 16, 16) for x in [folder[0]])
    b.reset_stats()
    assert sum(len(batch["label"]) for batch in b) == 48
    assert b.stats()["storage_reads"] == 0 and b.stats()["decoded"]["hits"] == 48
    a.close()
    b.close()


def test_the_id_names_the_content_the_order_and_the_mode(folder):
    base = HFImageSource(folder).id
    assert HFImageSource(in_memory()).id == HFImageSource(in_memory()).id  # built twice
    assert HFImageSource(in_memory()).id != HFImageSource(in_memory(23)).id
    assert HFImageSource(folder.shuffle(seed=0)).id != base  # another order
    assert HFImageSource(folder.select(range(47))).id != base
    grey = folder.cast_column("image", datasets.Image(mode="L"))
    assert HFImageSource(grey).id != base
    relabelled = folder.map(lambda row: {"label": 1 - min(row["label"], 1)})
    assert HFImageSource(relabelled).id != base
    # another release of datasets, which may decode the same bytes otherwise (turned by EXIF)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(datasets, "__version__", "2.14.0")
        assert HFImageSource(folder).id != base
    assert HFImageSource(folder).id == base
    # an image file rewritten in place, the table unchanged: its rows are another id
    path = first_path(folder)
    Image.open(path).transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(path, "JPEG")
    assert HFImageSource(folder).id != base


def test_a_rewritten_file_is_read_again_never_served_stale(folder, redis_url):
    folder.set_transform(pixels)
    warm = SenecaLoader(folder, batch_size=8, cache=redis_url, cache_size="20MB")
    list(warm)
    path = first_path(folder)
    Image.open(path).transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(path, "JPEG")
    again = SenecaLoader(folder, batch_size=8, cache=redis_url, cache_size="20MB")
    assert_equal_batches(list(again), list(DataLoader(folder, batch_size=8)))
    assert again.stats()["storage_reads"] == 48  # a new id: nothing of the old values
    warm.close()
    again.close()


def test_a_file_rewritten_between_epochs_is_never_served_from_the_old_values(folder, redis_url):
    """The loader made, then an image file rewritten in place: its next epoch is DataLoader's
    (the new file), that row read from storage and every other from the cache, nothing cached
    under the old id."""
    folder.set_transform(pixels)
    loader = warmed(folder, redis_url)
    path = first_path(folder)
    Image.open(path).transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(path, "JPEG")
    loader.reset_stats()
    assert_equal_batches(list(loader), list(DataLoader(folder, batch_size=8)))
    stats = loader.stats()
    assert stats["storage_reads"] == 1
    assert sum(stats[t]["admitted"] for t in ("encoded", "decoded")) == 0
    loader.close()


def test_files_made_again_with_their_old_times_put_back_are_never_served_the_old_values(
    folder, redis_url
):
    """The image files made again at their sizes, their old times put back (as ``rsync -a``
    leaves them), while a loader lives: its next epoch is DataLoader's (the new files), every
    row read from storage, nothing cached under the old id."""
    stored = folder.cast_column("image", datasets.Image(decode=False)).with_format(None)
    paths = [row["path"] for row in stored["image"]]
    folder.set_transform(pixels)
    loader = warmed(folder, redis_url)
    try:
        old = list(DataLoader(folder, batch_size=8))
        for path in paths:
            made_again_keeping_times(path)
        want = list(DataLoader(folder, batch_size=8))
        assert not torch.equal(old[0]["pixel_values"][0], want[0]["pixel_values"][0])
        loader.reset_stats()
        assert_equal_batches(list(loader), want)
        stats = loader.stats()
        assert stats["storage_reads"] == 48
        assert sum(stats[t]["admitted"] for t in ("encoded", "decoded")) == 0
    finally:
        loader.close()


def test_files_rewritten_while_an_epoch_runs_are_never_served_from_the_old_values(
    folder, redis_url
):
    """The images kept as files' paths, rewritten by another program after the epoch's first
    batch (each replaced at once): the rest of the epoch is DataLoader's (the new files), though
    the cache holds every row's old image, and nothing is cached under the old id."""
    stored = folder.cast_column("image", datasets.Image(decode=False)).with_format(None)
    paths = [row["path"] for row in stored["image"]]
    folder.set_transform(pixels)
    loader = warmed(folder, redis_url)
    try:
        loader.reset_stats()
        it = iter(loader)
        first = next(it)
        for path in paths:
            flipped = Image.open(path).transpose(Image.Transpose.FLIP_LEFT_RIGHT)
            flipped.save(path + ".new.jpg", "JPEG")
            os.replace(path + ".new.jpg", path)
        want = list(DataLoader(folder, batch_size=8))
        rest = list(it)
        assert_equal_batches(rest, want[1:])
        assert not all(
            torch.equal(a, b)
            for a, b in zip(first["pixel_values"], want[0]["pixel_values"], strict=True)
        )
        stats = loader.stats()
        assert stats["storage_reads"] == 48 - 8
        assert sum(stats[t]["admitted"] for t in ("encoded", "decoded")) == 0
        assert_equal_batches(list(loader), want)
    finally:
        loader.close()


def test_a_pillow_setting_changed_between_epochs_decodes_as_dataloader_decodes(
    redis_url, monkeypatch
):
    """A limit on an image's pixels set after the images were cached: the next epoch raises
    as DataLoader's does, never served the images decoded without the limit."""
    table = in_memory(8)
    table.set_transform(pixels)
    loader = warmed(table, redis_url)
    try:
        monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 500)  # 40 x 30 is past twice that
        with pytest.raises(Image.DecompressionBombError):
            list(DataLoader(table, batch_size=8))
        with pytest.raises(Image.DecompressionBombError):
            list(loader)
    finally:
        loader.close()


def test_a_format_set_between_epochs_is_read_as_dataloader_reads_it(folder, redis_url):
    folder.set_transform(pixels)
    loader = SenecaLoader(folder, batch_size=8, cache=redis_url, cache_size="20MB")
    list(loader)
    folder.set_format("torch", columns=["label"])  # a format the loader cannot make rows of
    with pytest.warns(UserWarning, match="'torch'"):
        got = list(loader)
    assert_equal_batches(got, list(DataLoader(folder, batch_size=8)))
    assert loader.store is None
    loader.close()


def test_other_formats_are_read_as_dataloader_reads_them(folder, redis_url):
    ds = folder.with_format("torch")
    with pytest.warns(UserWarning, match="format 'torch'"):
        loader = SenecaLoader(ds, batch_size=8, cache=redis_url, cache_size="20MB")
    assert "format 'torch'" in loader.not_cached
    assert_equal_batches(list(loader), list(DataLoader(ds, batch_size=8)))
    loader.close()


def padded(batch):
    """A set_transform that pads its batch's images to the largest of them, as an image
    processor that pads does: what a row is depends on the rows it is made with."""
    arrays = [
        torch.from_numpy(np.array(im.convert("RGB"))).permute(2, 0, 1) for im in batch["image"]
    ]
    height = max(a.shape[1] for a in arrays)
    width = max(a.shape[2] for a in arrays)
    out = []
    for a in arrays:
        canvas = torch.zeros(3, height, width, dtype=torch.uint8)
        canvas[:, : a.shape[1], : a.shape[2]] = a
        out.append(canvas)
    return {"pixel_values": out, "label": batch["label"]}


def of_sizes(n=24):
    """A table of images of several sizes."""
    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    images = [{"bytes": jpeg(i, (10 + i % 7, 12 + i % 5)), "path": None} for i in range(n)]
    return datasets.Dataset.from_dict({"image": images, "label": list(range(n))}, features=features)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("batch_size", [4, None])
def test_a_transform_runs_on_the_batch_as_datasets_runs_it(redis_url, workers, batch_size):
    ds = of_sizes()
    ds.set_transform(padded)
    want = list(DataLoader(ds, batch_size=batch_size, num_workers=workers))
    loader = SenecaLoader(ds, batch_size=batch_size, num_workers=workers, cache=redis_url)
    assert loader.not_cached is None
    for _ in range(2):
        assert_equal_batches(list(loader), want)
    loader.close()


def test_odss_batches_are_each_made_together(redis_url):
    ds = of_sizes()
    ds.set_transform(padded)
    sizes = {i: Image.open(io.BytesIO(jpeg(i, (10 + i % 7, 12 + i % 5)))).size for i in range(24)}
    loader = SenecaLoader(ds, batch_size=4, shuffle=True, cache=redis_url)
    assert loader.ods
    for _ in range(2):
        served = []
        for batch in loader:
            labels = batch["label"].tolist()
            served += labels
            width = max(sizes[i][0] for i in labels)
            height = max(sizes[i][1] for i in labels)
            assert batch["pixel_values"].shape[2:] == (height, width)
        assert sorted(served) == list(range(24))
    loader.close()


class Labelled(datasets.Dataset):
    """A table whose rows carry a label of its own making."""

    def __getitem__(self, key):
        row = super().__getitem__(key)
        return {**row, "label": 7} if isinstance(key, int) else row

    def __getitems__(self, keys):
        return [self[k] for k in keys]


def test_a_table_subclass_that_makes_rows_its_own_way_gets_its_own_rows(redis_url):
    rows = in_memory().to_dict()
    ds = Labelled.from_dict(rows, features=in_memory().features)
    assert type(ds) is Labelled
    with pytest.warns(UserWarning, match="overrides __getitem__"):
        loader = SenecaLoader(ds, batch_size=4, collate_fn=list, cache=redis_url)
    for _ in range(2):
        got = [row for batch in loader for row in batch]
        assert [r["label"] for r in got] == [7] * 24
    loader.close()


def test_a_column_transform_with_a_fixed_head_is_cached_cropped(folder, redis_url):
    folder.set_transform(ColumnTransform(v2.Compose([v2.Resize(20), CROP])))
    loader = SenecaLoader(folder, batch_size=8, num_workers=1, cache=redis_url, cache_size="20MB")
    assert loader.planner.setting.tiers == ("decoded", "encoded")  # no random head to cache
    want = list(DataLoader(folder, batch_size=8))
    assert set(want[0]) == {"label", "pixel_values"}
    for epoch in range(2):
        loader.reset_stats()
        assert_equal_batches(list(loader), want)
        if epoch:  # each cached value is the 16 x 16 crop, not the 64 x 48 image
            stats = loader.stats()
            assert stats["storage_reads"] == 0 and stats["decoded"]["hits"] == 48, stats
            assert stats["bytes_cache"] / 48 < 64 * 48 * 3 / 2, stats
    loader.close()


def test_a_column_transforms_random_head_is_shared_as_augmented_copies(folder, redis_url):
    augment = v2.Compose(
        [v2.RandomResizedCrop(16), v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True)]
    )
    folder.set_transform(ColumnTransform(augment))
    a, b = (
        SenecaLoader(
            folder,
            batch_size=8,
            shuffle=True,
            cache=redis_url,
            cache_size="20MB",
            split={"decoded": 0.5, "augmented": 0.5},
        )
        for _ in range(2)
    )
    labels = []
    for x, y in zip(a, b, strict=True):  # the two jobs' first epochs, side by side
        for batch in (x, y):
            assert set(batch) == {"label", "pixel_values"}
            assert batch["pixel_values"].dtype == torch.float32
        labels += [int(v) for v in y["label"]]
    assert sorted(labels) == sorted(folder.with_format(None)["label"])  # b's epoch: whole
    # the crops job a made and cached served job b (ODS gives a job only another's copies)
    assert a.stats()["augmented"]["admitted"] > 0
    assert b.stats()["augmented"]["hits"] > 0, b.stats()
    a.close()
    b.close()
