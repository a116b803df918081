"""Pending misses: a sample another live job decided as a miss and has not offered yet is put
off by the other jobs' decisions while they have other samples to draw, and comes later in
their epoch, promised when nothing else is left (its copy may be claimed once cached); offers
(and samples made but not offered) end it, a job alone marks nothing."""

import collections
import time

import pytest
from helpers.engine import pending

from ods.store import OdsStore


def make_store(redis_proc, n, **kw):
    kw.setdefault("capacity", {"encoded": n})
    kw.setdefault("seed", 1)
    return OdsStore(redis_proc.client, "ds", n, **kw)


def start(store, *jobs):
    for job in jobs:
        store.join(job)
        store.start_epoch(job, 0)


def test_another_jobs_pending_misses_come_last_in_an_epoch(redis_proc):
    n = 512
    store = make_store(redis_proc, n)
    start(store, "a", "b")
    a = store.decide("a", 64)
    assert not any(a.tiers) and pending(redis_proc, store) == set(a.indices)
    served = []
    while True:
        d = store.decide("b", 32)
        if not d.indices:
            break
        assert not any(d.tiers)  # nothing was offered: all misses
        # a's misses, drawn since nothing else was left, are promised: a is making them
        assert d.promised == set(d.indices) & set(a.indices)
        served.append(d.indices)
    flat = [i for batch in served for i in batch]
    assert sorted(flat) == list(range(n))  # b's epoch: every sample once
    # a's misses were drawn only once nothing else was left: b's last two batches
    assert set(flat[: n - 64]).isdisjoint(a.indices)
    assert set(flat[n - 64 :]) == set(a.indices)
    assert pending(redis_proc, store) == set(flat) | set(a.indices)


def test_an_offer_ends_the_pending_and_the_sample_comes_as_a_hit(redis_proc):
    n = 256
    store = make_store(redis_proc, n)
    start(store, "a", "b")
    a = store.decide("a", 32)
    assert pending(redis_proc, store) == set(a.indices)
    offered, made = a.indices[:20], a.indices[20:]
    store.admit("a", [(i, "encoded", 1, b"") for i in offered], made=made)
    assert pending(redis_proc, store) == set()
    d = store.decide("b", 32)  # the cached samples first
    assert set(d.indices) >= set(offered)
    assert all(t == "encoded" for i, t in zip(d.indices, d.tiers, strict=True) if i in offered)


def test_samples_made_and_not_offered_end_their_pending_through_the_outbox(redis_proc):
    store = make_store(redis_proc, 128)
    start(store, "a", "b")
    a = store.decide("a", 16)
    assert store.admit("a", [], wait=False, made=a.indices) == []
    store.outbox.settle()  # the call was sent at once; its reply read now
    assert pending(redis_proc, store) == set()


def test_a_job_alone_marks_no_misses_pending(redis_proc):
    store = make_store(redis_proc, 128)
    start(store, "a")
    assert not any(store.decide("a", 16).tiers)
    assert pending(redis_proc, store) == set()
    start(store, "b")  # now two: b's misses are pending for a
    b = store.decide("b", 16)
    assert pending(redis_proc, store) == set(b.indices)


def test_the_pending_of_a_job_that_never_offers_lapses(redis_proc):
    store = make_store(redis_proc, 128, pin_lease=0.2)
    start(store, "a", "b")
    a = store.decide("a", 16)
    assert pending(redis_proc, store) == set(a.indices)
    time.sleep(0.5)  # two pin leases: the bucket's key expired
    assert pending(redis_proc, store) == set()


@pytest.mark.parametrize("lead, most", [(1, 10), (2, 170)])
def test_with_decisions_ahead_every_epoch_is_exactly_once_with_few_repeated_misses(
    redis_proc, lead, most
):
    """Three jobs each deciding ``lead`` batches ahead of their admissions (a loader's lookahead,
    or its workers): every epoch is exactly once, and few samples are drawn as a miss by more
    than one job (without pending misses: 127 with a lead of 1, 242 with 2)."""
    n, batch = 1024, 32
    store = make_store(redis_proc, n, capacity={"augmented": n // 4}, view="v")
    jobs = ["a|v", "b|v", "c|v"]
    start(store, *jobs)
    ahead = {j: collections.deque() for j in jobs}
    served = {j: collections.Counter() for j in jobs}
    missed = collections.Counter()
    active = set(jobs)
    while active:
        for j in sorted(active):
            d = store.decide(j, batch)
            if d.indices:
                served[j].update(d.indices)
                missed.update(i for i, t in zip(d.indices, d.tiers, strict=True) if not t)
                ahead[j].append(d)
            else:
                active.discard(j)
            while ahead[j] and (len(ahead[j]) > lead or not d.indices):
                old = ahead[j].popleft()
                store.release(j, old)
                misses = [i for i, t in zip(old.indices, old.tiers, strict=True) if not t]
                store.admit(j, [(i, "augmented", 1, b"") for i in misses])
    for j in jobs:
        assert served[j] == collections.Counter(range(n))
    repeated = sum(1 for c in missed.values() if c > 1)
    assert repeated <= most, repeated


@pytest.mark.parametrize("policy", ["seneca", "paper"])
def test_a_promised_sample_is_claimed_once_its_copy_is_cached(redis_proc, policy):
    n = 64
    store = make_store(redis_proc, n, capacity={"augmented": n}, policy=policy, values=True)
    r = redis_proc.client
    start(store, "a", "b")
    a = store.decide("a", 32)
    b1 = store.decide("b", 32)  # the samples a is not making
    assert set(b1.indices).isdisjoint(a.indices) and not b1.promised
    b2 = store.decide("b", 32)  # nothing else left: a's, promised
    assert set(b2.indices) == set(a.indices) == b2.promised and not any(b2.tiers)
    assert pending(redis_proc, store) == set(a.indices) | set(b1.indices)  # b2's not again
    promised = sorted(b2.promised)
    assert store.claim("b", [], promised) == ([], promised)  # nothing cached, a is making all
    offered = a.indices[:20]
    store.admit("a", [(i, "augmented", 1, b"x") for i in offered], made=a.indices[20:])
    assert all(r.exists(store.keys.value("augmented", i)) for i in offered)
    # an admitted copy whose value is not in place yet (a read just before its rename) is
    # still worth waiting for
    assert store.claim("b", [], offered[:1]) == ([], offered[:1])
    got, still = store.claim("b", offered, sorted(a.indices[20:]))
    assert sorted(got) == sorted(offered) and still == []  # a made the rest without offering
    assert store.claim("b", offered) == ([], [])  # used: never claimed twice
    store.outbox.settle()
    # seneca: a made the copies and b used them, every live job has, so they went; paper: a
    # copy goes once hit by as many jobs as are live (b's claim is one hit)
    kept = [r.exists(store.keys.value("augmented", i)) for i in offered]
    assert kept == [policy == "paper"] * len(offered)
    if policy == "paper":  # b's claim counted as a hit of each copy
        refs = r.get(store.keys.meta + "ref") or b""
        assert [refs[i] if i < len(refs) else 0 for i in offered] == [1] * len(offered)
    stats = r.hget(store.keys.job(store.keys.job_name("b"))[0], "hits")
    assert int(stats) == 20  # counted as b's hits
