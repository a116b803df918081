"""What a script changes between runs or epochs: files made again at the same paths (resized,
encoded again, other images), a changed loader function, a transform set before an epoch. The
loader uses what DataLoader would, and never serves what was cached for something else."""

import contextlib
import functools
import io
import logging
import multiprocessing
import os
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.dataloader import same_as_dataloader
from helpers.rewrite import made_again_keeping_times
from helpers.waiting import wait_for
from PIL import Image
from torch.utils.data import ConcatDataset, DataLoader, Subset, get_worker_info
from torchvision import datasets
from torchvision.transforms import v2

from seneca import DatasetError, SenecaLoader
from seneca._bench.synthetic import make_dataset


def _shapes_and_reads(root, url):
    ds = datasets.ImageFolder(str(root), transform=v2.PILToTensor())
    loader = SenecaLoader(ds, batch_size=4, cache=url, split=(0.5, 0.5, 0.0))
    try:
        shapes = [{tuple(x.shape[1:]) for x, _ in loader} for _ in range(2)]
        return shapes, loader.stats()["storage_reads"]
    finally:
        loader.close()


def test_files_made_again_at_the_same_paths_are_read_again(tmp_path, redis_url):
    root = tmp_path / "data"
    make_dataset(root, 12, 2, size=(32, 24), progress=False, workers=1)
    shapes, reads = _shapes_and_reads(root, redis_url)
    assert shapes == [{(3, 24, 32)}] * 2 and reads == 12  # the second epoch from the cache
    make_dataset(root, 12, 2, size=(40, 30), progress=False, workers=1, force=True)
    shapes, reads = _shapes_and_reads(root, redis_url)
    assert shapes == [{(3, 30, 40)}] * 2 and reads == 12  # not the cached 32 x 24 images
    shapes, reads = _shapes_and_reads(root, redis_url)
    assert shapes == [{(3, 30, 40)}] * 2 and reads == 0  # the new files, cached


def _loader_dividing_by(k):
    def load(path):
        with Image.open(path) as im:
            return torch.from_numpy(np.asarray(im.convert("RGB")) // k)

    return load


def _maxima(root, url, k):
    ds = datasets.DatasetFolder(str(root), loader=_loader_dividing_by(k), extensions=(".jpg",))
    loader = SenecaLoader(ds, batch_size=4, cache=url, split=(0.0, 1.0, 0.0))
    try:
        return [max(int(x.max()) for x, _ in loader) for _ in range(2)]
    finally:
        loader.close()


def test_a_loader_function_changed_between_runs_makes_its_own_values(tmp_path, redis_url):
    root = tmp_path / "data"
    make_dataset(root, 8, 2, size=(16, 12), progress=False, workers=1)
    full = _maxima(root, redis_url, 1)
    assert full[0] == full[1] > 100  # the second epoch from the cache
    assert _maxima(root, redis_url, 64) == [full[0] // 64] * 2  # not the values cached by k=1


#: a setting of the script that its loader function reads (a sweep sets it per run)
DIVISOR = 1


def _load_divided(path):
    with Image.open(path) as im:
        return torch.from_numpy(np.asarray(im.convert("RGB")) // DIVISOR)


def test_a_sweep_over_a_setting_its_loader_function_reads_gets_each_setting_s_values(
    tmp_path, redis_url, monkeypatch
):
    root = tmp_path / "data"
    make_dataset(root, 8, 2, size=(16, 12), progress=False, workers=1)
    reads = []
    for divisor in (1, 64, 1):  # the last run's values from the cache
        monkeypatch.setattr(sys.modules[__name__], "DIVISOR", divisor)
        ds = datasets.DatasetFolder(str(root), loader=_load_divided, extensions=(".jpg",))
        reads.append(same_as_dataloader(ds, redis_url))
    assert reads == [8, 8, 0]


def test_a_sweep_over_a_steps_dtype_gets_each_dtypes_values(tmp_path, redis_url):
    """A fixed head whose ``ToDtype`` differs between runs (its repr shows no dtype)."""
    root = tmp_path / "data"
    make_dataset(root, 8, 2, size=(16, 12), progress=False, workers=1)
    reads = []
    for dtype in (torch.float32, torch.float16, torch.float32):  # the last from the cache
        step = v2.Compose([v2.PILToTensor(), v2.ToDtype(dtype), v2.Resize((8, 8))])
        ds = datasets.ImageFolder(str(root), transform=step)
        assert ds[0][0].dtype == dtype
        reads.append(same_as_dataloader(ds, redis_url))  # and DataLoader's dtype
    assert reads == [8, 8, 0]


class Stamped:
    """A loader function that pastes an image it holds (a watermark) on every file."""

    def __init__(self, stamp):
        self.stamp = stamp

    def __call__(self, path):
        image = Image.open(path).convert("RGB")
        image.paste(self.stamp)
        return image


def test_a_sweep_over_an_image_a_loader_function_holds_gets_each_images_values(tmp_path, redis_url):
    root = tmp_path / "data"
    make_dataset(root, 8, 2, size=(16, 12), progress=False, workers=1)
    reads = []
    for colour in ("red", "blue", "red"):  # the last run's values from the cache
        stamp = Stamped(Image.new("RGB", (4, 4), colour))
        ds = datasets.ImageFolder(str(root), transform=v2.PILToTensor(), loader=stamp)
        reads.append(same_as_dataloader(ds, redis_url))
    assert reads == [8, 8, 0]


class Levels:
    """A step that maps each grey level through a table it holds (a lookup table, a palette: a
    long list of tuples, whose 201st entry only the last level reads), of an image or of a
    file (as a loader function)."""

    def __init__(self, table):
        self.table = table

    def __call__(self, image):
        if isinstance(image, str):
            with Image.open(image) as im:
                return self(im)
        grey = np.asarray(image.convert("L"))
        lut = np.array([entry[0] for entry in self.table], dtype=np.uint8)
        return torch.from_numpy(lut[np.minimum(grey, 200)])


def _table(last):
    return [(level, level) for level in range(200)] + [(last, last)]


def test_a_sweep_over_an_entry_of_a_long_table_a_loader_function_holds_gets_its_values(
    tmp_path, redis_url
):
    """Two tables that differ only after their 64th entry make other values: the decoded tier
    serves each run its own."""
    root = tmp_path / "data"
    make_dataset(root, 8, 2, size=(16, 12), progress=False, workers=1)
    reads = []
    for last in (250, 7, 250):  # the last run's values from the cache
        ds = datasets.DatasetFolder(str(root), loader=Levels(_table(last)), extensions=(".jpg",))
        reads.append(same_as_dataloader(ds, redis_url))
    assert reads == [8, 8, 0]


def test_a_loader_function_that_cannot_be_named_is_read_as_dataloader_reads_it(tmp_path, redis_url):
    """A loader function holding more than can be named whole (5,000 arrays) is never taken
    for another one: the loader reads the dataset as DataLoader does, uncached, and says why."""
    root = tmp_path / "data"
    make_dataset(root, 8, 2, size=(16, 12), progress=False, workers=1)
    table = [np.full(2, level % 256, dtype=np.uint8) for level in range(5000)]
    ds = datasets.DatasetFolder(str(root), loader=Levels(table), extensions=(".jpg",))
    with pytest.warns(UserWarning, match="cannot be named"):
        same_as_dataloader(ds, redis_url)


def test_jobs_whose_transforms_hold_tables_that_differ_late_share_no_copies(tmp_path, redis_url):
    """The augmented tier: live jobs whose transforms hold tables that differ only after their
    64th entry are each served only what their own transform makes (the twin jobs of one
    table share their copies)."""
    root = tmp_path / "data"
    make_dataset(root, 8, 2, size=(16, 12), progress=False, workers=1)
    common = dict(batch_size=4, shuffle=True, cache=redis_url, split=(0, 0, 1), cache_size="20MB")
    made, loaders = {}, {}
    for job, last in (("a", 250), ("twin", 250), ("b", 7)):
        ds = datasets.ImageFolder(str(root), transform=Levels(_table(last)))
        made[job] = {bytes(ds[i][0].numpy()) for i in range(len(ds))}
        loaders[job] = SenecaLoader(ds, job=job, **common)
    try:
        for _ in range(3):
            got = {job: [] for job in loaders}
            for batches in zip(*loaders.values(), strict=True):  # all live, batch by batch
                for job, (x, _) in zip(loaders, batches, strict=True):
                    got[job] += [bytes(v.numpy()) for v in x]
            for job, values in got.items():
                assert len(values) == 8 and set(values) <= made[job]
        assert loaders["twin"].stats()["augmented"]["hits"] > 0
    finally:
        for loader in loaders.values():
            loader.close()


def _shapes_per_epoch(cls, ds, sizes, **kw):
    loader = cls(ds, batch_size=4, shuffle=True, **kw)
    out = []
    for size in sizes:
        ds.transform = v2.Compose([v2.RandomResizedCrop(size), v2.PILToTensor()])
        out.append({tuple(x.shape[-2:]) for x, _ in loader})
    return out


@pytest.mark.parametrize(
    ("workers", "persistent"), [(0, False), (2, False), (2, True)], ids=["0", "2", "2-persistent"]
)
def test_a_transform_set_between_epochs_is_used_where_dataloaders_would(
    tmp_path, redis_url, workers, persistent
):
    """Progressive resizing: the script sets the dataset's transform before each epoch.
    DataLoader uses it without workers and with workers that start each epoch; persistent
    workers keep their first one. SenecaLoader does the same."""
    root = tmp_path / "data"
    make_dataset(root, 12, 2, size=(48, 36), progress=False, workers=1)
    ds = datasets.ImageFolder(str(root))
    kw = dict(num_workers=workers, persistent_workers=persistent)
    theirs = _shapes_per_epoch(DataLoader, ds, (16, 24, 32), **kw)
    ours = _shapes_per_epoch(SenecaLoader, ds, (16, 24, 32), cache=redis_url, **kw)
    assert ours == theirs
    assert theirs == ([{(16, 16)}] * 3 if persistent else [{(16, 16)}, {(24, 24)}, {(32, 32)}])


def _shapes_as_sizes_change(cls, ds, sizes, **kw):
    """The shapes of an epoch per size, the transform's first step given it in place."""
    loader = cls(ds, batch_size=4, shuffle=True, **kw)
    out = []
    for size in sizes:
        ds.transform.transforms[0].size = [size, size]
        out.append({tuple(x.shape[-2:]) for x, _ in loader})
    return out


@pytest.mark.parametrize("first", [v2.Resize, v2.RandomResizedCrop], ids=["fixed", "random"])
@pytest.mark.parametrize(
    ("workers", "persistent"), [(0, False), (2, False), (2, True)], ids=["0", "2", "2-persistent"]
)
def test_a_transform_changed_in_place_between_epochs_is_used_where_dataloaders_would(
    tmp_path, redis_url, first, workers, persistent
):
    """Progressive resizing by setting a step's size in place (as FFCV's scripts set their
    decoder's): the cache names the transform again before each epoch, and never serves the
    crops or resized images of the old size."""
    root = tmp_path / "data"
    make_dataset(root, 12, 2, size=(48, 36), progress=False, workers=1)
    ds = datasets.ImageFolder(str(root), transform=v2.Compose([first(16), v2.PILToTensor()]))
    kw = dict(num_workers=workers, persistent_workers=persistent)
    sizes = (16, 16, 24, 24)
    theirs = _shapes_as_sizes_change(DataLoader, ds, sizes, **kw)
    ours = _shapes_as_sizes_change(SenecaLoader, ds, sizes, cache=redis_url, **kw)
    assert ours == theirs
    assert theirs == ([{(16, 16)}] * 4 if persistent else [{(16, 16)}] * 2 + [{(24, 24)}] * 2)


def _curriculum(cls, ds, change, **kw):
    """Two epochs' batches of a loop that changes the transform after each epoch's first batch
    (a curriculum at a step count): another size and normalisation, set anew or in place."""
    loader = cls(ds, batch_size=4, **kw)
    out = []
    for size in (16, 24):
        for i, batch in enumerate(loader):
            out.append(batch)
            if i == 0 and change == "set":
                ds.transform = _sized(size + 8, [size / 100] * 3)
            elif i == 0:
                ds.transform.transforms[0].size = [size + 8, size + 8]
                ds.transform.transforms[-1].mean = [size / 100] * 3
        ds.transform = _sized(size + 8, [0.5] * 3)  # the next epoch's start
    return out


def _sized(size, mean):
    return v2.Compose(
        [
            v2.Resize([size, size]),
            v2.PILToTensor(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(mean, [0.25] * 3),
        ]
    )


@pytest.mark.parametrize("shuffle", [False, True], ids=["in-order", "ods"])
@pytest.mark.parametrize("change", ["set", "in-place"])
def test_a_transform_changed_mid_epoch_without_workers_makes_the_next_batch(
    tmp_path, redis_url, change, shuffle
):
    """Without workers, DataLoader makes each batch with the dataset's transform of the moment,
    so a script that sets it or changes its steps within an epoch (a size, a normalisation)
    gets it from the next batch on. So does SenecaLoader, the steps it runs on whole batches
    included: never the values the epoch started with."""
    root = tmp_path / "data"
    make_dataset(root, 12, 2, size=(48, 36), progress=False, workers=1)
    ds = datasets.ImageFolder(str(root), transform=_sized(16, [0.5] * 3))
    theirs = _curriculum(DataLoader, ds, change, shuffle=shuffle)
    ds.transform = _sized(16, [0.5] * 3)
    ours = _curriculum(SenecaLoader, ds, change, shuffle=shuffle, cache=redis_url)
    settings = [(16, 0.5), (24, 0.16), (24, 0.16), (24, 0.5), (32, 0.24), (32, 0.24)]
    assert [x.shape[-1] for x, _ in theirs] == [size for size, _ in settings]
    made = {}  # each setting's images, as DataLoader makes them
    for size, mean in set(settings):
        ds.transform = _sized(size, [mean] * 3)
        made[size, mean] = {x.numpy().tobytes() for x, _ in ds}
    for (x, _), setting in zip(ours, settings, strict=True):
        assert {image.numpy().tobytes() for image in x} <= made[setting]
    for epoch in (ours[:3], ours[3:]):  # (with ODS another order) each sample once an epoch
        assert sorted(torch.cat([y for _, y in epoch]).tolist()) == [0] * 6 + [1] * 6
    if not shuffle:
        for (gx, gy), (wx, wy) in zip(ours, theirs, strict=True):
            assert torch.equal(gx, wx) and torch.equal(gy, wy)


def _cropped_to(root, size):
    return datasets.ImageFolder(
        str(root), transform=v2.Compose([v2.RandomResizedCrop(size), v2.PILToTensor()])
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_progressive_resizing_reads_the_decoded_images_and_leaves_the_old_crops_alone(
    tmp_path, redis_url, workers
):
    """A job whose random crop grows keeps reading its decoded images from the cache and makes
    its crops anew; it takes none of the old crops and offers none under their name, which
    another job still training with the old crop reads."""
    root = tmp_path / "data"
    make_dataset(root, 16, 2, size=(48, 36), progress=False, workers=1)
    mine, other = _cropped_to(root, 16), _cropped_to(root, 16)
    common = dict(batch_size=4, shuffle=True, cache=redis_url, split=(0.0, 0.5, 0.5))
    a, b = SenecaLoader(mine, num_workers=workers, **common), SenecaLoader(other, **common)
    try:
        for _ in range(2):  # two live jobs (b's first, before a's workers start): their
            for _ in zip(b, a, strict=True):  # crops are cached
                pass
        before = a.stats()
        assert before["augmented"]["admitted"] > 0
        mine.transform.transforms[0].size = [24, 24]
        for _ in range(2):
            for (x, _), (y, _) in zip(a, b, strict=True):
                assert x.shape[-2:] == (24, 24) and y.shape[-2:] == (16, 16)
        after = a.stats()
        for figure in ("hits", "admitted"):  # none of the old crops taken, none offered
            assert after["augmented"][figure] == before["augmented"][figure]
        assert after["decoded"]["hits"] > before["decoded"]["hits"]  # still from the cache
        assert after["storage_reads"] - before["storage_reads"] < 32
    finally:
        a.close()
        b.close()


def _resize_to_ten(worker_id):
    get_worker_info().dataset.transform.transforms[0].size = [10, 10]


def test_a_transform_a_worker_init_fn_changes_in_place_is_never_served_old_values(
    tmp_path, redis_url
):
    root = tmp_path / "data"
    make_dataset(root, 12, 2, size=(48, 36), progress=False, workers=1)
    ds = datasets.ImageFolder(str(root), transform=v2.Compose([v2.Resize(20), v2.PILToTensor()]))
    warm = SenecaLoader(ds, batch_size=4, cache=redis_url, split=(0.0, 1.0, 0.0))
    try:
        assert {tuple(x.shape[-2:]) for x, _ in warm} == {(20, 26)}  # resized to 20, cached
        changed = SenecaLoader(
            ds, batch_size=4, num_workers=1, worker_init_fn=_resize_to_ten, cache=redis_url
        )
        plain = DataLoader(ds, batch_size=4, num_workers=1, worker_init_fn=_resize_to_ten)
        theirs = torch.cat([x for x, _ in plain])
        for _ in range(2):
            assert torch.equal(torch.cat([x for x, _ in changed]), theirs)
        assert changed.stats()["storage_reads"] == 24  # read around the 20-pixel images
        changed.close()
    finally:
        warm.close()


def _normalized(mean):
    return v2.Compose(
        [
            v2.Resize(16),
            v2.CenterCrop(16),
            v2.PILToTensor(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize([mean] * 3, [0.25] * 3),
        ]
    )


def _normalized_loader(tmp_path, redis_url):
    """A dataset of 8 images normalized with mean 0, and a loader that runs the batch tail."""
    root = tmp_path / "data"
    make_dataset(root, 8, 2, size=(24, 18), progress=False, workers=1)
    ds = datasets.ImageFolder(str(root), transform=_normalized(0.0))
    return ds, SenecaLoader(ds, batch_size=4, cache=redis_url)


def _epoch_as_dataloader_s(loader, ds):
    ours = torch.cat([x for x, _ in loader])
    theirs = torch.cat([x for x, _ in DataLoader(ds, batch_size=4)])
    return ours.dtype == theirs.dtype and torch.equal(ours, theirs)


def test_the_batch_tail_follows_a_transform_set_between_epochs(tmp_path, redis_url):
    ds, loader = _normalized_loader(tmp_path, redis_url)
    try:
        for mean in (0.0, 0.5, 0.5):  # the last epoch's images from the cache
            ds.transform = _normalized(mean)
            assert _epoch_as_dataloader_s(loader, ds), mean
        assert loader.stats()["storage_reads"] == 8  # the head did not change: still cached
        for transform in (_plain_crop(), _normalized(0.25), _plain_crop()):  # dropped, added
            ds.transform = transform
            assert _epoch_as_dataloader_s(loader, ds)
    finally:
        loader.close()


def _plain_crop():
    return v2.Compose([v2.Resize(16), v2.CenterCrop(16), v2.PILToTensor()])


@pytest.mark.parametrize("workers", [0, 2])
def test_a_loader_made_without_a_batch_tail_runs_one_its_transform_gains(
    tmp_path, redis_url, workers
):
    """A transform that ends in ToDtype/Normalize only from the second epoch on (the script
    sets it then) is DataLoader's from then on: the loader runs them on whole batches, and
    drops them again with the transform."""
    root = tmp_path / "data"
    make_dataset(root, 8, 2, size=(32, 24), progress=False, workers=1)
    ds = datasets.ImageFolder(str(root), transform=_plain_crop())
    loader = SenecaLoader(ds, batch_size=4, num_workers=workers, cache=redis_url)
    try:
        for transform in (_plain_crop(), _normalized(0.5), _normalized(0.0), _plain_crop()):
            ds.transform = transform
            assert _epoch_as_dataloader_s(loader, ds)
    finally:
        loader.close()


def test_the_batch_tail_follows_its_steps_changed_in_place(tmp_path, redis_url):
    ds, loader = _normalized_loader(tmp_path, redis_url)
    try:
        for mean in (0.0, 0.5, 0.25):
            ds.transform.transforms[-1].mean = [mean] * 3
            assert _epoch_as_dataloader_s(loader, ds), mean
        assert loader.stats()["storage_reads"] == 8  # the head did not change: still cached
    finally:
        loader.close()


def _numbered(root, transform):
    """ImageFolder at ``root``, each sample's target its index."""
    ds = datasets.ImageFolder(str(root), transform=transform)
    ds.samples = ds.imgs = [(path, i) for i, (path, _) in enumerate(ds.samples)]
    ds.targets = list(range(len(ds.samples)))
    return ds


def _epochs(loader, n):
    """The images of ``n`` epochs of ``loader``, each epoch's sorted by target."""
    out = []
    for _ in range(n):
        batches = [(x, y) for x, y in loader]
        xs, ys = torch.cat([x for x, _ in batches]), torch.cat([y for _, y in batches])
        out.append(xs[ys.argsort(stable=True)])
    return out


@pytest.mark.parametrize(
    ("workers", "persistent", "ods"),
    [(0, False, True), (0, False, False), (2, False, True), (2, True, True)],
    ids=["0", "0-own-order", "2", "2-persistent"],
)
def test_files_made_again_while_a_loader_lives_are_read_never_served_stale(
    tmp_path, redis_url, workers, persistent, ods
):
    """A script that makes its files again at the same paths between epochs, one loader over
    them: the epochs after are DataLoader's (the new files), read from storage, and nothing of
    them is cached under the old files' name (another job over the old files may share it)."""
    root = tmp_path / "data"
    make_dataset(root, 12, 2, size=(32, 24), progress=False, workers=1)
    ds = _numbered(root, v2.Compose([v2.Resize(16), v2.PILToTensor()]))
    loader = SenecaLoader(
        ds, batch_size=4, shuffle=ods, cache=redis_url, split=(0.5, 0.5, 0.0),
        num_workers=workers, persistent_workers=persistent,
    )  # fmt: skip
    try:
        _epochs(loader, 2)
        assert loader.stats()["storage_reads"] == 12  # the second epoch from the cache
        make_dataset(root, 12, 2, size=(40, 30), seed=7, progress=False, workers=1, force=True)
        loader.reset_stats()
        ours = _epochs(loader, 2)
        theirs = _epochs(DataLoader(ds, batch_size=4), 1)[0]
        assert all(torch.equal(x, theirs) for x in ours)
        stats = loader.stats()
        assert stats["storage_reads"] == 24
        assert sum(stats[t]["admitted"] for t in ("encoded", "decoded")) == 0
    finally:
        loader.close()


@pytest.mark.parametrize("every", [1, 4], ids=["all", "a-quarter"])
@pytest.mark.parametrize("workers", [0, 2])
def test_files_made_again_with_their_old_times_put_back_are_read_never_served_stale(
    tmp_path, redis_url, workers, every, caplog
):
    """Another program makes files again at the same paths and sizes, and puts their old times
    back (as ``rsync -a``, ``cp -p`` and ``tar`` do), while a loader lives: all of them, or a
    quarter (some images fixed). Every later epoch is DataLoader's; those files are read from
    storage each epoch, never from the cache nor cached under the old files' name, and every
    other sample is still read from the cache. The old files' entries are dropped, so a loader
    made later (the files look to it as the old ones did) caches the new files."""
    root = tmp_path / "data"
    make_dataset(root, 24, 2, size=(32, 24), progress=False, workers=1)
    ds = _numbered(root, v2.PILToTensor())
    loader = SenecaLoader(
        ds, batch_size=4, shuffle=True, cache=redis_url, split=(0.5, 0.5, 0.0),
        num_workers=workers,
    )  # fmt: skip
    try:
        old = _epochs(loader, 2)[1]
        assert loader.stats()["storage_reads"] == 24  # the second epoch from the cache
        made = range(0, 24, every)
        for i in made:
            made_again_keeping_times(ds.samples[i][0])
        new = _epochs(DataLoader(ds, batch_size=4), 1)[0]
        assert not any(torch.equal(new[i], old[i]) for i in made)
        loader.reset_stats()
        with caplog.at_level(logging.WARNING, logger="seneca"):
            assert all(torch.equal(x, new) for x in _epochs(loader, 2))
        stats = loader.stats()
        assert stats["storage_reads"] == 2 * len(made)
        assert sum(stats[t]["admitted"] for t in ("encoded", "decoded")) == 0
        if not workers:  # (a worker's warning is logged in the worker)
            said = [r.getMessage() for r in caplog.records if "made again" in r.getMessage()]
            assert len(said) == 1 and "the first seen" in said[0], said
        state = loader.store.state()
        assert sum(state[t]["entries"] for t in ("encoded", "decoded")) == 24 - len(made)
        later = SenecaLoader(ds, batch_size=4, shuffle=True, cache=redis_url)
        try:
            assert all(torch.equal(x, new) for x in _epochs(later, 2))
            assert later.stats()["storage_reads"] == len(made)  # cached by this loader
        finally:
            later.close()
    finally:
        loader.close()


def _held(folder, worker_id):
    """A worker_init_fn: while ``folder`` holds ``hold``, say this worker started (``ready-N``)
    and wait for ``go`` before making any batch."""
    if (folder / "hold").exists():
        (folder / f"ready-{worker_id}").touch()
        wait_for(lambda: (folder / "go").exists(), "the files made again")


@contextlib.contextmanager
def _made_again_once_held(folder, workers, make_again):
    """Within: the ``workers`` of a loader whose worker_init_fn is :func:`_held` wait, once
    started, until ``make_again`` has run (in a thread)."""

    def once_started():
        ready = [folder / f"ready-{k}" for k in range(workers)]
        wait_for(lambda: all(f.exists() for f in ready), "the workers started")
        make_again()
        (folder / "go").touch()

    (folder / "hold").touch()
    thread = threading.Thread(target=once_started)
    thread.start()
    try:
        yield
    finally:
        thread.join()
        (folder / "hold").unlink()


def _make_again_at(root, tmp_path, paths):
    """The files ``paths`` under ``root`` made again (other images of their size), each
    replaced at once as a reader sees it."""
    other = tmp_path / "other"
    make_dataset(other, len(paths), 2, size=(32, 24), seed=7, progress=False, workers=1)
    for path in paths:
        os.replace(other / Path(path).relative_to(root), path)


@pytest.mark.parametrize(
    ("workers", "ods", "context"),
    [
        (0, True, None),
        (0, False, None),
        (2, True, None),
        pytest.param(2, True, "spawn", marks=pytest.mark.slow),
    ],
    ids=["0", "0-own-order", "2", "2-spawn"],
)
def test_files_made_again_while_an_epoch_runs_are_never_served_stale(
    tmp_path, redis_url, workers, ods, context
):
    """A script whose files are made again at the same paths while an epoch runs (by another
    program), after the loader looked at them when the epoch started: every batch made after
    that is DataLoader's (the new files), though the cache holds every sample's old values,
    and nothing of the new files is cached under the old files' name. (Without workers the
    files are made again after the epoch's first batch; with workers, once the workers have
    started and before they make a batch.)"""
    root, folder = tmp_path / "data", tmp_path / "held"
    folder.mkdir()
    make_dataset(root, 24, 2, size=(32, 24), progress=False, workers=1)
    ds = _numbered(root, v2.Compose([v2.Resize(16), v2.PILToTensor()]))
    loader = SenecaLoader(
        ds, batch_size=2, shuffle=ods, cache=redis_url, split=(0.5, 0.5, 0.0),
        num_workers=workers, multiprocessing_context=context,
        worker_init_fn=functools.partial(_held, folder) if workers else None,
    )  # fmt: skip
    paths = [path for path, _ in ds.samples]
    try:
        _epochs(loader, 2)
        assert loader.stats()["storage_reads"] == 24  # the second epoch from the cache
        loader.reset_stats()
        if workers:
            with _made_again_once_held(
                folder, workers, lambda: _make_again_at(root, tmp_path, paths)
            ):
                batches = list(loader)
        else:
            it = iter(loader)
            next(it)
            _make_again_at(root, tmp_path, paths)
            batches = list(it)
        new = _epochs(DataLoader(ds, batch_size=24), 1)[0]
        for x, y in batches:
            for image, i in zip(x, y, strict=True):
                assert torch.equal(image, new[i]), int(i)
        stats = loader.stats()
        assert stats["storage_reads"] >= 2 * len(batches)
        assert sum(stats[t]["admitted"] for t in ("encoded", "decoded")) == 0
        assert all(torch.equal(x, new) for x in _epochs(loader, 1))
    finally:
        loader.close()


def _solid(root, color, n=16):
    """``n`` images of one ``color`` in two class folders under ``root``, each written to a
    file beside its path and put in place at once, as a reader sees it."""
    for k in range(n):
        path = root / f"c{k % 2}" / f"{k:03}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (24, 20), color).save(path.with_suffix(".tmp.png"))
        os.replace(path.with_suffix(".tmp.png"), path)


@pytest.mark.parametrize("workers", [0, 2])
def test_crops_of_files_made_again_while_an_epoch_runs_are_never_served(
    tmp_path, redis_url, workers
):
    """Two jobs share crops of the same files (the augmented tier); another program makes the
    files again while their epoch runs: every sample made after that is a crop of a new file,
    though the cache holds crops of every old one. (Without workers the files are made again
    after each job's first batch; with workers, once the first job's have started and before
    they make a batch: their crops are read into the batch's shared memory.)"""
    root, folder = tmp_path / "data", tmp_path / "held"
    folder.mkdir()
    _solid(root, (0, 0, 255))
    transform = v2.Compose([v2.RandomResizedCrop(8), v2.PILToTensor()])
    common = dict(batch_size=4, shuffle=True, cache=redis_url, split=(0, 0, 1), cache_size="20MB")
    a = SenecaLoader(
        datasets.ImageFolder(str(root), transform), num_workers=workers,
        worker_init_fn=functools.partial(_held, folder) if workers else None, **common,
    )  # fmt: skip
    b = SenecaLoader(datasets.ImageFolder(str(root), transform), **common)
    try:
        for _ in zip(a, b, strict=True):
            pass
        assert a.store.state()["augmented"]["entries"] > 0  # crops of the old files
        if workers:
            with _made_again_once_held(folder, workers, lambda: _solid(root, (255, 0, 0))):
                batches = [x for pair in zip(a, b, strict=True) for x, _ in pair]
        else:
            its = [iter(a), iter(b)]
            for it in its:
                next(it)
            _solid(root, (255, 0, 0))
            batches = [x for pair in zip(*its, strict=True) for x, _ in pair]
        for x in batches:
            assert (x[:, 0] == 255).all() and (x[:, 2] == 0).all()  # red: the new files
        for job in (a, b):
            assert all((x[:, 0] == 255).all() for x, _ in job)
    finally:
        a.close()
        b.close()


def _eight(tmp_path):
    """Eight small images, each sample's target its index."""
    make_dataset(tmp_path / "data", 8, 2, size=(16, 12), progress=False, workers=1)
    return _numbered(tmp_path / "data", v2.PILToTensor())


def test_a_file_gone_between_epochs_raises_what_dataloader_raises(tmp_path, redis_url):
    ds = _eight(tmp_path)
    loader = SenecaLoader(ds, batch_size=4, shuffle=True, cache=redis_url)
    try:
        _epochs(loader, 2)
        assert loader.stats()["storage_reads"] == 8  # all of them cached
        gone = ds.samples[3][0]
        Path(gone).unlink()
        with pytest.raises(FileNotFoundError):
            list(DataLoader(ds, batch_size=4))
        with pytest.raises(FileNotFoundError, match=Path(gone).name):
            _epochs(loader, 1)
    finally:
        loader.close()


def test_a_file_touched_under_a_dataset_version_is_still_read_from_the_cache(tmp_path, redis_url):
    """A ``dataset_version`` vouches for the files: their times are not looked at."""
    ds = _eight(tmp_path)
    loader = SenecaLoader(ds, batch_size=4, cache=redis_url, dataset_version="v1")
    try:
        first = _epochs(loader, 1)[0]
        os.utime(ds.samples[0][0], ns=(1, 1))
        assert torch.equal(_epochs(loader, 1)[0], first)
        assert loader.stats()["storage_reads"] == 8  # the second epoch from the cache
    finally:
        loader.close()


class _Numbered(torch.utils.data.Dataset):
    """A CacheableDataset whose samples (and id) the script may change: ``k`` + index, decoded
    times ``scale`` (a setting of its decode, not of its samples)."""

    def __init__(self, k, scale=1):
        self.k, self.scale, self.transform, self.target_transform = k, scale, None, None

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.tensor([(self.k + i) * self.scale]), i

    def seneca_id(self):
        return f"numbered-{self.k}"

    def seneca_read(self, i):
        return bytes([self.k + i])

    def seneca_decode(self, data, i):
        return torch.tensor([data[0] * self.scale])

    def seneca_target(self, i):
        return i


def test_a_cacheable_dataset_whose_id_changed_is_read_from_storage(redis_url):
    ds = _Numbered(0)
    loader = SenecaLoader(ds, batch_size=4, shuffle=True, cache=redis_url)
    try:
        assert [x.flatten().tolist() for x in _epochs(loader, 2)] == [list(range(8))] * 2
        ds.k = 100  # other samples, under another id
        assert _epochs(loader, 1)[0].flatten().tolist() == list(range(100, 108))
        assert loader.stats()["storage_reads"] == 8 + 8
    finally:
        loader.close()


def test_a_cacheable_datasets_decoded_values_are_named_by_its_decode(redis_url, caplog):
    """``seneca_decode`` makes the decoded values, so they are named by it, as a folder
    dataset's are by its loader function: one that decodes otherwise under the same
    ``seneca_id()`` (a setting it reads changed, between runs or between epochs) never reads
    the values the other cached."""
    want = [[(k + i) * s for i in range(8)] for k, s in ((0, 1), (0, 3), (0, 2))]
    for scale, expected in ((1, want[0]), (3, want[1])):  # two runs, the same id
        loader = SenecaLoader(_Numbered(0, scale), batch_size=4, split=(0, 1, 0), cache=redis_url)
        try:
            assert [x.flatten().tolist() for x in _epochs(loader, 2)] == [expected] * 2
            assert loader.stats()["decoded"]["hits"] == 8  # the second epoch from the cache
        finally:
            loader.close()
    ds = _Numbered(0, 3)
    loader = SenecaLoader(ds, batch_size=4, split=(0, 1, 0), cache=redis_url)
    try:
        assert _epochs(loader, 1)[0].flatten().tolist() == want[1]
        ds.scale = 2  # set in place between epochs: read from storage from then on
        with caplog.at_level(logging.WARNING, logger="seneca"):
            assert [x.flatten().tolist() for x in _epochs(loader, 2)] == [want[2]] * 2
        assert any("seneca_decode changed" in m for m in caplog.messages)
        assert loader.stats()["storage_reads"] == 16
    finally:
        loader.close()


def test_a_truncated_file_decoded_under_pillows_setting_is_not_served_without_it(
    tmp_path, redis_url, monkeypatch
):
    """``ImageFile.LOAD_TRUNCATED_IMAGES`` decides whether a truncated file decodes (its
    missing rows grey) or raises: a job without it raises as DataLoader does, never served
    the image a job with it cached, in another run or after the setting changed."""
    from PIL import ImageFile

    root = tmp_path / "data"
    make_dataset(root, 6, 2, size=(64, 48), progress=False, workers=1)
    cut = sorted(root.rglob("*.jpg"))[0]
    cut.write_bytes(cut.read_bytes()[:-600])
    ds = datasets.ImageFolder(str(root), transform=v2.PILToTensor())

    def loader():
        return SenecaLoader(ds, batch_size=6, cache=redis_url, split=(0.0, 1.0, 0.0))

    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    first = loader()
    assert [len(y) for _ in range(2) for _, y in first] == [6, 6]
    assert first.stats()["decoded"]["hits"] == 6  # the second epoch from the cache
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", False)

    with pytest.raises(OSError, match="truncated"):
        next(iter(DataLoader(ds, batch_size=6)))
    with pytest.warns(UserWarning, match="decode changed"), pytest.raises(OSError, match="trunc"):
        next(iter(first))  # the setting changed under the loader
    first.close()
    second = loader()
    try:
        with pytest.raises(OSError, match="truncated"):
            next(iter(second))
    finally:
        second.close()


def _open_square(fp, filename=None):
    """A Pillow plugin's opener of its format: "SQR1", then a PPM image (opened as one)."""
    from PIL import PpmImagePlugin

    return PpmImagePlugin.PpmImageFile(io.BytesIO(fp.read()[4:]))


def test_files_a_plugin_decoded_are_not_served_to_a_job_without_it(
    tmp_path, redis_url, monkeypatch
):
    """Files of a format a Pillow plugin registers (HEIF with ``pillow_heif``): a job without
    the plugin raises as DataLoader does, never served the images a job with it cached."""
    from PIL import UnidentifiedImageError

    for i in range(4):
        folder = tmp_path / "data" / f"c{i % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        pixels = bytes(range(i, i + 48)) * 4
        (folder / f"{i}.sqr").write_bytes(b"SQR1P6\n8 8\n255\n" + pixels)
    ds = datasets.ImageFolder(
        str(tmp_path / "data"), transform=v2.PILToTensor(), is_valid_file=lambda p: True
    )

    def loader():
        return SenecaLoader(ds, batch_size=4, cache=redis_url, split=(0.0, 1.0, 0.0))

    monkeypatch.setattr(Image, "ID", list(Image.ID))
    monkeypatch.setattr(Image, "OPEN", dict(Image.OPEN))
    Image.register_open("SQR", _open_square, lambda prefix: prefix[:4] == b"SQR1")
    first = loader()
    try:
        assert [len(y) for _ in range(2) for _, y in first] == [4, 4]
        assert first.stats()["decoded"]["hits"] == 4  # the second epoch from the cache
    finally:
        first.close()
    monkeypatch.undo()
    with pytest.raises(UnidentifiedImageError):
        next(iter(DataLoader(ds, batch_size=4)))
    second = loader()
    try:
        with pytest.raises(UnidentifiedImageError):
            next(iter(second))
    finally:
        second.close()


def _decode_truncated_files(worker_id):
    from PIL import ImageFile

    ImageFile.LOAD_TRUNCATED_IMAGES = True


def test_a_file_decoded_under_a_setting_a_worker_init_fn_set_is_not_served_without_it(
    tmp_path, redis_url
):
    """A ``worker_init_fn`` that sets a Pillow setting in the workers only: their values are
    not named by the loader process's settings, so a job without the setting raises as
    DataLoader does, never served the image the workers decoded and cached."""
    root = tmp_path / "data"
    make_dataset(root, 6, 2, size=(64, 48), progress=False, workers=1)
    cut = sorted(root.rglob("*.jpg"))[0]
    cut.write_bytes(cut.read_bytes()[:-600])
    ds = datasets.ImageFolder(str(root), transform=v2.PILToTensor())
    kw = dict(batch_size=6, num_workers=1, worker_init_fn=_decode_truncated_files)
    assert [len(y) for _, y in DataLoader(ds, **kw)] == [6]  # its workers decode the file
    first = SenecaLoader(ds, cache=redis_url, split=(0.0, 1.0, 0.0), **kw)
    try:
        assert [len(y) for _ in range(2) for _, y in first] == [6, 6]
        assert first.stats()["storage_reads"] == 12  # read around the cache, none cached
    finally:
        first.close()
    with pytest.raises(OSError, match="truncated"):
        next(iter(DataLoader(ds, batch_size=6)))
    second = SenecaLoader(ds, batch_size=6, cache=redis_url, split=(0.0, 1.0, 0.0))
    try:
        with pytest.raises(OSError, match="truncated"):
            next(iter(second))
    finally:
        second.close()


def _targets_per_epoch(cls, ds, labels, **kw):
    """The targets of an epoch per labelling in ``labels`` (each a function of the index),
    set on ``ds`` before the epoch as a pseudo-labelling script sets them."""
    loader = cls(ds, batch_size=4, shuffle=True, **kw)
    out = []
    for label in labels:
        ds.samples = ds.imgs = [(path, label(i)) for i, (path, _) in enumerate(ds.samples)]
        ds.targets = [y for _, y in ds.samples]
        out.append(sorted(int(y) for _, ys in loader for y in ys))
    return out, loader


@pytest.mark.parametrize(
    ("workers", "persistent"), [(0, False), (2, False), (2, True)], ids=["0", "2", "2-persistent"]
)
def test_labels_set_between_epochs_are_used_where_dataloaders_would(
    tmp_path, redis_url, workers, persistent
):
    """Pseudo-labelling: the script sets the samples' labels before each epoch. DataLoader
    uses them without workers and with workers that start each epoch; persistent workers keep
    their first ones. SenecaLoader does the same, its images still read from the cache."""
    root = tmp_path / "data"
    make_dataset(root, 12, 2, size=(16, 12), progress=False, workers=1)
    ds = datasets.ImageFolder(str(root), transform=v2.PILToTensor())
    labels = (lambda i: i, lambda i: 100 + i, lambda i: 200 + i % 3)
    kw = dict(num_workers=workers, persistent_workers=persistent)
    theirs, _ = _targets_per_epoch(DataLoader, ds, labels, **kw)
    ours, loader = _targets_per_epoch(SenecaLoader, ds, labels, cache=redis_url, **kw)
    try:
        assert ours == theirs
        followed = [sorted(label(i) for i in range(12)) for label in labels]
        assert theirs == ([followed[0]] * 3 if persistent else followed)
        assert loader.stats()["storage_reads"] == 12  # the images: from the cache after the first
        assert loader.store is not None
    finally:
        loader.close()


def _relabelled_after_the_first_batch(cls, ds, change, **kw):
    """Two epochs' targets, batch by batch, without workers; after the first batch the script
    gives every sample a new label (``set``: a new list of samples; ``in-place``: each entry
    of the dataset's list replaced)."""
    loader = cls(ds, batch_size=4, **kw)
    out = []
    for _ in range(2):
        for _, y in loader:
            out.append([int(t) for t in y])
            if len(out) == 1:
                relabelled = [(path, 10 + label) for path, label in ds.samples]
                if change == "set":
                    ds.samples = relabelled
                else:
                    for i, sample in enumerate(relabelled):
                        ds.samples[i] = sample
    return out, loader


@pytest.mark.parametrize("shuffle", [False, True], ids=["in-order", "ods"])
@pytest.mark.parametrize("change", ["set", "in-place"])
def test_labels_set_mid_epoch_without_workers_are_used_from_the_next_batch(
    tmp_path, redis_url, change, shuffle
):
    """Without workers, DataLoader reads a sample's label from the dataset's samples at every
    fetch, so labels a script sets within an epoch are used from the next batch on. So does
    SenecaLoader, its images still read from the cache."""
    root = tmp_path / "data"
    make_dataset(root, 12, 2, size=(16, 12), progress=False, workers=1)
    ds = datasets.ImageFolder(str(root), transform=v2.PILToTensor())
    first = list(ds.samples)
    theirs, _ = _relabelled_after_the_first_batch(DataLoader, ds, change, shuffle=shuffle)
    ds.samples = first
    ours, loader = _relabelled_after_the_first_batch(
        SenecaLoader, ds, change, shuffle=shuffle, cache=redis_url
    )
    try:
        assert all(y < 10 for y in ours[0]) and all(y >= 10 for b in ours[1:] for y in b)
        for epoch in (ours[:3], ours[3:]):  # each sample once an epoch
            assert sorted(y % 10 for b in epoch for y in b) == [0] * 6 + [1] * 6
        if not shuffle:
            assert ours == theirs
        assert loader.stats()["storage_reads"] == 12  # the second epoch's images: cached
    finally:
        loader.close()


@pytest.mark.parametrize("shuffle", [False, True], ids=["in-order", "ods"])
def test_a_concatenations_labels_set_mid_epoch_without_workers_are_used_from_the_next_batch(
    tmp_path, redis_url, shuffle
):
    """A ConcatDataset reads each sample's label from its part's samples at every fetch: a
    part relabelled within an epoch gives its new labels from the next batch on, with
    DataLoader and with SenecaLoader."""
    make_dataset(tmp_path / "a", 8, 2, size=(16, 12), progress=False, workers=1)
    make_dataset(tmp_path / "b", 8, 2, size=(16, 12), progress=False, workers=1)
    a = datasets.ImageFolder(str(tmp_path / "a"), transform=v2.PILToTensor())
    b = datasets.ImageFolder(str(tmp_path / "b"), transform=v2.PILToTensor())
    first = [(path, 2 + label) for path, label in b.samples]  # b's labels: 2 and 3
    both = ConcatDataset([Subset(a, range(2, 6)), ConcatDataset([b])])

    def batches(cls, **kw):
        b.samples = first
        loader = cls(both, batch_size=4, shuffle=shuffle, **kw)
        out = []
        for _ in range(2):
            for _, y in loader:
                out.append([int(t) for t in y])
                if len(out) == 1:  # b relabelled: 12 and 13
                    b.samples = [(path, 10 + label) for path, label in first]
        return out, loader

    theirs, _ = batches(DataLoader)
    ours, loader = batches(SenecaLoader, cache=redis_url)
    try:
        assert not any(y in (2, 3) for batch in ours[1:] for y in batch)
        for epoch in (ours[:3], ours[3:]):  # each sample once an epoch
            assert (
                sorted(y % 10 for batch in epoch for y in batch)
                == [0] * 2 + [1] * 2 + [2] * 4 + [3] * 4
            )
        assert sorted(y for batch in ours[3:] for y in batch) == [0, 0, 1, 1] + [12] * 4 + [13] * 4
        if not shuffle:
            assert ours == theirs
        assert loader.stats()["storage_reads"] == 12  # the second epoch's images: cached
    finally:
        loader.close()


def _two_folders(tmp_path):
    """A ConcatDataset of two folder datasets (8 samples each) made with one transform."""
    parts = []
    for name in ("a", "b"):
        make_dataset(tmp_path / name, 8, 2, size=(16, 12), progress=False, workers=1)
        parts.append(datasets.ImageFolder(str(tmp_path / name), transform=v2.PILToTensor()))
    return ConcatDataset([parts[0], ConcatDataset([parts[1]])])


_SMALL = v2.Compose([v2.PILToTensor(), v2.Resize((6, 8))])
#: a transform that makes other images of the same size
_FLIPPED = v2.Compose([v2.PILToTensor(), v2.RandomVerticalFlip(p=1.0)])


def _pairs(loader):
    """An epoch's (image, label) pairs, in an order that does not depend on the loader's."""
    return sorted(
        (x.numpy().tobytes(), int(y)) for xs, ys in loader for x, y in zip(xs, ys, strict=True)
    )


def _read_as_dataloader_reads(loader, ds, why):
    """The loader's next epoch is ``ds`` read as DataLoader reads it, uncached, with one
    warning that says ``why``."""
    with pytest.warns(UserWarning, match=why):
        ours = _pairs(loader)
    assert ours == _pairs(DataLoader(ds, batch_size=4)) and loader.not_cached


def test_a_concatenations_parts_set_alike_mid_epoch_make_the_next_batch(tmp_path, redis_url):
    """Without workers, every part of a ConcatDataset given one new transform after the first
    batch: the next batches are made with it, as DataLoader's are."""
    both = _two_folders(tmp_path)

    def batches(cls, **kw):
        for part in (both.datasets[0], both.datasets[1].datasets[0]):
            part.transform = v2.PILToTensor()
        out = []
        for x, y in cls(both, batch_size=4, **kw):
            out.append((x, y))
            if len(out) == 1:
                for part in (both.datasets[0], both.datasets[1].datasets[0]):
                    part.transform = _SMALL
        return out

    theirs = batches(DataLoader)
    ours = batches(SenecaLoader, cache=redis_url)
    assert [tuple(x.shape) for x, _ in ours] == [(4, 3, 12, 16)] + [(4, 3, 6, 8)] * 3
    for (ox, oy), (tx, ty) in zip(ours, theirs, strict=True):
        assert torch.equal(ox, tx) and torch.equal(oy, ty)


@pytest.mark.parametrize("shuffle", [False, True], ids=["in-order", "ods"])
def test_a_concatenations_part_set_otherwise_mid_epoch_is_never_served_another_parts_transform(
    tmp_path, redis_url, shuffle
):
    """Without workers, one part of a ConcatDataset given its own transform within an epoch
    would make its samples otherwise than the others: the loader raises rather than serve a
    sample made by the other part's transform. Set before an epoch, the loader reads the
    dataset as DataLoader does."""
    both = _two_folders(tmp_path)
    loader = SenecaLoader(both, batch_size=4, shuffle=shuffle, cache=redis_url)
    try:
        it = iter(loader)
        next(it)
        both.datasets[1].datasets[0].transform = _FLIPPED
        with pytest.raises(DatasetError, match="differ in loader or transforms since the epoch"):
            next(it)
        _read_as_dataloader_reads(loader, both, "differ in loader or transforms")
    finally:
        loader.close()


def _flip_the_second_part(_worker):
    get_worker_info().dataset.datasets[1].datasets[0].transform = _FLIPPED


def test_a_concatenations_part_a_worker_init_fn_sets_otherwise_raises_in_the_loop(
    tmp_path, redis_url
):
    """A ``worker_init_fn`` that gives one part of a ConcatDataset its own transform: the
    worker's samples of that part could not be made as DataLoader's worker makes them, so the
    loop raises instead of serving them made by the first part's transform."""
    both = _two_folders(tmp_path)
    kw = dict(batch_size=4, num_workers=1, worker_init_fn=_flip_the_second_part)
    assert _pairs(DataLoader(both, **kw)) != _pairs(DataLoader(both, batch_size=4))
    loader = SenecaLoader(both, shuffle=True, cache=redis_url, **kw)
    try:
        with pytest.raises(DatasetError, match="differ in loader or transforms"):
            list(loader)
    finally:
        loader.close()


def _grey(path):
    with open(path, "rb") as f:
        return Image.open(f).convert("L").convert("RGB")


@pytest.mark.parametrize("kind", ["concat-part", "subset-dataset", "subset-cacheable"])
def test_a_dataset_put_in_a_parts_place_between_epochs_is_read_as_dataloader_reads_it(
    tmp_path, redis_url, kind
):
    """Between epochs the script puts another dataset of the same files in a part's place (a
    ConcatDataset's part, relabelled; a Subset's dataset, decoding otherwise, a folder's or a
    CacheableDataset of the same id): the loader
    reads the samples, labels and transforms of the dataset in that place, as DataLoader
    does, never those of the one it replaced."""
    for name in ("a", "b"):
        make_dataset(tmp_path / name, 8, 2, size=(16, 12), progress=False, workers=1)
    a = datasets.ImageFolder(str(tmp_path / "a"), transform=v2.PILToTensor())
    b = datasets.ImageFolder(str(tmp_path / "b"), transform=v2.PILToTensor())
    ds = {
        "concat-part": lambda: ConcatDataset([a, b]),
        "subset-dataset": lambda: Subset(a, range(1, 7)),
        "subset-cacheable": lambda: Subset(_Numbered(0), range(1, 7)),
    }[kind]()
    loader = SenecaLoader(ds, batch_size=4, shuffle=True, cache=redis_url)
    try:
        assert _pairs(loader) == _pairs(DataLoader(ds, batch_size=4))
        if kind == "concat-part":
            other = datasets.ImageFolder(str(tmp_path / "b"), transform=v2.PILToTensor())
            other.samples = [(path, 10 + label) for path, label in other.samples]
            ds.datasets[1] = other
        elif kind == "subset-dataset":
            ds.dataset = datasets.ImageFolder(str(tmp_path / "a"), v2.PILToTensor(), loader=_grey)
        else:  # the same id, decoded otherwise
            ds.dataset = _Numbered(0, scale=3)
        _read_as_dataloader_reads(loader, ds, "another dataset in a part's place")
    finally:
        loader.close()


def _relabel_in_the_worker(_worker):
    dataset = get_worker_info().dataset
    dataset.samples = [(path, 10 + label) for path, label in dataset.samples]


@pytest.mark.parametrize("persistent", [False, True], ids=["per-epoch", "persistent"])
def test_labels_a_worker_init_fn_sets_are_the_workers_labels(tmp_path, redis_url, persistent):
    """A ``worker_init_fn`` that relabels the worker's copy of the dataset: DataLoader's
    workers serve their labels, and so do SenecaLoader's, every epoch."""
    root = tmp_path / "data"
    make_dataset(root, 12, 2, size=(16, 12), progress=False, workers=1)
    ds = datasets.ImageFolder(str(root), transform=v2.PILToTensor())
    kw = dict(batch_size=4, num_workers=2, persistent_workers=persistent)
    kw.update(worker_init_fn=_relabel_in_the_worker, multiprocessing_context="fork")
    theirs = [sorted(int(y) for _, ys in DataLoader(ds, **kw) for y in ys)]
    loader = SenecaLoader(ds, shuffle=True, cache=redis_url, **kw)
    try:
        ours = [sorted(int(y) for _, ys in loader for y in ys) for _ in range(2)]
        assert ours == theirs * 2 == [[10] * 6 + [11] * 6] * 2
        assert loader.stats()["storage_reads"] == 12  # the second epoch's images: cached
    finally:
        loader.close()


@pytest.mark.parametrize("workers", [0, 2])
def test_a_subset_whose_indices_change_between_epochs_is_read_as_dataloader_reads_it(
    tmp_path, redis_url, workers
):
    """Curriculum: the script gives its Subset other indices before an epoch. The loader's
    next epochs are DataLoader's (its length too), read uncached, with one warning."""
    root = tmp_path / "data"
    make_dataset(root, 12, 2, size=(16, 12), progress=False, workers=1)
    sub = torch.utils.data.Subset(_numbered(root, v2.PILToTensor()), list(range(6)))
    loader = SenecaLoader(sub, batch_size=4, shuffle=True, cache=redis_url, num_workers=workers)
    try:
        assert sorted(int(y) for _, ys in loader for y in ys) == list(range(6))
        assert loader.ods and len(loader) == 2
        sub.indices = list(range(3, 12))
        with pytest.warns(UserWarning, match="Subset's indices"):
            got = [int(y) for _, ys in loader for y in ys]
        assert sorted(got) == list(range(3, 12)) and len(loader) == 3
        assert sorted(int(y) for _, ys in loader for y in ys) == list(range(3, 12))
        assert not loader.ods and loader.store is None and "Subset" in loader.not_cached
    finally:
        loader.close()


def test_a_loader_read_as_dataloader_stops_its_persistent_workers_when_closed(tmp_path, redis_url):
    root = tmp_path / "data"
    make_dataset(root, 12, 2, size=(16, 12), progress=False, workers=1)
    sub = torch.utils.data.Subset(_numbered(root, v2.PILToTensor()), list(range(6)))
    loader = SenecaLoader(
        sub, batch_size=4, shuffle=True, cache=redis_url, num_workers=2, persistent_workers=True
    )
    sub.indices = list(range(6, 12))  # before the first epoch: its workers start with them
    with pytest.warns(UserWarning, match="Subset's indices"):
        assert sorted(int(y) for _, ys in loader for y in ys) == list(range(6, 12))
    assert sorted(int(y) for _, ys in loader for y in ys) == list(range(6, 12))
    assert multiprocessing.active_children()  # its persistent workers
    loader.close()
    wait_for(lambda: not multiprocessing.active_children(), "the persistent workers' exit")


@pytest.mark.parametrize("change", ["function", "setting"])
def test_a_loader_function_set_between_epochs_is_used_as_dataloader_uses_it(
    tmp_path, redis_url, monkeypatch, change
):
    """Another loader function set, or a setting the loader function reads changed."""
    root = tmp_path / "data"
    make_dataset(root, 8, 2, size=(16, 12), progress=False, workers=1)
    monkeypatch.setattr(sys.modules[__name__], "DIVISOR", 1)
    load = _loader_dividing_by(1) if change == "function" else _load_divided
    ds = datasets.DatasetFolder(str(root), loader=load, extensions=(".jpg",))
    loader = SenecaLoader(ds, batch_size=4, cache=redis_url, split=(0.0, 1.0, 0.0))
    try:
        full = [max(int(x.max()) for x, _ in loader) for _ in range(2)]
        assert full[0] == full[1] > 100 and loader.stats()["storage_reads"] == 8
        if change == "function":
            ds.loader = _loader_dividing_by(64)
        else:
            monkeypatch.setattr(sys.modules[__name__], "DIVISOR", 64)
        with pytest.warns(UserWarning, match="loader function"):
            assert max(int(x.max()) for x, _ in loader) == full[0] // 64
    finally:
        loader.close()


def _loader_set_in_workers(worker_id):
    get_worker_info().dataset.loader = _loader_dividing_by(64)


def test_a_loader_function_a_worker_init_fn_sets_is_what_its_worker_decodes_with(
    tmp_path, redis_url
):
    root = tmp_path / "data"
    make_dataset(root, 8, 2, size=(16, 12), progress=False, workers=1)
    ds = datasets.DatasetFolder(str(root), loader=_loader_dividing_by(1), extensions=(".jpg",))
    kw = dict(batch_size=4, num_workers=1, worker_init_fn=_loader_set_in_workers)
    theirs = torch.cat([x for x, _ in DataLoader(ds, **kw)])
    assert int(theirs.max()) < 4
    warm = SenecaLoader(ds, batch_size=4, cache=redis_url, split=(0.0, 1.0, 0.0))
    try:
        assert max(int(x.max()) for _ in range(2) for x, _ in warm) > 100  # cached, undivided
        loader = SenecaLoader(ds, cache=redis_url, split=(0.0, 1.0, 0.0), **kw)
        for _ in range(2):
            assert torch.equal(torch.cat([x for x, _ in loader]), theirs)
        loader.close()
    finally:
        warm.close()


def _grey_loader(path):
    with open(path, "rb") as f:
        return Image.open(f).convert("L")


def _grey_in_workers(worker_id):
    from torchvision.datasets import folder

    folder.pil_loader = _grey_loader


def test_torchvisions_pil_loader_replaced_by_a_script_is_what_decodes(
    tmp_path, redis_url, monkeypatch
):
    """A script that replaces ``torchvision.datasets.folder.pil_loader`` changes what an
    ImageFolder's default loader makes (it calls the module's function): SenecaLoader gives
    what DataLoader gives, and the values cached before, or by it, go to no job of the other."""
    from torchvision.datasets import folder

    root = tmp_path / "data"
    make_dataset(root, 8, 2, size=(16, 12), progress=False, workers=1)
    ds = datasets.ImageFolder(str(root), transform=v2.PILToTensor())

    def channels():
        loader = SenecaLoader(ds, batch_size=4, cache=redis_url, split=(0.0, 1.0, 0.0))
        try:
            return [{x.shape[1] for x, _ in loader} for _ in range(2)], loader.stats()
        finally:
            loader.close()

    assert channels()[0] == [{3}, {3}]  # RGB images cached
    monkeypatch.setattr(folder, "pil_loader", _grey_loader)
    assert {x.shape[1] for x, _ in DataLoader(ds, batch_size=4)} == {1}
    grey, stats = channels()
    assert grey == [{1}, {1}] and stats["storage_reads"] == 8  # the grey ones cached
    monkeypatch.undo()
    rgb, stats = channels()
    assert rgb == [{3}, {3}] and stats["storage_reads"] == 0
    kw = dict(batch_size=4, num_workers=1, worker_init_fn=_grey_in_workers)
    assert {x.shape[1] for x, _ in DataLoader(ds, **kw)} == {1}
    loader = SenecaLoader(ds, cache=redis_url, split=(0.0, 1.0, 0.0), **kw)
    try:  # in its workers only: they decode as the workers' DataLoader does
        assert [{x.shape[1] for x, _ in loader} for _ in range(2)] == [{1}, {1}]
    finally:
        loader.close()
    assert channels()[0] == [{3}, {3}]
