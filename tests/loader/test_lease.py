"""A job is live while its loader exists: its lease is renewed however long a training step or
a validation pass takes, and lapses only once the loader is closed or collected, or its process
dies."""

import gc
import time
import weakref

import redis
from helpers.indexed import indexed

from ods.store import OdsStore
from seneca import SenecaLoader
from seneca.loader._lease import LeaseKeeper, keeper


def _live(store):
    return store.refresh_jobs()


def test_a_job_stays_live_through_steps_longer_than_its_lease(tiny_dataset, redis_url, monkeypatch):
    monkeypatch.setattr("ods.defaults.JOB_LEASE", 0.8)
    ds = indexed(tiny_dataset)
    train = SenecaLoader(ds, batch_size=8, shuffle=True, cache=redis_url, cache_size="20MB")
    check = SenecaLoader(ds, batch_size=8, cache=redis_url, cache_size="20MB", job="val")
    store = train.store
    name = store.keys.job_name(train.job)
    before = keeper().renewals
    for k, _ in enumerate(train):
        if k == 1:
            time.sleep(2.0)  # a slow step: two and a half leases without a call
            assert name in _live(store)
            for _ in check:  # a validation pass in between
                time.sleep(0.1)
            assert name in _live(store)
    assert keeper().renewals - before >= 3  # measured: renewed while it made no call
    time.sleep(1.6)  # training over, the loader still exists: still live
    assert name in _live(store)
    train.close()
    assert name not in _live(store)  # closing leaves at once
    check.close()


def test_a_collected_loader_stops_renewing_and_lapses(tiny_dataset, redis_url, monkeypatch):
    monkeypatch.setattr("ods.defaults.JOB_LEASE", 0.8)
    ds = indexed(tiny_dataset)
    loader = SenecaLoader(
        ds, batch_size=8, shuffle=True, cache=redis_url, cache_size="20MB", job="named"
    )
    store = loader.store
    name = store.keys.job_name("named")
    next(iter(loader))
    time.sleep(1.6)
    assert name in _live(store) and "named" in keeper().held()
    del loader
    gc.collect()
    assert "named" not in keeper().held()
    time.sleep(1.2)  # a named job keeps its state to resume, but no longer counts as live
    assert name not in _live(store)
    assert store.client.exists(store.keys.jobs)  # its entry stays, lapsed


class _Cyclic:
    """Garbage only the cycle collector frees, as a loader can be."""

    def __init__(self):
        self.me = self


class _CollectingStore(OdsStore):
    """A store whose lease, when the keeper's thread reads it (holding the keeper's lock),
    sets off a collection until the loader is collected: its finalizer then runs in that
    thread, under that lock, as one ran when a collection happened to start there. (A
    collection per read after that would only slow the renewals down on a busy machine, until
    a lease lapsed.)"""

    collecting = True

    @property
    def lease_ms(self):
        if self.collecting:
            gc.collect()
        return self._lease_ms

    @lease_ms.setter
    def lease_ms(self, value):
        self._lease_ms = value


def test_a_loader_collected_inside_the_keepers_own_work_leaves_without_hanging_it(redis_proc):
    client = redis.Redis.from_url(redis_proc.url)
    store = _CollectingStore(client, "busy", 64, lease=2.0)
    keeper_ = LeaseKeeper()
    alive = keeper_.keep(store, "alive", leave=True)
    store.join("alive")
    owner = _Cyclic()
    store.join("collected")
    weakref.finalize(owner, keeper_.collected, keeper_.keep(store, "collected", leave=True))
    weakref.finalize(owner, setattr, store, "collecting", False)
    before = keeper_.renewals
    gc.disable()  # no collection in this thread: the keeper's thread collects the loader,
    try:  # on its next look at the lease
        del owner
        deadline = time.monotonic() + 15  # (a collection per look is slow on a busy machine)
        while store.keys.job_name("collected") in _live(store) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        gc.enable()
    assert store.keys.job_name("collected") not in _live(store)  # it left
    deadline = time.monotonic() + 15
    while keeper_.renewals - before < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert keeper_.renewals - before >= 2  # measured: the keeper's thread goes on renewing
    assert store.keys.job_name("alive") in _live(store)
    keeper_.close(alive)
    assert keeper_.held() == [] and _live(store) == []
