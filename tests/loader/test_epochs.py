"""Every iteration of a SenecaLoader runs a new epoch with every sample, as a DataLoader's
does, however the previous one ended (break, peek, zip, islice, an exception, garbage)."""

import gc
import itertools

import pytest
from helpers.indexed import indexed
from torchvision import transforms as T

from seneca import SenecaLoader

N = 48


def _loader(root, url, **options):
    options.setdefault("num_workers", 0)
    return SenecaLoader(
        indexed(root), batch_size=5, shuffle=True, cache=url, cache_size="20MB", **options
    )


def _full_epoch(loader):
    got = sorted(int(i) for _, y in loader for i in y)
    assert got == list(range(N)), f"{len(got)} samples, {len(set(got))} distinct"


def _break(loader):
    for k, _ in enumerate(loader):
        if k == 2:
            break


def _peek(loader):
    next(iter(loader))


def _zip(loader):
    list(zip(loader, range(3), strict=False))


def _islice(loader):
    list(itertools.islice(loader, 4))


def _raise(loader):
    with pytest.raises(KeyError):
        for _ in loader:
            raise KeyError("stop")


def _garbage(loader):
    it = iter(loader)
    next(it)
    next(it)
    del it
    gc.collect()


CUTS = [_break, _peek, _zip, _islice, _raise, _garbage]


@pytest.mark.parametrize("cut", CUTS, ids=lambda f: f.__name__[1:])
@pytest.mark.parametrize("workers", [0, 1, 2])
def test_an_epoch_cut_short_is_followed_by_a_whole_one(tiny_dataset, redis_url, cut, workers):
    loader = _loader(tiny_dataset, redis_url, num_workers=workers, job=f"{cut.__name__}{workers}")
    assert loader.ods
    cut(loader)
    _full_epoch(loader)
    _full_epoch(loader)


@pytest.mark.slow
@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("context", ["fork", "forkserver"])
def test_cut_epochs_with_fork_and_forkserver_workers(tiny_dataset, redis_url, context, persistent):
    # (a forkserver's worker unpickles its dataset as a spawned one does; spawned workers are
    # tests/loader/test_loader.py's and test_compat.py's)
    loader = _loader(
        tiny_dataset,
        redis_url,
        num_workers=2,
        persistent_workers=persistent,
        multiprocessing_context=context,
        job=f"{context}-{persistent}",
    )
    _break(loader)
    _full_epoch(loader)
    _peek(loader)
    _full_epoch(loader)


def test_set_epoch_picks_an_epoch_not_run_yet(tiny_dataset, redis_url):
    loader = _loader(tiny_dataset, redis_url, job="set-epoch")
    sampler = loader.batch_sampler
    loader.set_epoch(5)
    _peek(loader)
    assert sampler.current == 5
    loader.set_epoch(5)  # run already (and cut short): the next iteration is a new epoch
    _full_epoch(loader)
    assert sampler.current == 6
    loader.set_epoch(9)
    _full_epoch(loader)
    assert sampler.current == 9
    _full_epoch(loader)
    assert sampler.current == 10


@pytest.mark.parametrize("workers", [0, 1])
def test_an_iteration_runs_the_epoch_due_when_it_began(tiny_dataset, redis_url, workers):
    """A set_epoch between iter() and the first batch (Lightning's, resuming from a
    checkpoint) is the next iteration's, whether the first batch is decided in this process or
    for a worker's ticket in another thread (data-parallel ranks must not part ways there)."""
    loader = _loader(tiny_dataset, redis_url, num_workers=workers, job=f"due{workers}")
    loader.dataset.transform = T.Compose([T.RandomResizedCrop(16), T.PILToTensor()])
    it = iter(loader)
    loader.set_epoch(4)
    assert sorted(int(i) for _, y in it for i in y) == list(range(N))
    assert loader.state_dict()["epoch"] == 1  # epoch 0 ran: the next is due
    _full_epoch(loader)
    assert loader.state_dict()["epoch"] == 5  # epoch 4 ran


def test_a_state_saved_mid_epoch_resumes_that_epoch(tiny_dataset, redis_url):
    loader = _loader(tiny_dataset, redis_url, job="resume")
    seen = []
    for k, (_, y) in enumerate(loader):
        seen += [int(i) for i in y]
        if k == 3:
            break
    state = loader.state_dict()
    assert state["epoch"] == 0 and state["batches"] == 4
    again = _loader(tiny_dataset, redis_url, job="resume")
    again.load_state_dict(state)
    rest = [int(i) for _, y in again for i in y]
    assert sorted(seen + rest) == list(range(N))
    _full_epoch(again)
