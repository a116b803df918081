"""Misses swapped late: a batch's misses not yet made are served as copies other jobs cached
after it was decided; the misses replaced come later in the epoch, every sample still once;
none is put back once the epoch has been served; on a real redis-server."""

import collections
import itertools

from helpers.engine import on_a_server, pending
from hypothesis import given
from hypothesis import strategies as st

from ods.decision import Pick
from ods.store import OdsStore

N = 64
CAPACITY = {"augmented": N, "decoded": 0, "encoded": 0}


def _store(redis_proc, name="sw"):
    store = OdsStore(redis_proc.client, name, N, capacity=CAPACITY, seed=5)
    for job in ("a", "b"):
        store.join(job)
        store.start_epoch(job, 0)
    return store


def _cache(store, job, decision):
    """``job`` makes the misses of ``decision`` and offers their crops."""
    store.release(job, decision)
    misses = [i for i, t in zip(decision.indices, decision.tiers, strict=True) if t is None]
    assert store.admit(job, [(i, "augmented", 1, b"") for i in misses]) == [1] * len(misses)
    return misses


def test_misses_not_yet_made_are_served_as_copies_cached_since(redis_proc):
    store = _store(redis_proc)
    a, b = store.decide("a", 8), store.decide("b", 8)
    assert not any(b.tiers)  # nothing cached yet: all misses
    made = _cache(store, "a", a)
    picks = store.swap("b", 0, b.indices[2:])
    assert len(picks) == 6 and {p.index for p in picks} <= set(made)
    assert all(p.tier == "augmented" for p in picks)
    back = b.indices[2 : 2 + len(picks)]
    assert not set(back) & pending(redis_proc, store)  # nobody makes them now
    assert set(b.indices[:2]) <= pending(redis_proc, store)
    # b's epoch: its batch as swapped, then the rest, every sample once
    served = collections.Counter(b.indices[:2] + [p.index for p in picks])
    store.release("b", picks)
    while d := store.decide("b", 16):
        if not d.indices:
            break
        served.update(d.indices)
        store.release("b", d)
    assert served == collections.Counter(range(N))
    used = redis_proc.client.hgetall(store.keys.meta + "used")
    assert int(used[b"served"]) == 8 + N  # a's batch and b's epoch: a swapped sample counted once


def test_as_many_as_the_cache_holds_are_swapped(redis_proc):
    store = _store(redis_proc)
    a = store.decide("a", 3)
    b = store.decide("b", 8)
    _cache(store, "a", a)
    picks = store.swap("b", 0, b.indices)
    assert sorted(p.index for p in picks) == sorted(a.indices)
    assert store.swap("b", 0, b.indices[3:]) == []  # nothing more cached


def test_nothing_is_put_back_once_the_epoch_is_served(redis_proc):
    store = _store(redis_proc)
    a = store.decide("a", 8)
    b = store.decide("b", N)  # b's whole epoch, decided
    assert len(b.indices) == N and store.decide("b", 1).indices == []
    _cache(store, "a", a)
    rest = [i for i in b.indices if i not in a.indices]
    assert store.swap("b", 0, rest) == []


def test_a_swap_for_an_epoch_long_over_serves_nothing(redis_proc):
    store = _store(redis_proc)
    a, b = store.decide("a", 8), store.decide("b", 8)
    _cache(store, "a", a)
    for epoch in (1, 2):
        store.start_epoch("b", epoch)
    assert store.swap("b", 0, b.indices) == []


_ids = itertools.count()
_op = st.tuples(
    st.sampled_from(["decide", "swap", "fetch"]),
    st.sampled_from(("a", "b", "c")),
    st.integers(1, 9),
)


@on_a_server(40)
@given(ops=st.lists(_op, min_size=10, max_size=80), policy=st.sampled_from(["seneca", "paper"]))
def test_random_swaps_keep_every_epoch_exactly_once(redis_proc, ops, policy):
    """Three jobs decide, swap the misses of their batches not yet made, and make batches
    (offering crops); then each finishes its epoch: every sample once, no job served a crop
    twice or its own."""
    store = OdsStore(
        redis_proc.client, f"h{next(_ids)}", N // 2, policy=policy,
        capacity={"augmented": 6, "decoded": 0, "encoded": 0}, seed=11,
    )  # fmt: skip
    jobs = ("a", "b", "c")
    for job in jobs:
        store.join(job)
        store.start_epoch(job, 0)
    served = {job: collections.Counter() for job in jobs}
    batches: dict[str, list[list]] = {job: [] for job in jobs}  # [index, tier, bucket] each
    made_by: dict[int, str] = {}  # a crop in the cache: the job that made it
    swapped = 0

    def serve(job, index, tier):
        served[job][index] += 1
        assert served[job][index] == 1, "a sample served twice in one epoch"
        if tier == "augmented":
            assert made_by.get(index) != job, "a job served its own crop"

    def make(job, batch):
        store.release(job, [Pick(index, tier, bucket) for index, tier, bucket in batch])
        misses = [index for index, tier, _ in batch if tier is None]
        result = store.admit(job, [(i, "augmented", 1, b"") for i in misses])
        for i, ok in zip(misses, result, strict=True):
            if ok == 1:
                made_by[i] = job

    for name, job, arg in ops:
        if name == "decide":
            d = store.decide(job, arg)
            for i, t in zip(d.indices, d.tiers, strict=True):
                serve(job, i, t)
            if d.indices:
                batches[job].append(
                    [[i, t, d.pin_bucket] for i, t in zip(d.indices, d.tiers, strict=True)]
                )
        elif name == "swap" and batches[job]:
            batch = batches[job][-1]
            misses = [row for row in batch if row[1] is None][:arg]
            picks = store.swap(job, 0, [row[0] for row in misses])
            for row, pick in zip(misses, picks, strict=False):
                served[job][row[0]] -= 1
                del served[job][row[0]]
                serve(job, pick.index, pick.tier)
                row[:] = [pick.index, pick.tier, pick.bucket]
            swapped += len(picks)
        elif name == "fetch" and batches[job]:
            make(job, batches[job].pop(0))
    for job in jobs:  # each job makes what it holds and finishes its epoch
        for batch in batches[job]:
            make(job, batch)
        while (d := store.decide(job, 8)).indices:
            for i, t in zip(d.indices, d.tiers, strict=True):
                serve(job, i, t)
            store.release(job, d)
        assert served[job] == collections.Counter(range(N // 2))
    store.clear()
