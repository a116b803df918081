"""Promised samples: a batch that must take samples another job is making (nothing else is
left in its epoch) waits in its worker for that job's copies instead of making them again, and
makes them itself when they do not come."""

import collections
import threading
import time

import pytest
import torch
from helpers.indexed import indexed
from torchvision.transforms import v2

from seneca import SenecaLoader
from seneca.pipeline import codec
from seneca.pipeline.transforms import default_train_transform

_N = 48


class _Slow(torch.nn.Module):
    """A transform step that takes a while per sample (48 samples: 1.4 s)."""

    def forward(self, x):
        time.sleep(0.03)
        return x


def _loader(root, url, job, slow=False):
    ds = indexed(root)
    ds.transform = v2.Compose(
        [*([_Slow()] if slow else []), *default_train_transform(16).transforms]
    )
    return SenecaLoader(
        ds, batch_size=_N, shuffle=True, num_workers=1, split=(0, 0, 1),
        cache=url, cache_size="20MB", job=job,
    )  # fmt: skip


def _pending(store):
    """How many samples are marked pending (this pin-lease bucket's mark and the one before)."""
    keys = store.keys.pending(store.now_ms() // store.pin_lease_ms)
    return sum(store.client.bitcount(k) for k in keys)


def _served(loader_or_batches):
    return collections.Counter(i for _, y in loader_or_batches for i in y.tolist())


@pytest.mark.parametrize("cache", ["server", "cluster"])
def test_a_promised_sample_comes_as_the_copy_the_other_job_made(
    tiny_dataset, cache, request, monkeypatch
):
    """(On a cluster the claim runs on the dataset's node, the copies are read from theirs.)"""
    redis_url = request.getfixturevalue("redis_proc" if cache == "server" else "redis_cluster").url
    monkeypatch.setattr("seneca.defaults.PROMISE_WAIT", 30.0)  # (a busy machine: never given up)
    maker = _loader(tiny_dataset, redis_url, "maker", slow=True)
    waiter = _loader(tiny_dataset, redis_url, "b", slow=True)  # (one transform: one view)
    maker.store.join("bystander")  # a job joins when it starts its epoch: one live before then
    made = []
    first = iter(maker)  # its worker decides the whole epoch, all misses, and makes it (1.4 s)
    thread = threading.Thread(target=lambda: made.extend(first))
    thread.start()
    deadline = time.monotonic() + 30
    while _pending(maker.store) < _N:
        assert time.monotonic() < deadline  # until the maker decided its batch: all pending
        time.sleep(0.01)
    got = _served(waiter)  # every sample promised: the maker's copies, once admitted
    thread.join(60)
    assert got == collections.Counter(range(_N)) == _served(made)
    stats = waiter.stats()
    assert stats["promised"] == stats["promises_kept"] == _N
    assert stats["decodes"] == 0 and stats["augmented"]["hits"] == _N, stats
    assert maker.stats()["decodes"] == _N


def test_a_promise_not_kept_is_made_from_storage_after_the_wait(
    tiny_dataset, redis_url, monkeypatch
):
    monkeypatch.setattr("seneca.defaults.PROMISE_WAIT", 0.5)
    loader = _loader(tiny_dataset, redis_url, "b")
    store = loader.store
    store.join("bystander")  # (a job alone marks no misses pending)
    store.join("ghost")  # a job that draws every sample as a miss and never offers one
    store.start_epoch("ghost", 0)
    assert len(store.decide("ghost", _N).indices) == _N
    start = time.monotonic()
    got = _served(loader)
    took = time.monotonic() - start
    assert got == collections.Counter(range(_N))  # every sample once all the same
    stats = loader.stats()
    assert stats["promised"] == _N and stats["promises_kept"] == 0 and stats["decodes"] == _N
    assert took >= 0.5  # it waited (and then made them: a wait without end would not return)


def test_a_batch_offers_what_it_made_before_it_waits_for_promises(tiny_dataset, redis_url):
    """At an epoch's end jobs promise each other what they are making: a batch that offered
    its own copies only once done waiting kept the other job waiting for them, and so waited
    for that job's copies in vain. Here "other" admits its copies once this batch's are in."""
    loader = _loader(tiny_dataset, redis_url, "b")
    store = loader.store
    store.join("bystander")  # (a job alone marks no misses pending)
    store.join("other")
    store.start_epoch("other", 0)
    theirs = store.decide("other", _N - 8).indices  # pending: made by "other"
    crop = codec.encode(torch.zeros((3, 16, 16), dtype=torch.uint8))
    copies = store.client

    def other():  # makes its samples once b's own copies are in the cache
        deadline = time.monotonic() + 30
        mine = [i for i in range(_N) if i not in theirs]
        while not all(copies.getbit(store.tier_key("augmented"), i) for i in mine):
            assert time.monotonic() < deadline
            time.sleep(0.005)
        store.admit("other", [(i, "augmented", store.charge(len(crop)), crop) for i in theirs])

    thread = threading.Thread(target=other, daemon=True)
    thread.start()
    got = _served(loader)  # one batch: the 8 others made here, the rest promised
    thread.join(10)
    assert got == collections.Counter(range(_N))
    stats = loader.stats()
    assert stats["promised"] == stats["promises_kept"] == _N - 8, stats
    assert stats["decodes"] == 8
