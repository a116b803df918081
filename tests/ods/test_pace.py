"""Pace: an admission over budget weighs each job's demand by how soon it takes a copy it
needs (``pace`` in ``ods/keys.py``), so that of two copies each needed by one job, the one a
slow job needs is evicted first; a job that leaves takes its pace with it."""

import random

from ods.store import OdsStore


def joined(redis_proc, n, capacity, *jobs):
    store = OdsStore(redis_proc.client, "ds", n, capacity={"encoded": capacity}, seed=5)
    for job in jobs:
        store.join(job)
        store.start_epoch(job, 0)
    return store


def test_a_copy_a_slow_job_needs_is_evicted_before_one_a_fast_job_needs(redis_proc):
    n, copies = 4096, 8
    store = joined(redis_proc, n, 2 * copies, "fast", "slow", "offers")
    served = {"fast": set(), "slow": set()}
    for _ in range(12):  # four decisions of the fast job to each of the slow job's
        for job in ("fast", "fast", "fast", "fast", "slow"):
            served[job].update(store.decide(job, 4).indices)
    only_slow = sorted(served["fast"] - served["slow"])[:copies]  # the fast job was served them
    only_fast = sorted(served["slow"] - served["fast"])[:copies]
    store.admit("offers", [(i, "encoded", 1, b"") for i in only_slow + only_fast])
    assert store.usage()["encoded"] == 2 * copies  # the budget is full
    unserved = sorted(set(range(n)) - served["fast"] - served["slow"])
    offered = random.Random(1).sample(unserved, copies)  # every job needs them
    # (one call: its candidates are the whole tier, a window of per offer x offers entries)
    assert store.admit("offers", [(i, "encoded", 1, b"") for i in offered]) == [1] * copies
    assert store.cached("encoded", only_fast) == [True] * copies
    assert store.cached("encoded", only_slow) == [False] * copies


def test_equally_paced_jobs_weigh_alike(redis_proc):
    """With the two jobs at one pace, the copies each needs are evicted alike: some of each."""
    n, copies = 4096, 32
    store = joined(redis_proc, n, 2 * copies, "one", "two", "offers")
    served = {"one": set(), "two": set()}
    for _ in range(24):
        for job in ("one", "two"):
            served[job].update(store.decide(job, 4).indices)
    only_two = sorted(served["one"] - served["two"])[:copies]
    only_one = sorted(served["two"] - served["one"])[:copies]
    store.admit("offers", [(i, "encoded", 1, b"") for i in only_two + only_one])
    unserved = sorted(set(range(n)) - served["one"] - served["two"])
    offered = random.Random(2).sample(unserved, copies)
    assert store.admit("offers", [(i, "encoded", 1, b"") for i in offered]) == [1] * copies
    kept = sum(store.cached("encoded", only_one)), sum(store.cached("encoded", only_two))
    assert sum(kept) == copies  # as many evicted as admitted; each side lost some
    assert 0 < kept[0] < copies and 0 < kept[1] < copies


def test_a_job_that_leaves_takes_its_pace_with_it(redis_proc):
    store = joined(redis_proc, 256, 64, "a", "b")
    for _ in range(3):
        store.decide("a", 4)
        store.decide("b", 4)
    pace = redis_proc.client.hgetall(store.keys.pace)
    assert {b"t:a", b"g:a", b"c:a", b"t:b", b"g:b"} <= set(pace)
    assert int(pace[b"ticks"]) == 6 and float(pace[b"g:a"]) == 2.0
    store.leave("b")
    assert not [f for f in redis_proc.client.hkeys(store.keys.pace) if f.endswith(b":b")]
