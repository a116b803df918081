"""Spending copies first: under the ``seneca`` policy a decision serves first the cached copies
the other live jobs need least, so that copies only the deciding job needs are used up (and
their room freed) while the ones other jobs still need stay for them; ``paper`` serves cached
copies at random. Either way each job's epoch is every sample once."""

import pytest

from ods.store import OdsStore


def make_store(redis_proc, n, policy):
    return OdsStore(redis_proc.client, "ds", n, capacity={"encoded": n}, seed=3, policy=policy)


def served_until(store, job, count, batch=32):
    """Decide batches of ``job`` (nothing offered: misses) until it was served ``count``."""
    out = []
    while len(out) < count:
        out += store.decide(job, batch).indices
    return out


def an_epoch_after(store, job, first):
    """The rest of ``job``'s epoch after ``first``, its samples in order."""
    out = list(first)
    while d := store.decide(job, 32).indices:
        out += d
    return out


@pytest.mark.parametrize("policy", ["seneca", "paper"])
def test_a_decision_serves_first_the_copies_other_jobs_no_longer_need(redis_proc, policy):
    n = 512
    store = make_store(redis_proc, n, policy)
    for job in ("a", "b"):
        store.join(job)
        store.start_epoch(job, 0)
    b_served = set(served_until(store, "b", 384))  # b needs 128 samples still
    store.admit("b", [(i, "encoded", 1, b"") for i in range(n)])  # every sample cached
    d = store.decide("a", 32)
    assert all(t == "encoded" for t in d.tiers)
    in_b = len(set(d.indices) & b_served)
    if policy == "seneca":
        # 384 of the 512 copies are samples b was served, which b needs no more: a takes 32
        assert in_b == 32
    else:  # at random: about 24 of 32 (all 32 with probability 1e-4)
        assert 12 <= in_b < 32
    epoch = an_epoch_after(store, "a", d.indices)
    assert sorted(epoch) == list(range(n))


def test_a_job_that_joins_is_weighed_from_the_next_decision_on(redis_proc):
    n = 256
    store = make_store(redis_proc, n, "seneca")
    other = make_store(redis_proc, n, "seneca")  # another process, whose job joins later
    store.join("a")
    store.start_epoch("a", 0)
    store.admit("a", [(i, "encoded", 1, b"") for i in range(n)])
    store.decide("a", 32)  # a alone: the live jobs as this store declares them
    other.join("c")
    other.start_epoch("c", 0)
    c_served = set(served_until(other, "c", 224))  # c needs 32 samples still
    # the store declares the live jobs it saw last (only a): the call is made again with c
    d = store.decide("a", 32)
    assert all(t == "encoded" for t in d.tiers)
    assert set(d.indices) <= c_served


def test_the_copies_no_other_job_needs_are_found_among_all_of_c_not_among_candidates(redis_proc):
    n = 4_096
    store = make_store(redis_proc, n, "seneca")
    for job in ("a", "b"):
        store.join(job)
        store.start_epoch(job, 0)
    b_served = set(served_until(store, "b", 64))  # b needs all but 64 samples
    store.admit("b", [(i, "encoded", 1, b"") for i in range(n)])  # every sample cached
    d = store.decide("a", 48)
    assert all(t == "encoded" for t in d.tiers)
    # 4 x 48 candidates drawn at random (as decisions once did) would hold about 3 of the 64
    # copies b no longer needs; a takes 48 of those 64, found among all of C
    assert set(d.indices) <= b_served
    epoch = an_epoch_after(store, "a", d.indices)
    assert sorted(epoch) == list(range(n))
