"""DataLoader's documented behaviours, run against DataLoader and SenecaLoader side by side:
the same batches (or, where ODS picks the order, the same samples per epoch), the same errors.

Each case runs over a dataset Seneca caches (an ImageFolder with a deterministic transform) and
one it reads as DataLoader does (a TensorDataset), unless the behaviour is about one kind."""

import functools
import traceback
import warnings

import pytest
import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    IterableDataset,
    SequentialSampler,
    TensorDataset,
    get_worker_info,
)
from torchvision import transforms as T
from torchvision.datasets import ImageFolder

from seneca import SenecaLoader

DET = T.Compose([T.Resize(12), T.CenterCrop(12), T.ToTensor()])


@pytest.fixture(params=["images", "tensors"])
def dataset(request, tiny_dataset):
    if request.param == "images":
        return ImageFolder(str(tiny_dataset), transform=DET)
    return TensorDataset(torch.arange(30.0).view(30, 1), torch.arange(30))


@pytest.fixture
def seneca(redis_url):
    def make(*args, **kwargs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "no cache for this dataset"
            return SenecaLoader(*args, cache=redis_url, cache_size="20MB", **kwargs)

    return make


def _flat(batches):
    """Batches as nested lists of plain values (tensors compared exactly)."""
    out = []
    for b in batches:
        if isinstance(b, list | tuple):
            out.append([x.tolist() if isinstance(x, torch.Tensor) else x for x in b])
        else:
            out.append(b.tolist() if isinstance(b, torch.Tensor) else b)
    return out


def _len(loader):
    try:
        return len(loader)
    except TypeError as err:  # an IterableDataset without __len__
        return str(err)


def same(make_ours, make_theirs=DataLoader, epochs=2):
    ours, theirs = make_ours(), make_theirs()
    for _ in range(epochs):
        assert _flat(ours) == _flat(theirs)
    assert _len(ours) == _len(theirs)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"batch_size": 7},
        {"batch_size": 7, "drop_last": True},
        {"batch_size": None},
        {"batch_size": 4, "sampler": [5, 3, 3, 0, 9]},
        {"batch_sampler": BatchSampler(SequentialSampler(range(12)), 5, False)},
        {"batch_size": 6, "collate_fn": lambda items: [len(items), items[0][1]]},
        {"batch_size": 6, "num_workers": 2},
        {"batch_size": 6, "num_workers": 2, "persistent_workers": True},
        {"batch_size": 6, "num_workers": 2, "timeout": 30, "prefetch_factor": 3},
        {"batch_size": 6, "num_workers": 2, "pin_memory": True},
        {"batch_size": 6, "num_workers": 1, "multiprocessing_context": "spawn"},
    ],
    ids=lambda o: ",".join(sorted(o)) or "defaults",
)
def test_the_same_batches_in_the_same_order(dataset, seneca, options):
    # a spawned worker imports torch again each epoch (4 s of CPU here): one epoch shows it, held
    # to DataLoader's batches with a forked worker (how its workers start does not change them)
    spawn = options.get("multiprocessing_context") == "spawn"
    theirs = {**options, "multiprocessing_context": "fork"} if spawn else options
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # pin_memory without a GPU
        same(
            functools.partial(seneca, dataset, **options),
            functools.partial(DataLoader, dataset, **theirs),
            epochs=1 if spawn else 2,
        )


def test_a_generator_gives_the_same_shuffle_without_ods(dataset, seneca):
    def make(cls, **extra):
        return cls(
            dataset, batch_size=5, shuffle=True, generator=torch.Generator().manual_seed(4), **extra
        )

    same(lambda: make(seneca, ods=False), lambda: make(DataLoader))


def test_shuffled_epochs_hold_the_same_samples(dataset, seneca):
    ours, theirs = (
        seneca(dataset, batch_size=5, shuffle=True),
        DataLoader(dataset, batch_size=5, shuffle=True),
    )
    assert len(ours) == len(theirs)
    for _ in range(2):
        got = sorted(int(y) for _, ys in ours for y in ys)
        assert got == sorted(int(y) for _, ys in theirs for y in ys)


def test_unordered_workers_hold_the_same_samples(dataset, seneca):
    opts = dict(batch_size=4, num_workers=2, in_order=False)
    got = sorted(int(y) for _, ys in seneca(dataset, **opts) for y in ys)
    assert got == sorted(int(y) for _, ys in DataLoader(dataset, **opts) for y in ys)


def test_worker_init_fn_and_worker_info(dataset, seneca):
    def record(cls):
        seen = []

        def init(worker_id):
            info = get_worker_info()
            assert info.id == worker_id and info.num_workers == 2
            assert len(info.dataset) == len(dataset)

        def collate(items):
            return get_worker_info().id

        seen = list(
            cls(dataset, batch_size=5, num_workers=2, worker_init_fn=init, collate_fn=collate)
        )
        return seen

    assert record(seneca) == record(DataLoader)


class Shards(IterableDataset):
    """Each worker yields its share (the get_worker_info idiom of torch's docs)."""

    def __iter__(self):
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(start, 20, step))


@pytest.mark.parametrize("workers", [0, 2])
def test_iterable_datasets(seneca, workers):
    same(
        lambda: seneca(Shards(), batch_size=3, num_workers=workers),
        lambda: DataLoader(Shards(), batch_size=3, num_workers=workers),
    )


class Broken(Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, i):
        if i == 6:
            raise KeyError(f"sample {i}")
        return i


@pytest.mark.parametrize("workers", [0, 1])
def test_an_error_in_the_dataset_reaches_the_loop_as_it_does_with_dataloader(seneca, workers):
    def error(loader):
        with pytest.raises(Exception) as got:
            list(loader)
        # DataLoader's iterator goes now, its worker told to stop: left in the error's
        # reference cycle, it would go with the collector, and its worker wait 5 s
        traceback.clear_frames(got.tb)
        return type(got.value), "sample 6" in str(got.value)

    opts = dict(batch_size=2, num_workers=workers)
    assert error(seneca(Broken(), **opts)) == error(DataLoader(Broken(), **opts))


@pytest.mark.parametrize(
    "options",
    [
        {"batch_size": -1},
        {"sampler": [0], "shuffle": True},
        {"batch_sampler": [[0]], "batch_size": 2},
        {"batch_sampler": [[0]], "drop_last": True},
        {"batch_size": None, "drop_last": True},
        {"num_workers": -2},
        {"timeout": -1},
        {"prefetch_factor": 2},
        {"persistent_workers": True},
        {"num_workers": 1, "multiprocessing_context": "nope"},
    ],
    ids=lambda o: ",".join(sorted(o)),
)
def test_the_same_errors_for_bad_arguments(dataset, seneca, options):
    with pytest.raises(Exception) as theirs:
        DataLoader(dataset, **options)
    with pytest.raises(type(theirs.value)) as ours:
        seneca(dataset, **options)
    assert str(ours.value) == str(theirs.value)
