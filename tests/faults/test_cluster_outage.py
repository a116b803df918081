"""A Redis Cluster none of whose nodes answers (redis-py then raises RedisClusterException, not
a ConnectionError) is an outage like any other: the epoch goes on from storage, every sample
once, and the process's lease thread lives on; on real cluster nodes."""

import collections
import threading
import time

import pytest
import redis
from conftest import RedisProcess
from helpers.indexed import indexed

from ods.sampler import OdsBatchSampler
from ods.store import OdsStore
from seneca import SenecaLoader
from seneca.loader._lease import keeper
from seneca_base.backoff import Backoff


def test_a_cluster_that_stops_answering_is_read_around(tiny_dataset, redis_cluster, caplog):
    loader = SenecaLoader(
        indexed(tiny_dataset), batch_size=8, shuffle=True, cache=redis_cluster.url,
        cache_size="20MB",
    )  # fmt: skip
    it = iter(loader)
    seen = collections.Counter(next(it)[1].tolist())
    for port in list(redis_cluster.ports):
        redis_cluster.kill(port)
    with caplog.at_level("WARNING", logger="seneca"):
        for _, y in it:
            seen.update(y.tolist())
            time.sleep(0.3)  # (the job retries the cache after 0.25 s, then less often)
    assert seen == collections.Counter(range(48))
    assert "reading from storage" in caplog.text
    keeper().keep(loader.store, "another", leave=False)  # wakes the thread: it renews now
    time.sleep(2)  # (each renewal is refused at once)
    assert any(t.name == "seneca-leases" and t.is_alive() for t in threading.enumerate())


def test_an_ods_sampler_whose_cluster_stops_answering_finishes_its_epoch(redis_cluster):
    """Its retries of the cache then meet RedisClusterException: still an outage."""
    client = redis.RedisCluster.from_url(redis_cluster.url)
    store = OdsStore(client, "outage", 200, capacity={"encoded": 50}, seed=1)
    backoff = Backoff(redis_cluster.url, 0.05, 0.1)
    sampler = OdsBatchSampler(store, "a", batch_size=8, backoff=backoff)
    it = iter(sampler)
    served = [p.index for p in next(it)]
    for port in list(redis_cluster.ports):
        redis_cluster.kill(port)
    for batch in it:
        served += [p.index for p in batch]
        time.sleep(0.02)  # (several retries of the cache in the epoch)
    assert sorted(served) == list(range(200))
    client.close()


@pytest.mark.parametrize(
    "stale, says",
    [("yes", "read only replica"), ("no", "Link with MASTER is down")],
    ids=["READONLY", "MASTERDOWN"],
)
def test_a_replica_is_read_around(tiny_dataset, free_port, caplog, stale, says):
    """A URL that names a replica (or a primary turned replica by a failover) refuses every
    write (READONLY); one that serves no stale data refuses reads too while its primary is
    down (MASTERDOWN). From the loader's first call on: the loader is made, and every epoch
    comes whole from storage, with a warning that says why."""
    primary = RedisProcess(port=free_port)
    replica = None
    try:
        replica = RedisProcess("--replicaof", "127.0.0.1", str(free_port))
        if stale == "no":
            replica.client.config_set("replica-serve-stale-data", "no")
            primary.stop()
            deadline = time.monotonic() + 30
            while replica.client.info("replication")["master_link_status"] != "down":
                assert time.monotonic() < deadline, "the replica did not see its primary go"
                time.sleep(0.05)
        loader = SenecaLoader(
            indexed(tiny_dataset), batch_size=8, shuffle=True, cache=replica.url,
            cache_size="20MB",
        )  # fmt: skip
        for _ in range(2):
            seen = collections.Counter(int(y) for _, ys in loader for y in ys)
            assert seen == collections.Counter(range(48))
        assert loader.stats()["storage_reads"] == 2 * 48
        assert says in caplog.text, caplog.text
        loader.close()
    finally:
        if replica is not None:
            replica.stop()
        primary.stop()
