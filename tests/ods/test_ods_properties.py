"""Property-based test: random interleavings of join, request, fetch, next epoch and leave keep
every ODS guarantee (hypothesis drives the real store against a real Redis), on one store and
with the dataset in shards of 16 samples (ods.shards). Swaps of misses not yet made have their
own in test_swap.py."""

import collections
import itertools

from helpers.engine import on_a_server
from hypothesis import given
from hypothesis import strategies as st

from ods.shards import open_store

N = 60
JOBS = ("a", "b", "c")
CAPACITY = {"augmented": 8, "decoded": 6, "encoded": 10}
_ids = itertools.count()

op = st.one_of(
    st.tuples(st.just("join"), st.sampled_from(JOBS), st.booleans()),
    st.tuples(st.just("decide"), st.sampled_from(JOBS), st.integers(1, 17)),
    st.tuples(st.just("fetch"), st.sampled_from(JOBS), st.sampled_from(sorted(CAPACITY))),
    st.tuples(st.just("next"), st.sampled_from(JOBS), st.just(0)),
    st.tuples(st.just("leave"), st.sampled_from(JOBS), st.just(0)),
)


@on_a_server(60)
@given(
    ops=st.lists(op, min_size=1, max_size=60),
    policy=st.sampled_from(["seneca", "paper"]),
    shard_size=st.sampled_from([N, 16]),
)
def test_random_interleavings_keep_the_guarantees(redis_proc, ops, policy, shard_size):
    dataset = f"p{next(_ids)}"
    store = open_store(
        redis_proc.client, dataset, N, shard_size, policy=policy, capacity=CAPACITY, seed=7
    )
    stores = getattr(store, "shards", [store])  # a store per shard, or the one
    members: dict[str, set[int]] = {}
    epoch: dict[str, int] = {}
    served: dict[str, collections.Counter] = {}
    pending: dict[str, list] = collections.defaultdict(list)
    generation = collections.Counter()  # augmented copies made per sample
    aug_used: set[tuple[str, int, int]] = set()
    for name, job, arg in ops:
        if name == "join" and job not in members:
            subset = arg and len(stores) == 1  # (a subset is for one store only)
            members[job] = set(range(0, N, 2)) if subset else set(range(N))
            store.join(job, sorted(members[job]) if subset else None)
            epoch[job] = 0
            store.start_epoch(job, 0)
            served[job] = collections.Counter()
        elif job not in members:
            continue
        elif name == "decide":
            d = store.decide(job, arg)
            assert d.epoch == epoch[job]
            if not d.indices:  # the epoch is complete: every member exactly once
                assert set(served[job]) == members[job]
                continue
            served[job].update(d.indices)
            assert max(served[job].values()) == 1
            assert set(d.indices) <= members[job]
            for i, t in zip(d.indices, d.tiers, strict=True):
                if t == "augmented":
                    copy = (job, i, generation[i])
                    assert copy not in aug_used, "augmented copy served twice to one job"
                    aug_used.add(copy)
            pending[job].append(d)
        elif name == "fetch" and pending[job]:
            d = pending[job].pop(0)
            store.release(job, d)
            misses = [i for i, t in zip(d.indices, d.tiers, strict=True) if t is None]
            result = store.admit(job, [(i, arg, 1, b"") for i in misses])
            for i, ok in zip(misses, result, strict=True):
                if ok == 1 and arg == "augmented":
                    generation[i] += 1
                    aug_used.add((job, i, generation[i]))
        elif name == "next":
            epoch[job] += 1
            store.start_epoch(job, epoch[job])
            served[job] = collections.Counter()
        elif name == "leave":
            store.leave(job)
            for mapping in (members, epoch, served):
                mapping.pop(job)
            pending.pop(job, None)
            # a job that joins again under the name is a new job: its used copies went
            aug_used.difference_update({c for c in aug_used if c[0] == job})
        states = [s.state() for s in stores]
        for tier, cap in CAPACITY.items():
            assert 0 <= sum(got[tier]["entries"] for got in states) <= cap
            for one, got in zip(stores, states, strict=True):  # each shard within its share
                assert got[tier]["entries"] <= one.capacity[tier]
                assert got[tier]["entries"] == redis_proc.client.bitcount(one.tier_key(tier))
    store.clear()
