"""SenecaLoader over a dataset whose ODS metadata is kept in shards (``ods.shards``): shards of
16 samples here (``ods.defaults.SHARD_SIZE`` lowered), so the 48 samples of the tiny dataset
are 3 shards."""

import collections

import pytest
import redis
from helpers.indexed import indexed

from ods import defaults as ods_defaults
from ods.keys import SHARD_SIZE_FIELD
from ods.shards import ShardedStore
from seneca import SenecaLoader
from seneca._cache.maintenance import clear_datasets, collect_garbage
from seneca._cache.shares import NodeShares
from seneca._cache.status import cache_status


@pytest.fixture
def small_shards(monkeypatch):
    monkeypatch.setattr(ods_defaults, "SHARD_SIZE", 16)


def epoch_of(loader):
    return collections.Counter(int(i) for _, y in loader for i in y)


@pytest.mark.parametrize("workers", [0, 2])
def test_jobs_share_a_dataset_in_shards_each_epoch_each_sample_once(
    tiny_dataset, redis_proc, small_shards, workers
):
    ds = indexed(tiny_dataset)
    url = redis_proc.url
    loaders = [
        SenecaLoader(
            ds, batch_size=6, shuffle=True, num_workers=workers, cache=url, cache_size="20MB",
            job=f"j{k}",
        )
        for k in range(2)
    ]  # fmt: skip
    store = loaders[0].store
    assert isinstance(store, ShardedStore) and len(store.shards) == 3
    for epoch in range(2):
        for loader in loaders:
            seen = epoch_of(loader)
            assert set(seen) == set(range(48)) and max(seen.values()) == 1, epoch
    stats = [loader.stats() for loader in loaders]
    hits = sum(s[t]["hits"] for s in stats for t in ("augmented", "decoded", "encoded"))
    assert hits >= 48  # the values the first epochs made were read back
    assert sum(s["decodes"] for s in stats) < 4 * 48
    client = redis_proc.client
    # the dataset registered once, with its shard size; its values and metadata in the shards
    assert int(client.hget(store.keys.info, SHARD_SIZE_FIELD)) == 16
    assert sum(store.usage().values()) > 0 and store.usage() == {
        t: sum(s.usage()[t] for s in store.shards) for t in store.usage()
    }
    values = [k for k in client.keys(b"*:v:{*") if b":s:" not in k]
    tags = {k.split(b"{")[1].split(b":")[0] for k in values}
    assert tags == {s.keys.dataset.encode() for s in store.shards}
    # every pin released at the end of the epochs
    pins = [k for k in client.keys(b"*pin*") if client.type(k) == b"string"]
    assert all(client.bitcount(k) == 0 for k in pins)
    # operators see one dataset: its shards' usage and jobs as the whole's
    status = cache_status(client, url)
    assert [d.dataset for d in status.datasets] == [store.keys.dataset]
    (whole,) = status.datasets
    assert whole.samples == 48 and whole.shards == 3
    assert {j.name.split("|")[0] for j in whole.jobs} == {"j0", "j1"}
    assert all(j.samples == 48 and j.epoch == 1 and j.served == 48 for j in whole.jobs)
    assert sum(t.bytes for t in whole.tiers) == sum(store.usage().values())
    assert whole.served == 4 * 48
    _, claims, _ = NodeShares(client).claims()  # what the node's shares count it holding
    assert claims[store.keys.dataset].held == sum(store.usage().values())


def test_a_second_loader_keeps_the_shards_the_first_registered(
    tiny_dataset, redis_proc, monkeypatch
):
    ds = indexed(tiny_dataset)
    monkeypatch.setattr(ods_defaults, "SHARD_SIZE", 16)
    first = SenecaLoader(ds, batch_size=6, shuffle=True, cache=redis_proc.url, job="a")
    assert len(first.store.shards) == 3
    monkeypatch.setattr(ods_defaults, "SHARD_SIZE", 1 << 21)  # another default: same shards
    second = SenecaLoader(ds, batch_size=6, shuffle=True, cache=redis_proc.url, job="b")
    assert isinstance(second.store, ShardedStore) and len(second.store.shards) == 3


def test_state_at_a_midpoint_resumes_in_shards(tiny_dataset, redis_proc, small_shards):
    ds = indexed(tiny_dataset)

    def make():
        return SenecaLoader(
            ds, batch_size=5, shuffle=True, num_workers=1, cache=redis_proc.url, job="resumed"
        )

    loader = make()
    it = iter(loader)
    got = [int(i) for _ in range(4) for i in next(it)[1]]
    state = loader.state_dict()
    del it, loader
    again = make()
    again.load_state_dict(state)
    got += [int(i) for _, y in again for i in y]
    seen = collections.Counter(got)
    assert set(seen) == set(range(48)) and max(seen.values()) == 1


def test_a_loader_in_its_own_order_reads_hits_from_the_shards(
    tiny_dataset, redis_proc, small_shards
):
    ds = indexed(tiny_dataset)
    filler = SenecaLoader(ds, batch_size=8, shuffle=True, cache=redis_proc.url, job="fill")
    epoch_of(filler)  # caches what fits
    ordered = SenecaLoader(ds, batch_size=8, shuffle=False, cache=redis_proc.url, job="in-order")
    assert [int(i) for _, y in ordered for i in y] == list(range(48))
    stats = ordered.stats()
    assert sum(stats[t]["hits"] for t in ("decoded", "encoded")) > 0


def test_redis_cluster_node_names_each_shard_s_slot(redis_cluster, tiny_dataset, small_shards):
    client = redis.RedisCluster(host="127.0.0.1", port=redis_cluster.ports[0])
    ds = indexed(tiny_dataset)
    url = f"redis://127.0.0.1:{redis_cluster.ports[0]}"
    loader = SenecaLoader(ds, batch_size=6, shuffle=True, cache=url, cache_size="20MB", job="c")
    for _ in range(2):
        seen = epoch_of(loader)
        assert set(seen) == set(range(48)) and max(seen.values()) == 1
    nodes = {str(client.get_node_from_key(s.keys.info)) for s in loader.store.shards}
    assert len(nodes) == 3  # 3 shards, one on each primary


def test_gc_and_clear_take_a_dataset_in_shards_whole(tiny_dataset, redis_proc, small_shards):
    ds = indexed(tiny_dataset)
    client = redis_proc.client
    loader = SenecaLoader(ds, batch_size=6, shuffle=True, cache=redis_proc.url, job="gone")
    epoch_of(loader)
    dataset = loader.store.keys.dataset
    loader.close()  # the job leaves every shard
    report = collect_garbage(client, apply=True)
    assert report.orphan_values == 0 and report.job_keys == 0  # nothing lost its entry
    assert client.keys(f"*{dataset}#*".encode())  # its shards hold what was cached
    assert clear_datasets(client)[dataset] > 0
    assert not client.keys(f"*{dataset}*".encode())  # home and shards, metadata and values


def test_loaders_plan_their_split_together_in_shards(tiny_dataset, redis_proc, small_shards):
    ds = indexed(tiny_dataset)
    url = redis_proc.url
    loaders = [
        SenecaLoader(ds, batch_size=6, shuffle=True, cache=url, cache_size="20MB", split="auto",
                     job=f"p{k}")
        for k in range(2)
    ]  # fmt: skip
    for _ in range(2):
        for loader in loaders:
            seen = epoch_of(loader)
            assert set(seen) == set(range(48)) and max(seen.values()) == 1
    store = loaders[0].store
    (whole,) = cache_status(redis_proc.client, url).datasets
    assert whole.plan is not None  # the plan is the dataset's, at its home
    assert redis_proc.client.get(store.keys.plan) is not None
    budgets = {t.tier: t.budget for t in whole.tiers}
    assert sum(b for b in budgets.values() if b) == store.budget_total
    assert sum(s.budget_total for s in store.shards) == store.budget_total


@pytest.mark.slow
def test_forkserver_persistent_workers_take_the_shards_with_the_store(
    tiny_dataset, redis_proc, small_shards
):
    """A worker started by a forkserver has seneca's defaults as a fresh interpreter imported
    them (shards of 2^21), as a spawned one has: the shards it works in come with the store it
    unpickles."""
    loader = SenecaLoader(
        indexed(tiny_dataset), batch_size=6, shuffle=True, num_workers=1, cache=redis_proc.url,
        multiprocessing_context="forkserver", persistent_workers=True, job="forkserver",
    )  # fmt: skip
    assert len(loader.store.shards) == 3
    for _ in range(2):
        seen = epoch_of(loader)
        assert set(seen) == set(range(48)) and max(seen.values()) == 1
    assert loader.stats()["decodes"] < 2 * 48  # the second epoch read what the first cached
