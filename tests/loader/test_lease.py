"""A job is live while its loader exists: its lease is renewed however long a training step or
a validation pass takes, and lapses only once the loader is closed or collected, or its process
dies."""

import gc
import os
import subprocess
import sys
import time
import weakref

import pytest
import redis
from helpers import warm
from helpers.indexed import indexed

from ods.store import OdsStore
from seneca import SenecaLoader
from seneca.errors import JobInUseError
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
    # a named job keeps its state to resume, but its lease ends at once: it no longer counts
    assert name not in _live(store)
    assert store.client.exists(store.keys.jobs)  # its entry stays, lapsed


def _epoch(loader):
    targets = [int(t) for _, y in loader for t in y]
    assert sorted(targets) == list(range(48))  # every sample once


#: a lease far longer than the test: a run that waited for one to run out would not end in time
_LONG_LEASE = 600.0
#: the deadline of runs that do not wait for a lease (a second or two here, loaded or not)
_AT_ONCE = 60.0


def test_a_loader_made_again_under_its_name_starts_at_once(tiny_dataset, redis_url, monkeypatch):
    """A sweep in one script, or a loader made per epoch: each new loader under the name is a
    new run, with whole epochs, and does not wait for the lease of the one it replaces (it may
    look again once, while this process's keeper ends that lease)."""
    monkeypatch.setattr("ods.defaults.JOB_LEASE", _LONG_LEASE)
    loader = None
    for _ in range(3):
        loader = SenecaLoader(
            indexed(tiny_dataset), batch_size=8, shuffle=True, cache=redis_url,
            cache_size="20MB", job="sweep",
        )  # fmt: skip
        started = time.monotonic()
        _epoch(loader)  # (the loader it replaced is collected by now)
        _epoch(loader)
        took = time.monotonic() - started
        assert took < _AT_ONCE, f"{took:.0f} s: it waited for the replaced loader's lease"


def test_a_loader_takes_the_name_over_from_one_this_process_keeps(
    tiny_dataset, redis_url, monkeypatch
):
    """A sweep in one script that keeps its old loaders (a trainer kept with its results): the
    new run under the name starts at once, with whole epochs."""
    monkeypatch.setattr("ods.defaults.JOB_LEASE", _LONG_LEASE)
    ds = indexed(tiny_dataset)
    kw = {"batch_size": 8, "shuffle": True, "cache": redis_url, "cache_size": "20MB"}
    kept = SenecaLoader(ds, job="kept", **kw)
    _epoch(kept)
    started = time.monotonic()
    _epoch(SenecaLoader(ds, job="kept", **kw))
    took = time.monotonic() - started
    assert took < _AT_ONCE, f"{took:.0f} s: it waited for the kept loader's lease"


HOLDER = """
import sys, time
sys.path[:0] = {paths!r}
import ods.defaults
ods.defaults.JOB_LEASE = 0.8
from helpers.indexed import indexed
from seneca import SenecaLoader
loader = SenecaLoader(indexed({root!r}), batch_size=8, shuffle=True, cache={url!r},
                      cache_size="20MB", job="taken")
next(iter(loader))
print("holding", flush=True)
time.sleep(120)
"""


@pytest.mark.slow
def test_a_name_another_process_runs_under_is_refused(tiny_dataset, redis_url, monkeypatch):
    monkeypatch.setattr("ods.defaults.JOB_LEASE", 0.8)
    paths = [os.path.join(os.path.dirname(__file__), ".."), os.getcwd()]
    code = HOLDER.format(paths=paths, root=str(tiny_dataset), url=redis_url)
    holder = warm.popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    ds = indexed(tiny_dataset)
    kw = {"batch_size": 8, "shuffle": True, "cache": redis_url, "cache_size": "20MB"}
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(JobInUseError, match="job='taken': another loader of this dataset"):
            next(iter(SenecaLoader(ds, job="taken", **kw)))
    finally:
        holder.kill()  # killed: its lease is left to run out
        holder.wait()
    _epoch(SenecaLoader(ds, job="taken", **kw))  # once it has, the name is free


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
