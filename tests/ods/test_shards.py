"""A dataset's ODS metadata in shards (ods.shards): the shard map is a bijection that scatters
neighbouring indices; a store in shards serves every job's epoch exactly once, its hits from
the cache, each shard in its own hash slot; a dataset of one shard is the plain store; and
``ods simulate`` runs on shards, its loads filed by cause as on one store; on a real
redis-server."""

import collections
import random

import numpy as np
import pytest
import redis
from redis.crc import key_slot

from ods import bitmaps
from ods.shardmap import ShardMap, shard_names, split_units
from ods.shards import ShardedStore, open_store
from ods.simulate import SimConfig, simulate_ods
from ods.store import OdsStore
from seneca_base.errors import ConfigError


@pytest.mark.parametrize(("samples", "size"), [(50, 16), (10_000, 2_500), (1_001, 1_000), (7, 7)])
def test_the_shard_map_is_a_bijection_onto_the_shards_places(samples, size):
    m = ShardMap(samples, size)
    assert sum(m.sizes()) == samples and all(0 < s <= size for s in m.sizes())
    assert max(m.sizes()) - min(m.sizes()) <= 1
    places = [m.place(i) for i in range(samples)]
    assert len(set(places)) == samples
    for i, (k, local) in enumerate(places):
        assert 0 <= local < m.sizes()[k]
        assert m.index(k, local) == i


@pytest.mark.parametrize("samples", [50, 10_001, 5_850_000_000])
def test_places_of_many_indices_at_once_are_each_one_s_place(samples):
    m = ShardMap(samples, 1 << 21 if samples > 10**6 else 16)
    rng = random.Random(samples)
    picked = [rng.randrange(samples) for _ in range(500)] + [0, samples - 1]
    shard, local = m.places(np.array(picked, dtype=np.int64))
    assert list(zip(shard.tolist(), local.tolist(), strict=True)) == [m.place(i) for i in picked]


def test_a_bitmap_of_the_dataset_splits_into_each_shard_s_bitmap():
    m = ShardMap(50, 16)
    chosen = {0, 3, 17, 31, 49}
    bits = bytearray(7)
    for i in chosen:
        bitmaps.set_bit(bits, i)
    parts = m.split_bitmap(bytes(bits))
    assert m.split_bitmap(bytes(bits), step=1) == parts  # read a byte at a time: the same
    assert [len(p) for p in parts] == [(s + 7) // 8 for s in m.sizes()]
    places = [(k, j) for k, size in enumerate(m.sizes()) for j in range(size)]
    back = {m.index(k, j) for k, j in places if bitmaps.test_bit(parts[k], j)}
    assert back == chosen


@pytest.mark.parametrize("count", [2, 3, 7, 64, 65])
def test_shard_names_spread_over_a_cluster_s_slots(count):
    names = shard_names("ImageNet-22k:4f2a", count)
    assert len(set(names)) == count
    bases = [f"ImageNet-22k:4f2a#{k}" for k in range(count)]
    assert all(name.partition(".")[0] == base for name, base in zip(names, bases, strict=True))
    slots = [key_slot(name.encode()) for name in names]
    if count <= 64:  # the k-th in the k-th of count equal ranges
        assert [int(slot * count / 16384) for slot in slots] == list(range(count))


def test_one_shard_keeps_every_index_and_many_scatter_neighbours():
    assert [ShardMap(100, 100).place(i) for i in range(100)] == [(0, i) for i in range(100)]
    m = ShardMap(10_000, 2_500)
    # a run of 100 neighbouring indices (a class of an ImageFolder) spreads over every shard
    counts = collections.Counter(m.place(i)[0] for i in range(100))
    assert sorted(counts) == [0, 1, 2, 3] and all(15 <= c <= 35 for c in counts.values())


def test_budgets_are_shared_in_proportion_and_sum_to_the_whole():
    assert split_units(10, [16, 16, 16, 2]) == [4, 3, 3, 0]
    assert ShardMap(50, 16).sizes() == [13, 13, 12, 12]
    assert sum(split_units(1_000, [2_500, 2_500, 2_500, 2_500])) == 1_000
    with pytest.raises(ConfigError, match="shard size"):
        ShardMap(10, 0)


def test_a_dataset_that_fits_one_shard_is_the_plain_store(redis_proc):
    assert type(open_store(redis_proc.client, "one", 100, 100)) is OdsStore
    assert type(open_store(redis_proc.client, "many", 101, 100)) is ShardedStore


def test_every_epoch_is_each_sample_once_with_hits_from_the_cache(redis_proc):
    n, jobs = 50, ("a", "b", "c")
    cap = {"encoded": 12}
    store = ShardedStore(redis_proc.client, "sh", n, shard_size=16, capacity=cap, seed=3)
    for job in jobs:
        store.join(job)
    for epoch in range(2):
        got = {job: [] for job in jobs}
        for job in jobs:
            assert store.start_epoch(job, epoch) == (epoch, 0)
        while True:
            empty = 0
            for job in jobs:
                d = store.decide(job, 7)
                if not d.indices:
                    empty += 1
                    continue
                assert d.epoch == epoch and d.served == len(got[job]) + len(d.indices)
                hits = [i for i, t in zip(d.indices, d.tiers, strict=True) if t]
                assert all(store.cached("encoded", hits))  # pinned: still there
                got[job] += d.indices
                store.release(job, d)
                misses = [i for i, t in zip(d.indices, d.tiers, strict=True) if not t]
                store.admit(job, [(i, "encoded", 1, b"") for i in misses])
            if empty == len(jobs):
                break
        for job in jobs:
            assert sorted(got[job]) == list(range(n)), job
    # each shard's keys in a hash slot of its own; a shard's budget is its share
    tags = {key.split(b"{")[1].split(b"}")[0] for key in redis_proc.client.keys(b"*sh#*")}
    assert tags == {name.encode() for name in shard_names("sh", 4)}
    assert sum(s.usage()["encoded"] for s in store.shards) <= 12
    assert store.memory() > 0 and store.clear() > 0


def test_a_job_of_a_subset_joins_the_shards_of_its_samples_and_gets_each_once(redis_proc):
    store = ShardedStore(redis_proc.client, "sub", 40, shard_size=16)  # 3 shards
    members = [i for i in range(40) if store.map.place(i)[0] != 1][:20]
    assert store.join("a", members) == (-1, 0)
    for epoch in range(2):
        store.start_epoch("a", epoch)
        got = []
        while (d := store.decide("a", 6)).indices:
            got += d.indices
            assert d.served == len(got)  # counted over the job's own samples
        assert sorted(got) == members
    # shard 1 holds none of them: the job is not registered there
    assert store.shards[1].renew("a") is False and store.shards[0].renew("a") is True
    with pytest.raises(ConfigError, match="indices"):
        store.join("b", [40])
    lazy = ShardedStore(redis_proc.client, "subl", 40, shard_size=16, lazy=True)
    with pytest.raises(ConfigError, match="indices"):
        lazy.join("a", members)


def test_simulate_runs_on_shards_with_its_loads_by_cause(redis_proc):
    cfg = SimConfig(samples=2_000, jobs=3, cache_frac=0.2, batch=32, epochs=2, shard_size=500)
    out = simulate_ods(redis_proc.client, cfg)
    assert out["served"] == 3 * 2 * 2_000
    causes = out["loads_by_cause"]
    assert causes["first"] == 2_000 and causes["prefetch"] == 0
    assert out["storage_loads"] == sum(causes[c] for c in ("first", "dropped_needed", "not_needed"))
    assert out["storage_loads"] >= out["ceiling"]["storage_loads"]
    assert out["server_ms"]["decide"]["calls"] >= 3 * 2 * 2_000 // 32
    with pytest.raises(ConfigError, match="shard"):
        SimConfig(samples=2_000, jobs=1, cache_frac=0.2, shard_size=500, swap_every=8)


def test_jobs_in_step_draw_the_same_shards_and_a_job_draws_them_in_proportion(redis_proc):
    n = 4 * 250
    store = ShardedStore(redis_proc.client, "step", n, shard_size=250, seed=1)
    for job in ("a", "b"):
        store.join(job)
    firsts = collections.Counter()
    for epoch in range(120):
        for job in ("a", "b"):
            store.start_epoch(job, epoch)
        a, b = store.decide("a", 10), store.decide("b", 10)
        assert [k for k, _ in a.parts] == [k for k, _ in b.parts]  # in step: the same shard
        firsts[a.parts[0][0]] += 1
        store.release("a", a)
        store.release("b", b)
    # each shard drawn about a quarter of the time (the shards are equal)
    assert sorted(firsts) == [0, 1, 2, 3] and all(15 <= c <= 45 for c in firsts.values())


def test_shards_spread_over_a_cluster_and_every_primary_s_time_is_measured(redis_cluster):
    client = redis.RedisCluster(host="127.0.0.1", port=redis_cluster.ports[0])
    cfg = SimConfig(samples=3_000, jobs=2, cache_frac=0.2, batch=32, epochs=1, shard_size=200)
    out = simulate_ods(client, cfg)
    assert out["served"] == 2 * 3_000 and out["loads_by_cause"]["first"] == 3_000
    busy = out["server_busy_ms"]
    assert len(busy) == 3 and all(b > 0 for b in busy)  # 15 shards: 5 on every primary
    # shards on as many primaries as can be: one each of three, two and one of seven, ...
    for count, most in ((3, 1), (7, 3), (15, 5)):
        nodes = collections.Counter(
            str(client.get_node_from_key(f"{{{name}}}")) for name in shard_names("c", count)
        )
        assert max(nodes.values()) == most and len(nodes) == 3
    assert out["server_ms"]["decide"]["calls"] >= 2 * 3_000 // 32
    # the servers' settings are back as they were
    for port in redis_cluster.ports:
        node = redis.Redis(port=port)
        assert node.config_get("slowlog-max-len")["slowlog-max-len"] != "1000000"


def test_lazy_shards_are_made_only_when_drawn_and_the_epoch_is_still_each_sample_once(redis_proc):
    n = 400
    store = ShardedStore(redis_proc.client, "lz", n, shard_size=50, seed=2, lazy=True)
    store.join("a")
    store.start_epoch("a", 0)
    got = store.decide("a", 30).indices
    touched = {key.split(b"{")[1].split(b"}")[0] for key in redis_proc.client.keys(b"*lz#*")}
    names = shard_names("lz", 8)
    assert touched == {names[k].encode() for k in store.changed()} and len(touched) == 1
    while True:
        d = store.decide("a", 30)
        if not d.indices:
            break
        got += d.indices
    assert sorted(got) == list(range(n))
    store.leave("a")
    assert store.clear() > 0 and not redis_proc.client.keys(b"*lz#*")


def test_a_job_s_lease_is_renewed_in_every_shard_until_it_leaves(redis_proc):
    store = ShardedStore(redis_proc.client, "ls", 100, shard_size=30)
    store.join("a")
    assert store.renew("a")
    live = [s.state()["live_jobs"] for s in store.shards]
    assert live == [1, 1, 1, 1]
    store.leave("a")
    assert [s.state()["live_jobs"] for s in store.shards] == [0, 0, 0, 0]
    assert not store.renew("a")  # gone: not renewed into being
