"""A dataset in shards answers a loader's calls on samples by the dataset's indices: values,
releases, swaps, claims, forgets, lookups and budgets go to the shard of each sample; on a
real redis-server."""

import pytest

from ods.decision import Pick
from ods.outbox import RoundTrip
from ods.shards import ShardedStore
from seneca_base.split import Split

N = 60  # 4 shards of 15


@pytest.fixture
def store(redis_proc):
    cap = {"augmented": 40, "encoded": 20}
    return ShardedStore(redis_proc.client, "route", N, shard_size=16, capacity=cap, seed=5)


def test_each_value_key_is_its_shard_s(store):
    for i in (0, 7, 31, 59):
        k, local = store.map.place(i)
        assert store.value_key("augmented", i) == store.shards[k].value_key("augmented", local)
    assert store.value_keys([("encoded", 3), ("augmented", 4)]) == [
        store.value_key("encoded", 3),
        store.value_key("augmented", 4),
    ]


def test_budgets_are_the_dataset_s_in_total_and_each_shard_s_its_share(store):
    assert store.capacity == {"augmented": 40, "decoded": 0, "encoded": 20}
    assert [s.capacity["augmented"] for s in store.shards] == [10, 10, 10, 10]
    store.apply_split(Split.of((0.5, 0, 0.5)), 100)
    assert store.capacity["encoded"] == 50 and store.budget_total == 100
    assert sum(s.capacity["augmented"] for s in store.shards) == store.capacity["augmented"]
    store.register("tests")
    assert store.publish_budgets("j") is True
    other = ShardedStore(store.client, "route", N, shard_size=16)  # another loader's
    assert other.adopt_budgets(store.client.execute_command(*other.budgets_command()))
    assert other.capacity == store.capacity
    assert [s.capacity for s in other.shards] == [s.capacity for s in store.shards]
    assert store.clear() > 0 and not store.client.keys(b"*route*")  # the home's keys too


def test_hits_are_released_per_shard_and_bucket_and_looked_up_at_one_time(store):
    store.join("j")
    store.start_epoch("j", 0)
    items = [(i, "encoded", 1, b"x") for i in range(N)]
    assert sum(store.admit("j", items)) == 20  # 5 a shard
    d = store.lookup("j", list(range(N)))
    hits = [i for i, t in zip(d.indices, d.tiers, strict=True) if t]
    assert len(hits) == 20 and all(store.cached("encoded", hits))
    picks = [Pick(i, t, d.pin_bucket) for i, t in zip(d.indices, d.tiers, strict=True)]
    trip = RoundTrip()  # the releases ride in a round trip sent here: one command a shard
    assert store.release("j", picks, via=trip) == []
    assert len(trip.commands) == len({store.map.place(i)[0] for i in hits})
    trip.answer([store.client.execute_command(*c) for c in trip.commands])
    pins = [k for k in store.client.keys(b"*route#*pin:*")]
    assert pins and all(store.client.bitcount(k) == 0 for k in pins)


def test_swaps_and_claims_answer_in_the_dataset_s_indices(store):
    for job in ("a", "b"):
        store.join(job)
        store.start_epoch(job, 0)
    d = store.decide("a", 10)  # nothing cached: all misses, in one shard
    (k,) = {store.map.place(i)[0] for i in d.indices}
    rest = [store.map.index(k, j) for j in range(store.sizes[k])]
    rest = [i for i in rest if i not in d.indices]
    store.admit("b", [(i, "augmented", 1, b"x") for i in rest])  # b caches the rest of shard k
    got = store.swap("a", 0, d.indices[:2])
    assert len(got) == 2 and all(p.index in rest and p.tier == "augmented" for p in got)
    store.release("a", got)
    left = [i for i in rest if i not in {p.index for p in got}]
    claimed, waiting = store.claim("a", [left[0]], [d.indices[5]])
    assert claimed == [left[0]]
    assert waiting == [d.indices[5]]  # a decided it a miss beside b: pending, worth waiting
    assert store.admit("a", [(d.indices[0], "encoded", 1, b"x")]) == [1]
    assert store.forget("a", [("encoded", d.indices[0])]) == [d.indices[0]]
    assert store.cached("encoded", [d.indices[0]]) == [False]
