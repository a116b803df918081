"""Batches decided when their worker starts them and made in their slots: batches that mix
hits and misses keep their decided order, labels, exactly-once and stats with 0, 1 and 2
workers; without workers, the next batch's hits are read ahead; on a real redis-server."""

import functools

import pytest
import torch
from helpers import opaque
from helpers.pools import checked_out
from helpers.waiting import wait_for
from torch.utils.data import default_collate
from torchvision.datasets import ImageFolder
from torchvision.transforms import v2

from ods import routing
from seneca import SenecaLoader

DET = v2.Compose(
    [
        opaque.Resize((20, 28), antialias=True),
        v2.PILToTensor(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize([0.5, 0.5, 0.5], [0.25, 0.25, 0.25]),
    ]
)
HITS = 20  # augmented copies another job made: 2 batches of hits, then one mixed (4 + 4)


def _indexed(root):
    ds = ImageFolder(str(root), transform=DET)
    ds.samples = [(path, i) for i, (path, _) in enumerate(ds.samples)]
    return ds


def _with_copies(ds, url):
    """Job ``a`` makes augmented copies of HITS samples while job ``b`` is live (a job makes
    copies only for others); both stay live."""
    opts = {"cache": url, "split": (0, 0, 1), "shuffle": True}
    a = SenecaLoader(ds, batch_size=5, job="a", **opts)
    b = SenecaLoader(ds, batch_size=8, job="b", **opts)
    next(iter(b))
    it = iter(a)
    for _ in range(HITS // 5):
        next(it)
    assert a.stats()["augmented"]["admitted"] == HITS
    return a, b, it


def _reader(ds, url, workers, **kwargs):
    """Job c over the cache at ``url``: batches of 8 from ODS, augmented tier only."""
    return SenecaLoader(
        ds, batch_size=8, shuffle=True, job="c", cache=url, split=(0, 0, 1),
        num_workers=workers, **kwargs,
    )  # fmt: skip


def _mgets(client) -> int:
    """The MGET calls the server has run since its statistics were reset."""
    return client.info("commandstats").get("cmdstat_mget", {}).get("calls", 0)


def _check_epoch(ds, loader):
    seen = []
    for x, y in loader:
        want = default_collate([DET(ds.loader(ds.samples[int(i)][0])) for i in y])
        assert x.dtype == torch.float32 and torch.equal(x, want)  # each row is its label's
        seen += y.tolist()
    assert sorted(seen) == list(range(len(ds)))  # every sample once
    return seen


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_batches_mixing_hits_and_misses(tiny_dataset, redis_proc, workers):
    ds = _indexed(tiny_dataset)
    keep = _with_copies(ds, redis_proc.url)
    c = _reader(ds, redis_proc.url, workers, persistent_workers=workers > 0)
    _check_epoch(ds, c)
    stats = c.stats()
    assert ("slots" in stats) == (workers > 0)
    assert stats["samples"] == len(ds) and stats["augmented"]["hits"] == HITS
    assert stats["decodes"] == len(ds) - HITS
    assert ("in_workers" in stats) == (workers > 0)
    if workers:  # every hit read and every decode made in a worker: none in the loop's process
        worked = stats["in_workers"]
        assert worked["decodes"] == len(ds) - HITS and worked["augmented"]["hits"] == HITS
        # every batch a worker's part; those decided once the first batch merged gave the
        # slots their layout were made in their slot (as timing has it, maybe none), and in
        # the next epoch every one
        assert stats["slots"]["batches"] == len(ds) // 8
        c.reset_stats()
        _check_epoch(ds, c)
        slots = c.stats()["slots"]
        assert slots["in_slots"] == slots["batches"] == len(ds) // 8
        assert slots["without_slot"] == 0
    c.close()
    del keep


@pytest.mark.parametrize("context", ["fork", "forkserver"])
@pytest.mark.slow
def test_persistent_workers_make_batches_in_slots_after_an_epoch_cut_short(
    tiny_dataset, redis_proc, context
):
    """An epoch cut short leaves parts in flight, dropped with their slots lent; the next
    iteration makes new slots, and whole epochs keep them: every batch as read, every sample
    once, every part made in its batch's slot."""
    ds = _indexed(tiny_dataset)
    keep = _with_copies(ds, redis_proc.url)
    c = _reader(ds, redis_proc.url, 2, persistent_workers=True, multiprocessing_context=context)
    # a whole epoch first: its first batch merged gives the slots their layout, so that every
    # batch of the next iteration is decided with a slot (in the first, only those decided
    # after that merge are, as timing has it)
    _check_epoch(ds, c)
    c.reset_stats()
    for k, _ in enumerate(c):
        if k == 1:
            break  # cut short: the batches in flight hold their slots
    slots = c.stats()["slots"]
    assert slots["in_slots"] == slots["batches"] >= 2 and slots["without_slot"] == 0
    made = []
    for _ in range(2):
        c.reset_stats()
        _check_epoch(ds, c)
        stats = c.stats()
        assert stats["augmented"]["hits"] == 0  # this job has used the copies made for it
        assert stats["slots"]["batches"] == stats["slots"]["in_slots"] == len(ds) // 8
        assert stats["slots"]["without_slot"] == 0
        made.append(stats["slots"]["memory"])
    # a set of slots more after the cut when some were still lent then (as timing has it),
    # none after a whole epoch
    assert made[0] in (0, 1) and made[1] == 0
    c.close()
    del keep


def test_hits_found_gone_are_made_by_the_worker(tiny_dataset, redis_proc):
    """Every copy deleted after it was cached: the decided hits are found gone and made by the
    worker from storage, in their rows as the misses are."""
    ds = _indexed(tiny_dataset)
    keep = _with_copies(ds, redis_proc.url)
    store = keep[0].store
    gone = [store.value_key("augmented", i) for i in range(len(ds))]
    redis_proc.client.unlink(*gone)
    c = _reader(ds, redis_proc.url, 1)
    _check_epoch(ds, c)
    stats = c.stats()
    assert stats["ods_gone"] == HITS and stats["augmented"]["hits"] == 0
    assert stats["decodes"] == stats["in_workers"]["decodes"] == len(ds)
    c.close()
    del keep


@pytest.mark.slow
def test_hits_and_misses_out_of_order_from_forkserver_workers(tiny_dataset, redis_proc):
    ds = _indexed(tiny_dataset)
    keep = _with_copies(ds, redis_proc.url)
    c = _reader(ds, redis_proc.url, 2, in_order=False, multiprocessing_context="forkserver")
    _check_epoch(ds, c)
    assert c.stats()["augmented"]["hits"] == HITS
    del keep


def test_a_custom_collate_keeps_every_sample_in_the_workers(tiny_dataset, redis_proc):
    ds = _indexed(tiny_dataset)
    keep = _with_copies(ds, redis_proc.url)
    c = _reader(ds, redis_proc.url, 1, collate_fn=default_collate)
    _check_epoch(ds, c)
    stats = c.stats()
    assert "slots" not in stats  # no slots: the batches are the collate function's
    assert stats["in_workers"]["augmented"]["hits"] == stats["augmented"]["hits"] == HITS
    del keep


def _all_copied(ds, url):
    """Augmented copies of every sample, made by job ``a`` while ``b`` is live."""
    a, b, it = _with_copies(ds, url)
    for _ in it:
        pass
    assert a.stats()["augmented"]["admitted"] == len(ds)
    return a, b


def test_without_workers_the_next_batchs_hits_are_read_ahead(tiny_dataset, redis_proc):
    """A job the cache covers knows its next batch while it makes one, also when that batch
    comes from a decision posted early (collected for it): the server has read that batch's
    values (MGET) before the batch is asked for, for every batch but the first, and every
    batch is as read."""
    ds = _indexed(tiny_dataset)
    keep = _all_copied(ds, redis_proc.url)
    c = _reader(ds, redis_proc.url, 0)
    redis_proc.client.config_resetstat()

    mgets = functools.partial(_mgets, redis_proc.client)

    ahead, seen = [], []
    for k, (x, y) in enumerate(c):
        # a read ahead is sent before the next batch is asked for; on a loaded machine the
        # server may run it a moment after this batch arrived: wait for it (after the last
        # batch there is none to wait for)
        if k < len(c) - 1:
            wait_for(lambda k=k: mgets() >= k + 2, f"batch {k + 1}'s values read ahead")
        ahead.append(mgets() - (k + 1))  # the reads sent beyond the batches received
        want = default_collate([DET(ds.loader(ds.samples[int(i)][0])) for i in y])
        assert torch.equal(x, want)
        seen += y.tolist()
    assert sorted(seen) == list(range(len(ds))) and c.stats()["augmented"]["hits"] == len(ds)
    assert ahead == [1] * (len(ahead) - 1) + [0], ahead
    c.close()
    del keep


def test_reads_ahead_whose_batch_does_not_come_are_dropped(tiny_dataset, redis_proc):
    ds = _indexed(tiny_dataset)
    keep = _all_copied(ds, redis_proc.url)
    c = _reader(ds, redis_proc.url, 0)
    redis_proc.client.config_resetstat()

    mgets = functools.partial(_mgets, redis_proc.client)

    for k, _ in enumerate(c):  # a loop cut short with the next batch's values read ahead
        if k == 1:
            break
    wait_for(lambda: mgets() >= 3, "the third batch's values read ahead of two batches")
    assert mgets() == 3
    _check_epoch(ds, c)  # a new epoch: every sample once, each batch as read, not as read ahead
    pool = c.store.client.connection_pool
    # every connection went back to the pool or is kept for the next round trips, in step
    assert checked_out(pool) == set(routing.kept(pool))
    c.close()
    del keep


def test_a_last_smaller_batch_is_made_in_its_slot_too(tiny_dataset, redis_proc):
    """Batches of 10 of 48 samples: the last has 8 rows of its slot; every batch as read, every
    sample once, in both epochs (the second with the slots made in the first)."""
    ds = _indexed(tiny_dataset)
    keep = _with_copies(ds, redis_proc.url)
    c = SenecaLoader(
        ds, batch_size=10, shuffle=True, job="c", cache=redis_proc.url, split=(0, 0, 1),
        num_workers=2, persistent_workers=True,
    )  # fmt: skip
    for _ in range(2):
        sizes = [len(y) for _, y in c]
        assert sorted(sizes) == [8, 10, 10, 10, 10]
    for _ in range(2):
        _check_epoch(ds, c)
    slots = c.stats()["slots"]
    assert slots["in_slots"] >= 1 and slots["memory"] == 1
    c.close()
    del keep
