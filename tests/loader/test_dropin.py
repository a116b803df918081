"""SenecaLoader as a one-line replacement of DataLoader: any dataset DataLoader accepts, the
user's objects where DataLoader shows them, DataLoader's errors first, reproducible ODS."""

import collections
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.indexed import indexed
from PIL import Image
from torch.utils.data import (
    ChainDataset,
    ConcatDataset,
    DataLoader,
    Dataset,
    IterableDataset,
    Subset,
    TensorDataset,
    get_worker_info,
    random_split,
)
from torchvision import transforms as T
from torchvision.datasets import DatasetFolder, EuroSAT, FakeData, ImageFolder

from seneca import SenecaLoader
from seneca.loader._options import collective_device
from seneca_base.errors import ConfigError

N = 48


class Squares(Dataset):
    def __len__(self):
        return 20

    def __getitem__(self, i):
        return torch.tensor([i * i]), i


class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(7))


class WithIndex(ImageFolder):
    def __getitem__(self, index):
        x, y = super().__getitem__(index)
        return x, y, index


def _targets(loader):
    out = []
    for batch in loader:
        out += [int(v) for v in (batch[1] if isinstance(batch, list | tuple) else batch)]
    return out


UNCACHED = {
    "TensorDataset": lambda root: TensorDataset(torch.arange(10.0), torch.arange(10)),
    "map-style": lambda root: Squares(),
    "FakeData": lambda root: FakeData(12, image_size=(3, 8, 8), transform=T.ToTensor()),
}


@pytest.mark.parametrize("kind", sorted(UNCACHED))
@pytest.mark.parametrize("workers", [0, 2])
def test_other_map_datasets_are_read_as_dataloader_reads_them(
    tiny_dataset, redis_url, kind, workers
):
    ds = UNCACHED[kind](tiny_dataset)
    torch.manual_seed(3)
    want = _targets(DataLoader(ds, batch_size=4, shuffle=True, num_workers=workers))
    torch.manual_seed(3)
    with pytest.warns(UserWarning, match=type(ds).__name__):
        loader = SenecaLoader(ds, batch_size=4, shuffle=True, num_workers=workers, cache=redis_url)
    assert _targets(loader) == want  # the same order: DataLoader's own sampler ran
    assert not loader.ods and loader.store is None and type(ds).__name__ in loader.not_cached
    assert loader.stats()["samples"] == 0 and loader.dataset is ds


@pytest.mark.parametrize("make", [lambda: Stream(), lambda: ChainDataset([Stream(), Stream()])])
def test_iterable_datasets_are_read_as_dataloader_reads_them(redis_url, make):
    want = [list(b) for b in DataLoader(make(), batch_size=3)]
    with pytest.warns(UserWarning, match="IterableDataset"):
        loader = SenecaLoader(make(), batch_size=3, cache=redis_url)
    assert [list(b) for b in loader] == want
    with pytest.raises(ConfigError, match="ods=True.*IterableDataset"):
        SenecaLoader(make(), batch_size=3, cache=redis_url, ods=True)


def test_dataloader_checks_its_own_arguments_first(redis_url):
    cases = [
        dict(dataset=Squares(), batch_size=0),
        dict(dataset=Squares(), shuffle=True, sampler=[0, 1]),
        dict(dataset=Stream(), shuffle=True),
        dict(dataset=Squares(), num_workers=-1),
        dict(dataset=Squares(), batch_size=None, drop_last=True),
    ]
    for args in cases:
        with pytest.raises(ValueError) as theirs:
            DataLoader(**args)
        with pytest.raises(type(theirs.value)) as ours:
            SenecaLoader(**args, cache=redis_url, cache_size="lots")  # and a bad option of ours
        assert str(ours.value) == str(theirs.value)


def test_a_getitem_override_is_honoured(tiny_dataset, redis_url):
    ds = WithIndex(str(tiny_dataset), transform=T.Compose([T.Resize(8), T.ToTensor()]))
    with pytest.warns(UserWarning, match="overrides __getitem__"):
        loader = SenecaLoader(ds, batch_size=8, shuffle=True, cache=redis_url)
    batches = list(loader)
    assert all(len(b) == 3 for b in batches)
    assert sorted(int(i) for b in batches for i in b[2]) == list(range(N))


class StampedSubset(Subset):
    """A split with its own transform, as scripts give a random_split's parts theirs."""

    def __getitem__(self, i):
        x, y = super().__getitem__(i)
        return x * 0 + 7, y + 100

    def __getitems__(self, indices):
        return [self[i] for i in indices]


class StampedConcat(ConcatDataset):
    def __getitem__(self, i):
        x, y = super().__getitem__(i)
        return x * 0 + 9, y + 100


class BatchedFolder(ImageFolder):
    """Batches of its own: DataLoader calls ``__getitems__`` for a batch when a dataset has it."""

    def __getitems__(self, indices):
        return [(self[i][0] * 0 + 3, 5) for i in indices]


class ShortFolder(ImageFolder):
    def __len__(self):
        return 10


OVERRIDES = {
    "Subset.__getitem__": lambda ds: StampedSubset(ds, range(20)),
    "ConcatDataset.__getitem__": lambda ds: StampedConcat([Subset(ds, range(10)), ds]),
    "ImageFolder.__getitems__": lambda ds: BatchedFolder(ds.root, transform=ds.transform),
    "ImageFolder.__len__": lambda ds: ShortFolder(ds.root, transform=ds.transform),
}


@pytest.mark.parametrize("kind", sorted(OVERRIDES))
@pytest.mark.parametrize("workers", [0, 2])
def test_a_subclass_that_makes_or_counts_samples_its_own_way_gets_its_own_values(
    tiny_dataset, redis_url, kind, workers
):
    ds = OVERRIDES[kind](
        ImageFolder(str(tiny_dataset), transform=T.Compose([T.Resize(8), T.ToTensor()]))
    )
    want = list(DataLoader(ds, batch_size=4, num_workers=workers))
    with pytest.warns(UserWarning, match=f"overrides {kind.split('.')[1]}"):
        loader = SenecaLoader(ds, batch_size=4, num_workers=workers, cache=redis_url)
    for _ in range(2):
        got = list(loader)
        assert len(got) == len(want)
        for (x, y), (wx, wy) in zip(got, want, strict=True):
            assert torch.equal(x, wx) and torch.equal(y, wy)


def test_a_torchvision_dataset_of_its_own_folder_class_is_cached(tiny_dataset, redis_url, tmp_path):
    shutil.copytree(tiny_dataset, tmp_path / "eurosat" / "2750")  # where EuroSAT keeps its files
    ds = EuroSAT(str(tmp_path), transform=T.Compose([T.Resize((8, 8)), T.PILToTensor()]))
    want = list(DataLoader(ds, batch_size=8))
    loader = SenecaLoader(ds, batch_size=8, cache=redis_url)
    assert loader.not_cached is None and loader.store is not None
    for _ in range(2):
        assert all(_same(a, b) for a, b in zip(list(loader), want, strict=True))


LABELS = {
    "float": lambda i, y: y + 0.37,
    "bool": lambda i, y: bool(y % 2),
    "str": lambda i, y: f"class {y}",
    "tuple": lambda i, y: (y, i),
    "array": lambda i, y: np.array([y, 0.5], dtype=np.float32),
    "tensor": lambda i, y: torch.tensor([y, i]),
}


def _same(a, b):
    """Whether collated ``a`` and ``b`` are the same: types, dtypes and values."""
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _labelled(root, kind):
    """A folder dataset whose samples hold labels of another kind than a class index, as a
    ``make_dataset`` of a regression or multi-label dataset makes them."""
    ds = ImageFolder(str(root), transform=T.Compose([T.Resize((8, 8)), T.PILToTensor()]))
    ds.samples = ds.imgs = [(p, LABELS[kind](i, y)) for i, (p, y) in enumerate(ds.samples)]
    return ds


@pytest.mark.parametrize("kind", sorted(LABELS))
@pytest.mark.parametrize("workers", [0, 2])
def test_labels_of_any_kind_are_the_datasets_own(tiny_dataset, redis_url, kind, workers):
    ds = _labelled(tiny_dataset, kind)
    want = list(DataLoader(ds, batch_size=8, num_workers=workers))
    loader = SenecaLoader(ds, batch_size=8, num_workers=workers, cache=redis_url)
    assert loader.store is not None
    for _ in range(2):
        got = list(loader)
        assert len(got) == len(want)
        for (x, y), (wx, wy) in zip(got, want, strict=True):
            assert torch.equal(x, wx)
            assert _same(y, wy)


def _by_suffix(path):
    """A loader that takes a Path, as a dataset whose samples hold Paths hands them on."""
    mode = {".png": "L"}.get(path.suffix, "RGB")  # (a str has no suffix)
    return Image.open(path).convert(mode)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_loader_function_is_given_the_path_the_samples_hold(tiny_dataset, redis_url, workers):
    ds = ImageFolder(str(tiny_dataset), T.Compose([T.Resize((8, 8)), T.PILToTensor()]))
    ds.loader = _by_suffix
    ds.samples = ds.imgs = [(Path(p), y) for p, y in ds.samples]
    want = list(DataLoader(ds, batch_size=8, num_workers=workers))
    loader = SenecaLoader(ds, batch_size=8, num_workers=workers, cache=redis_url)
    assert loader.store is not None
    for _ in range(2):
        assert all(_same(a, b) for a, b in zip(list(loader), want, strict=True))


@pytest.mark.parametrize("workers", [0, 2])
def test_soft_labels_set_between_epochs_are_served_with_odss_batches(
    tiny_dataset, redis_url, workers
):
    ds = _labelled(tiny_dataset, "float")
    image = {ds[i][0].numpy().tobytes(): i for i in range(N)}
    loader = SenecaLoader(ds, batch_size=8, shuffle=True, num_workers=workers, cache=redis_url)
    assert loader.ods
    for epoch in range(3):
        ds.samples = ds.imgs = [
            (p, np.array([i / 4, epoch])) for i, (p, _) in enumerate(ds.samples)
        ]
        served = []
        for x, y in loader:
            for xi, yi in zip(x, y, strict=True):
                i = image[xi.numpy().tobytes()]
                served.append(i)
                assert yi.dtype == torch.float64 and yi.tolist() == [i / 4, epoch]
        assert sorted(served) == list(range(N))


def test_subsets_are_cached_with_ods_over_their_samples(tiny_dataset, redis_url):
    ds = indexed(tiny_dataset)
    train, val = random_split(ds, [36, 12], generator=torch.Generator().manual_seed(0))
    loader = SenecaLoader(train, batch_size=5, shuffle=True, cache=redis_url, cache_size="20MB")
    assert loader.ods and loader.dataset is train and len(loader) == 8
    mine = sorted(ds.targets[i] for i in train.indices)
    for _ in range(2):
        assert sorted(_targets(loader)) == mine
    assert loader.stats()["storage_reads"] <= 36  # the second epoch from the cache
    nested = Subset(val, [0, 2, 4])
    got = _targets(SenecaLoader(nested, batch_size=2, cache=redis_url))
    assert got == [val.indices[0], val.indices[2], val.indices[4]]


def test_overlapping_subsets_in_concurrent_jobs_share_the_cache(tiny_dataset, redis_url):
    ds = indexed(tiny_dataset)
    opts = dict(batch_size=6, shuffle=True, cache=redis_url, cache_size="20MB", split=(1, 0, 0))
    a = SenecaLoader(Subset(ds, range(0, 30)), job="a", **opts)
    assert sorted(_targets(a)) == list(range(30))
    b = SenecaLoader(Subset(ds, range(18, 48)), job="b", **opts)
    assert sorted(_targets(b)) == list(range(18, 48))
    assert a.store.keys.dataset == b.store.keys.dataset
    assert b.stats()["encoded"]["hits"] >= 12  # 18..29 were cached by a


def test_a_subset_that_repeats_samples_is_cached_without_ods(tiny_dataset, redis_url):
    ds = indexed(tiny_dataset)
    sub = Subset(ds, [1, 1, 2, 3])
    loader = SenecaLoader(sub, batch_size=2, shuffle=True, cache=redis_url)
    assert not loader.ods and loader.store is not None
    assert sorted(_targets(loader)) == [1, 1, 2, 3]
    with pytest.raises(ConfigError, match="ods=True.*repeats"):
        SenecaLoader(sub, batch_size=2, shuffle=True, cache=redis_url, ods=True)


def test_numpy_loader_outputs_come_back_as_arrays(tmp_path, redis_url):
    for k in range(12):
        d = tmp_path / "data" / f"c{k % 2}"
        d.mkdir(parents=True, exist_ok=True)
        np.save(d / f"{k}.npy", np.full((2, 3), k, dtype=np.float32))
    ds = DatasetFolder(
        str(tmp_path / "data"), loader=np.load, extensions=(".npy",), transform=torch.from_numpy
    )
    loader = SenecaLoader(ds, batch_size=4, shuffle=True, cache=redis_url, split=(0, 1, 0))
    for _ in range(3):
        xs = torch.cat([x for x, _ in loader])
        assert xs.dtype == torch.float32 and sorted(xs[:, 0, 0].tolist()) == list(range(12))
    assert loader.stats()["decoded"]["hits"] > 0


def test_the_loader_shows_the_users_objects(tiny_dataset, redis_url):
    ds = indexed(tiny_dataset)

    def init(worker_id):
        info = get_worker_info()
        assert info.dataset.classes == ds.classes  # reads reach the user's dataset
        info.dataset.transform = T.Compose([T.CenterCrop(10), T.ToTensor()])  # so do writes
        info.dataset.marker = worker_id  # a new attribute too: the wrapper keeps only its own
        assert info.dataset.dataset.marker == worker_id and "marker" not in vars(info.dataset)

    loader = SenecaLoader(
        ds, batch_size=8, shuffle=True, num_workers=1, worker_init_fn=init, cache=redis_url
    )
    assert loader.dataset is ds
    assert {tuple(x.shape[-2:]) for x, _ in loader} == {(10, 10)}
    assert len(loader.sampler) == N and sorted(loader.sampler) == list(range(N))
    assert loader.batch_sampler is loader.sampler.batch_sampler and len(loader) == 6
    plain = SenecaLoader(ds, batch_size=8, shuffle=True, ods=False, cache=redis_url)
    assert type(plain.sampler).__name__ == "RandomSampler" and plain.sampler.data_source is ds
    assert SenecaLoader[torch.Tensor] is not None


def _flip_the_subset(_worker):
    subset = get_worker_info().dataset
    assert not hasattr(subset, "transform")  # a Subset has none
    subset.transform = T.Compose([T.RandomVerticalFlip(1.0), T.PILToTensor()])  # never used


@pytest.mark.parametrize("kind", ["subset", "concat"])
def test_a_transform_a_worker_init_fn_sets_on_a_subset_is_unused_as_dataloader_leaves_it(
    tiny_dataset, redis_url, kind
):
    """A ``worker_init_fn`` that sets ``transform`` on a Subset or ConcatDataset: DataLoader's
    samples are made by the datasets inside it, which keep theirs; so are SenecaLoader's."""
    from torch.utils.data import ConcatDataset

    ds = ImageFolder(str(tiny_dataset), transform=T.PILToTensor())
    wrapped = Subset(ds, range(4, 20)) if kind == "subset" else ConcatDataset([ds, ds])
    kw = dict(batch_size=4, num_workers=1, worker_init_fn=_flip_the_subset)
    want = [x for x, _ in DataLoader(wrapped, **kw)]
    loader = SenecaLoader(wrapped, cache=redis_url, **kw)
    try:
        for _ in range(2):
            got = list(loader)
            assert all(torch.equal(x, w) for (x, _), w in zip(got, want, strict=True))
    finally:
        loader.close()


@pytest.mark.parametrize("batch_size, drop_last", [(1, False), (5, False), (5, True), (48, True)])
def test_len_matches_dataloader(tiny_dataset, redis_url, batch_size, drop_last):
    ds = indexed(tiny_dataset)
    for shuffle in (True, False):
        opts = dict(batch_size=batch_size, drop_last=drop_last, shuffle=shuffle)
        assert len(SenecaLoader(ds, cache=redis_url, **opts)) == len(DataLoader(ds, **opts))


def test_a_seeded_job_on_an_empty_cache_reproduces_its_order(tiny_dataset, redis_url):
    def orders(seed, job):
        loader = SenecaLoader(
            indexed(tiny_dataset),
            batch_size=8,
            shuffle=True,
            cache=redis_url,
            job=job,
            split=(0, 0, 1),  # one job: nothing is admitted, the cache stays empty
            generator=torch.Generator().manual_seed(seed),
        )
        assert loader.ods
        return [_targets(loader) for _ in range(2)]

    first = orders(7, "r1")
    assert orders(7, "r2") == first and first[0] != first[1]
    assert orders(8, "r3") != first
    torch.manual_seed(5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = SenecaLoader(indexed(tiny_dataset), batch_size=8, shuffle=True, cache=redis_url)
    got = _targets(loader)
    assert collections.Counter(got) == collections.Counter(range(N))


def test_collectives_run_on_the_device_the_backend_needs():
    assert collective_device("nccl", 3) == "cuda:3"
    assert collective_device("NCCL", None) == "cuda"
    assert collective_device("gloo", 0) == "cpu"
    assert collective_device("mpi", None) == "cpu"


class Blobs(Dataset):
    """A dataset that says how Seneca may cache it (seneca.CacheableDataset)."""

    transform = None
    target_transform = None

    def __len__(self):
        return 20

    def __getitem__(self, i):
        return self.seneca_decode(self.seneca_read(i), i), self.seneca_target(i)

    def seneca_id(self):
        return "blobs-v1"

    def seneca_read(self, i):
        return bytes([i]) * 16

    def seneca_decode(self, data, i):
        return torch.frombuffer(bytearray(data), dtype=torch.uint8).float()

    def seneca_target(self, i):
        return i


def test_a_dataset_implementing_the_protocol_is_cached(redis_url):
    import seneca

    ds = Blobs()
    assert isinstance(ds, seneca.CacheableDataset)
    want = {y: x for x, y in (ds[i] for i in range(20))}
    loader = SenecaLoader(ds, batch_size=4, shuffle=True, cache=redis_url, split=(1, 0, 0))
    assert loader.ods and loader.not_cached is None
    for _ in range(2):
        for xs, ys in loader:
            for x, y in zip(xs, ys, strict=True):
                assert torch.equal(x, want[int(y)])
    stats = loader.stats()
    assert stats["storage_reads"] == 20 and stats["encoded"]["hits"] == 20


def test_concatenated_folders_are_cached_as_one_list(tiny_dataset, redis_url):
    from torch.utils.data import ConcatDataset

    ds = indexed(tiny_dataset)
    both = ConcatDataset([Subset(ds, range(0, 10)), ds])
    loader = SenecaLoader(both, batch_size=8, shuffle=True, cache=redis_url, cache_size="20MB")
    assert loader.ods and loader.not_cached is None and len(loader) == 8
    got = sorted(_targets(loader))
    assert got == sorted(list(range(10)) + list(range(N)))
    other = indexed(tiny_dataset)
    other.transform = T.Compose([T.CenterCrop(8), T.ToTensor()])
    with pytest.warns(UserWarning, match="differ"):
        mixed = SenecaLoader(ConcatDataset([ds, other]), batch_size=8, cache=redis_url)
    assert mixed.not_cached and len(_targets(mixed)) == 2 * N


@pytest.mark.parametrize("workers", [0, 2])
def test_a_concatenation_of_concatenations_and_subsets_is_read_as_dataloader_reads_it(
    tmp_path, redis_url, workers
):
    """A ConcatDataset whose parts are ConcatDatasets and Subsets of folder datasets: every
    sample is the file DataLoader reads for its index, with its label, in order, the second
    epoch from the cache."""
    from helpers.dataloader import same_as_dataloader
    from torch.utils.data import ConcatDataset

    from seneca._bench.synthetic import make_dataset

    parts = []
    for name, classes in (("a", 2), ("b", 3), ("c", 2)):
        make_dataset(tmp_path / name, 8, classes, size=(12, 10), progress=False, workers=1)
        parts.append(ImageFolder(str(tmp_path / name), transform=T.PILToTensor()))
    a, b, c = parts
    both = ConcatDataset([ConcatDataset([a, Subset(b, [7, 1, 4])]), c, ConcatDataset([b])])
    reads = same_as_dataloader(both, redis_url, num_workers=workers)
    assert reads == len(both) == 8 + 3 + 8 + 8


class _Scaled:
    """A step of the user's whose repr does not show what it does."""

    def __init__(self, k):
        self.k = k

    def __call__(self, x):
        return x * self.k

    def __repr__(self):
        return "Scaled()"


def test_concatenated_folders_whose_transforms_differ_only_in_what_repr_hides(
    tiny_dataset, redis_url
):
    a, b = indexed(tiny_dataset), indexed(tiny_dataset)
    a.transform = T.Compose([T.CenterCrop(8), T.ToTensor(), _Scaled(1)])
    b.transform = T.Compose([T.CenterCrop(8), T.ToTensor(), _Scaled(2)])
    both = ConcatDataset([a, b])
    theirs = torch.cat([x for x, _ in DataLoader(both, batch_size=8)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # read uncached: the parts differ
        loader = SenecaLoader(both, batch_size=8, cache=redis_url)
    assert torch.equal(torch.cat([x for x, _ in loader]), theirs)
    assert loader.not_cached


def _rebuilt(loader):
    """A DataLoader made from ``loader``'s attributes, as Accelerate's ``prepare()`` makes one
    (its DataLoaderShard, with the same batch sampler, collate function and workers)."""
    return DataLoader(
        loader.dataset,
        batch_sampler=loader.batch_sampler,
        collate_fn=loader.collate_fn,
        num_workers=loader.num_workers,
        worker_init_fn=loader.worker_init_fn,
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_a_loader_rebuilt_from_its_attributes_says_to_iterate_the_loader(
    tiny_dataset, redis_url, workers
):
    """A rebuilt loader would read the user's dataset around the cache (its transform whole,
    with the cache's decisions pinned and never fetched): it raises, naming the fix."""
    tf = T.Compose([T.RandomResizedCrop(16), T.PILToTensor(), T.ConvertImageDtype(torch.float)])
    ds = ImageFolder(str(tiny_dataset), tf)
    loader = SenecaLoader(ds, batch_size=8, shuffle=True, num_workers=workers, cache=redis_url)
    with pytest.raises(ConfigError, match=r"Accelerate's prepare\(\).*device=accelerator.device"):
        next(iter(_rebuilt(loader)))
    for _ in range(2):  # the loader itself is unharmed, before and after its own epochs
        assert sum(len(y) for _, y in loader) == N
        with pytest.raises(ConfigError, match="iterated outside the loader"):
            next(iter(_rebuilt(loader)))
    assert sorted(loader.sampler) == list(range(N))  # its sampler is DataLoader's still
    left = iter(loader)  # an iteration begun and left: the loop after it is whole
    assert sum(len(y) for _, y in loader) == N
    if workers == 0:  # iterators made together begin in any order
        first, second = iter(loader), iter(loader)
        assert len(next(second)[1]) == len(next(first)[1]) == 8
    del left


def test_torchvisions_accimage_backend_is_used_as_dataloader_uses_it(tiny_dataset, redis_url):
    """With torchvision's image backend set to accimage, ImageFolder's default loader decodes
    with accimage: SenecaLoader calls it as DataLoader does (here accimage is not installed, so
    both raise its import error), never decoding with PIL in its place."""
    import torchvision

    ds = ImageFolder(str(tiny_dataset), transform=T.ToTensor())
    torchvision.set_image_backend("accimage")
    try:
        with pytest.raises(ModuleNotFoundError, match="accimage"):
            next(iter(DataLoader(ds, batch_size=4)))
        loader = SenecaLoader(ds, batch_size=4, cache=redis_url)
        with pytest.raises(ModuleNotFoundError, match="accimage"):
            next(iter(loader))
        loader.close()
    finally:
        torchvision.set_image_backend("PIL")


def test_a_transform_is_given_the_image_dataloader_gives_it(tmp_path, redis_url):
    """The image a transform is given, decoded from the file or cached: as torchvision's loader
    gives it, a plain image (no decoder's ``format``, not a ``JpegImageFile``) with the file's
    ``info`` (its EXIF bytes and resolution)."""
    from PIL import Image

    root = tmp_path / "photos"
    for k in range(8):
        (root / f"c{k % 2}").mkdir(parents=True, exist_ok=True)
        exif = Image.Exif()
        exif[0x010F] = f"camera {k}"  # Make
        img = Image.fromarray(np.full((6, 10, 3), 30 * k, dtype=np.uint8))
        img.save(root / f"c{k % 2}" / f"{k}.jpg", exif=exif, dpi=(300, 300))
    seen = []

    def look(img):
        seen.append((type(img), img.format, img.mode, img.size, dict(img.info)))
        return img

    ds = ImageFolder(str(root), transform=T.Compose([look, T.PILToTensor()]))
    list(DataLoader(ds, batch_size=4))
    want, seen[:] = list(seen), []
    assert want[0][:2] == (Image.Image, None) and b"camera 0" in want[0][4]["exif"]
    loader = SenecaLoader(ds, batch_size=4, cache=redis_url, split=(0.0, 1.0, 0.0))
    for epoch in range(2):  # decoded from the files, then from the cache
        list(loader)
        assert seen == want, epoch
        seen[:] = []
    assert loader.stats()["decoded"]["hits"] == 8
    loader.close()


class _Stamp:
    """An augmentation that draws on the image it is given (in place) and counts its stamps."""

    def __call__(self, img):
        from PIL import ImageDraw

        ImageDraw.Draw(img).rectangle([0, 0, 2, 2], fill=(255, 0, 0))
        img.info["stamps"] = img.info.get("stamps", 0) + 1
        return img


def _stamps(img):
    return torch.tensor([img.info["stamps"]]), T.PILToTensor()(img)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_transform_that_changes_its_image_in_place_never_changes_the_cached_one(
    tiny_dataset, redis_url, workers
):
    """The image a transform is given is the sample's own, as DataLoader's is: what a step
    draws on it in place is not kept in the decoded copy that later epochs and jobs read."""
    ds = ImageFolder(str(tiny_dataset), transform=T.Compose([_Stamp(), _stamps]))
    want = [(s, x) for (s, x), _ in (ds[i] for i in range(len(ds)))]
    assert {int(s) for s, _ in want} == {1}
    loader = SenecaLoader(
        ds, batch_size=8, num_workers=workers, cache=redis_url, split=(0.0, 1.0, 0.0)
    )
    try:
        for _ in range(2):  # decoded from the files, then from the cache
            batches = list(loader)
            assert torch.cat([s for (s, _), _ in batches]).flatten().tolist() == [1] * len(ds)
            images = torch.cat([x for (_, x), _ in batches])
            assert torch.equal(images, torch.stack([x for _, x in want]))
        assert loader.stats()["decoded"]["hits"] == len(ds)
    finally:
        loader.close()


def _big_endian(path):
    with open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=">i4")


def _native(a):
    return a.astype(np.int32)


def test_values_the_cache_keeps_no_faithful_copy_of_are_made_each_time(tmp_path, redis_url):
    """A loader function's big-endian arrays (as read from a big-endian file format) are
    given to the transform as DataLoader gives them, never cached."""
    root = tmp_path / "numbers"
    for k in range(8):
        (root / f"c{k % 2}").mkdir(parents=True, exist_ok=True)
        (root / f"c{k % 2}" / f"{k}.raw").write_bytes(np.arange(k, k + 3, dtype=">i4").tobytes())
    ds = DatasetFolder(str(root), loader=_big_endian, extensions=(".raw",), transform=_native)
    want = torch.cat([x for x, _ in DataLoader(ds, batch_size=4)])
    loader = SenecaLoader(ds, batch_size=4, cache=redis_url, split=(0.0, 1.0, 0.0))
    for _ in range(2):
        assert torch.equal(torch.cat([x for x, _ in loader]), want)
    assert loader.stats()["storage_reads"] == 16 and loader.stats()["decoded"]["admitted"] == 0
    loader.close()
