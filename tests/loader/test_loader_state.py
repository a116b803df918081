"""SenecaLoader.state_dict / load_state_dict: stop mid-epoch, resume (also in a new process),
and the epoch still delivers every sample exactly once."""

import collections
import multiprocessing as mp

import pytest
from helpers.indexed import indexed
from helpers.resume import through_resumes

from seneca import SenecaLoader
from seneca_base.errors import ConfigError


def loader_for(root, url, job, workers=2):
    return SenecaLoader(
        indexed(root),
        batch_size=6,
        shuffle=True,
        num_workers=workers,
        cache=url,
        cache_size="20MB",
        job=job,
    )


def first_batches(loader, k):
    got = collections.Counter()
    it = iter(loader)
    for _ in range(k):
        got.update(int(i) for i in next(it)[1])
    return got, loader.state_dict()


def resumable(root, url, job, workers):
    """``through_resumes``'s ``start``: a new loader of ``job``, resumed from a state."""

    def start(state):
        loader = loader_for(root, url, job, workers)
        if state is not None:
            loader.load_state_dict(state)
        return loader, ([int(i) for i in y] for _, y in loader)

    return start


@pytest.mark.parametrize(
    ("workers", "stops"),
    [(2, [0]), (2, [1]), (2, [4]), (2, [7]), (2, [2, 3, 1]), (0, [1, 0, 5]), (0, [3, 3])],
)
def test_resume_at_midpoints(tiny_dataset, redis_url, workers, stops):
    job = f"resume-{workers}-{'-'.join(map(str, stops))}"
    together, last = through_resumes(resumable(tiny_dataset, redis_url, job, workers), stops)
    assert set(together) == set(range(48)) and max(together.values()) == 1
    assert last.state_dict()["epoch"] == 1  # the epoch completed
    # the next epoch is a full one again
    assert sum(len(y) for _, y in last) == 48


def _resume_elsewhere(root, url, state, out):
    # no workers: a spawned process's workers are spawned too, each importing torch again (the
    # state resumed with workers: the tests above)
    loader = loader_for(root, url, "elsewhere", workers=0)
    loader.load_state_dict(state)
    out.put([int(i) for _, y in loader for i in y])


@pytest.mark.slow
def test_resume_in_a_new_process_and_twice(tiny_dataset, redis_url):
    loader = loader_for(tiny_dataset, redis_url, "elsewhere")
    before, state = first_batches(loader, 3)
    # a second checkpoint after a first resume still counts everything consumed before
    again = loader_for(tiny_dataset, redis_url, "elsewhere")
    again.load_state_dict(state)
    it = iter(again)
    middle = collections.Counter(int(i) for i in next(it)[1])
    state = again.state_dict()
    assert state["batches"] == 1 and sum(bin(b).count("1") for b in state["consumed"]) == 24
    del it, again
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_resume_elsewhere, args=(str(tiny_dataset), redis_url, state, out))
    proc.start()
    after = collections.Counter(out.get(timeout=120))
    proc.join(timeout=60)
    together = before + middle + after
    assert set(together) == set(range(48)) and max(together.values()) == 1


def test_a_loader_without_ods_saves_no_position_and_starts_its_epoch_over(tiny_dataset, redis_url):
    """What a framework that saves every loader's state does (Lightning's checkpoints): a
    loader without ODS (in order here) has no position to save, so its state is empty, and
    restored, its epoch starts over, as DataLoader's (which has no state) does."""
    loader = SenecaLoader(indexed(tiny_dataset), batch_size=6, cache=redis_url)  # no ODS
    it = iter(loader)
    next(it)
    assert loader.state_dict() == {}
    again = SenecaLoader(indexed(tiny_dataset), batch_size=6, cache=redis_url)
    again.load_state_dict(loader.state_dict())
    assert [int(i) for _, y in again for i in y] == list(range(48))
    ods = loader_for(tiny_dataset, redis_url, "from-empty", workers=0)
    ods.load_state_dict({})  # saved by a loader without ODS: nothing to continue
    assert sorted(int(i) for _, y in ods for i in y) == list(range(48))
    with pytest.raises(ConfigError, match="no ODS batches to continue"):
        again.load_state_dict(ods.state_dict())


def test_state_errors(tiny_dataset, redis_url):
    ods = loader_for(tiny_dataset, redis_url, "bad", workers=0)
    with pytest.raises(ConfigError, match="not a SenecaLoader state"):
        ods.load_state_dict({"epoch": 0})
    with pytest.raises(ConfigError, match="another size"):
        ods.load_state_dict({"epoch": 0, "batches": 1, "consumed": b"\xff"})
