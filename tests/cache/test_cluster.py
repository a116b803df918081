"""A Redis Cluster as the cache: found from any node's URL, metadata in one slot, values spread
over every primary, the operator commands over every node, and a primary that dies costs only
the values it held."""

import collections
import json
import logging
import subprocess
import sys
import time

import pytest
import redis
from conftest import cluster_ports, once
from helpers.indexed import indexed

from seneca import SenecaLoader, defaults
from seneca._cli.main import main


def _loaders(root, url, count=2):
    common = dict(batch_size=8, shuffle=True, cache=url, cache_size="20MB")
    return [SenecaLoader(indexed(root), split=(0.5, 0.25, 0.25), **common) for _ in range(count)]


def _epoch(loaders, kill=None):
    """One epoch of every loader, interleaved; ``kill()`` runs after the second batch. Checks
    that each job served each sample once."""
    seen = [collections.Counter() for _ in loaders]
    for step, batches in enumerate(zip(*loaders, strict=True)):
        for counter, (_, y) in zip(seen, batches, strict=True):
            counter.update(int(i) for i in y)
        if step == 1 and kill is not None:
            kill()
    for counter in seen:
        assert sorted(counter) == list(range(48)) and set(counter.values()) == {1}


def _values_per_node(cluster):
    return {p: sum(1 for _ in cluster.node(p).scan_iter("seneca:v:*")) for p in cluster.ports}


def _metadata_port(cluster, loader):
    rc = redis.RedisCluster(host="127.0.0.1", port=cluster.ports[0])
    try:
        return rc.get_node_from_key(loader.store.keys.jobs).port
    finally:
        rc.close()


def test_jobs_share_a_cluster_with_values_on_every_primary(tiny_dataset, redis_cluster):
    loaders = _loaders(tiny_dataset, redis_cluster.url)
    assert loaders[0].store.client.__class__.__name__ == "RedisCluster"
    for _ in range(2):
        _epoch(loaders)
    stats = [lo.stats() for lo in loaders]
    assert all(s["cache_errors"] == 0 for s in stats)
    assert sum(s["decoded"]["hits"] + s["augmented"]["hits"] for s in stats) > 48
    assert all(n > 0 for n in _values_per_node(redis_cluster).values())
    meta = _metadata_port(redis_cluster, loaders[0])
    for port in redis_cluster.ports:  # every metadata key is in the dataset's slot
        keys = list(redis_cluster.node(port).scan_iter("seneca:{*"))
        assert bool(keys) == (port == meta)
    # what keeps the jobs live and shares the node works on a cluster too
    store = loaders[0].store
    assert all(store.renew(lo.job) for lo in loaders)
    assert loaders[0].cache_size > 0 and loaders[0].budgets.total > 0


def test_operator_commands_cover_every_node(tiny_dataset, redis_cluster, capsys):
    loaders = _loaders(tiny_dataset, redis_cluster.url)
    _epoch(loaders)
    assert main(["cache", "status", redis_cluster.url, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["maxmemory"] == 3 * 200_000_000  # summed over the primaries
    [d] = status["datasets"]
    assert d["served"] == 96 and len(d["jobs"]) == 2
    for lo in loaders:
        lo.close()
    assert main(["cache", "metrics", redis_cluster.url]) == 0
    assert 'seneca_served_samples_total{dataset="' in capsys.readouterr().out
    assert main(["cache", "gc", redis_cluster.url, "--apply", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["views"] and report["orphan_values"] > 0  # the augmented tier, spread
    assert main(["cache", "clear", redis_cluster.url, "--all"]) == 0
    assert all(redis_cluster.node(p).dbsize() == 0 for p in redis_cluster.ports)


def test_a_primary_that_dies_costs_only_its_values(tiny_dataset, redis_cluster):
    loaders = _loaders(tiny_dataset, redis_cluster.url)
    _epoch(loaders)
    meta = _metadata_port(redis_cluster, loaders[0])
    victim = next(p for p in redis_cluster.ports if p != meta)
    assert _values_per_node(redis_cluster)[victim] > 0
    for lo in loaders:
        lo.reset_stats()
    _epoch(loaders, kill=lambda: redis_cluster.kill(victim))  # exactly once regardless
    _epoch(loaders)
    stats = [lo.stats() for lo in loaders]
    assert sum(s["ods_gone"] for s in stats) > 0  # the dead node's values became misses
    hits = sum(s["decoded"]["hits"] + s["augmented"]["hits"] for s in stats)
    assert hits > 0  # the other nodes kept serving


@pytest.mark.slow
def test_cache_node_starts_a_local_cluster():
    port = cluster_ports(3, consecutive=True)[0]
    cmd = [sys.executable, "-m", "seneca._cli.main", "cache-node", "--cluster", "3"]
    node = subprocess.Popen(
        [*cmd, "--port", str(port), "--maxmemory", "64MB"], stdout=subprocess.PIPE, text=True
    )
    try:
        line = node.stdout.readline()
        assert f"redis://127.0.0.1:{port}" in line
        info = redis.Redis(port=port + 2).cluster("info")
        assert info["cluster_state"] == "ok" and int(info["cluster_known_nodes"]) == 3
    finally:
        node.terminate()
        node.wait(timeout=60)
    client = once(redis.Redis(port=port, socket_connect_timeout=0.5))
    deadline = time.monotonic() + 60
    while True:  # the node's servers stop with it
        try:
            client.ping()
        except redis.ConnectionError:
            break
        assert time.monotonic() < deadline, f"port {port} still answers 60 s after the node ended"
        time.sleep(0.05)


def test_the_metadata_node_dying_finishes_every_epoch_from_storage(
    tiny_dataset, redis_cluster, caplog
):
    loaders = _loaders(tiny_dataset, redis_cluster.url)
    _epoch(loaders)
    meta = _metadata_port(redis_cluster, loaders[0])
    with caplog.at_level("WARNING", logger="seneca"):
        _epoch(loaders, kill=lambda: redis_cluster.kill(meta))  # exactly once regardless
    assert any("storage" in r.getMessage() for r in caplog.records)


def test_a_cluster_url_whose_node_is_down_trains_from_storage(tiny_dataset, redis_cluster, caplog):
    down = redis_cluster.ports[2]
    redis_cluster.kill(down)
    with caplog.at_level("WARNING", logger="seneca"):
        [loader] = _loaders(tiny_dataset, f"redis://127.0.0.1:{down}", 1)
        _epoch([loader])
    warnings = [r for r in caplog.records if "unreachable" in r.getMessage()]
    assert len(warnings) == 1 and str(down) in warnings[0].getMessage()
    assert loader.stats()["storage_reads"] == 48


@pytest.mark.bench
def test_bench_and_profile_run_against_a_cluster(tiny_dataset, redis_cluster, tmp_path, capsys):
    from seneca._cli.mdp import main as mdp

    out = tmp_path / "bench"
    argv = ["bench", "--data", str(tiny_dataset), "--jobs", "2", "--epochs", "2", "--crop", "16"]
    argv += ["--batch-size", "8", "--loaders", "seneca", "--split", "40-40-20"]
    assert main([*argv, "--cache", redis_cluster.url, "--out", str(out)]) == 0
    result = json.loads((out / "results.json").read_text())
    for run in result["runs"]:
        assert [job["samples"] for job in run["per_job"]] == [96, 96]
    seneca = next(r for r in result["runs"] if r["loader"] == "seneca")
    assert seneca["decodes_per_sample_epoch"] < 2.0  # the jobs shared the cluster's values
    cpu = seneca["cache_cpu"]  # the primaries' CPU over the run, summed
    assert cpu["cores"] > 0 and cpu["main_thread"] > 0
    assert "cache server CPU (main thread)" in (out / "results.md").read_text()
    spec = tmp_path / "spec.toml"
    argv = ["profile", "--data", str(tiny_dataset), "--cache", redis_cluster.url, "--workers", "1"]
    assert mdp([*argv, "--seconds", "0.3", "--sample-count", "8", "--out", str(spec)]) == 0
    text = spec.read_text()
    assert "size_gb = 0.6" in text  # the primaries' maxmemory, summed
    assert not any(redis_cluster.node(p).dbsize() for p in redis_cluster.ports)  # cleaned up


def test_a_cluster_that_fails_finishes_every_epoch_from_storage(
    tiny_dataset, redis_cluster, monkeypatch
):
    """Two of three primaries die: the last one reports cluster_state:fail and refuses every
    command (CLUSTERDOWN); training goes on from storage, every epoch exactly once."""
    monkeypatch.setattr(defaults, "CACHE_RETRY_CAP", 0.5)  # the wait between epochs below
    loaders = _loaders(tiny_dataset, redis_cluster.url)
    _epoch(loaders)
    last = redis_cluster.ports[0]

    def fail():
        for port in redis_cluster.ports[1:]:
            redis_cluster.kill(port)
        deadline = time.monotonic() + 15
        while b"cluster_state:fail" not in redis_cluster.node(last).execute_command(
            "CLUSTER", "INFO", **{"NEVER_DECODE": True}
        ):
            assert time.monotonic() < deadline, "the cluster did not fail"
            time.sleep(0.2)

    _epoch(loaders, kill=fail)
    time.sleep(defaults.CACHE_RETRY_CAP + 0.5)  # the next epoch starts by asking the cache again
    _epoch(loaders)  # and is refused (CLUSTERDOWN): it goes on from storage


def _move_slot(cluster, key, dest, keys=None):
    """Move the slot of ``key``, with its keys, to the primary on port ``dest`` while clients
    use it, as an operator's resharding does: SETSLOT IMPORTING/MIGRATING, MIGRATE of the
    slot's keys, then SETSLOT NODE on every primary. Returns the port it left. With ``keys``
    given, only those are migrated and the slot is left in migration (:func:`_finish_move`)."""
    nodes = {p: cluster.node(p) for p in cluster.ports}
    slot = nodes[dest].execute_command("CLUSTER", "KEYSLOT", key)
    [src] = [
        p for p in cluster.ports if nodes[p].execute_command("CLUSTER", "COUNTKEYSINSLOT", slot)
    ]
    ids = _ids(cluster)
    nodes[dest].execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[src])
    nodes[src].execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[dest])
    if keys is not None:
        nodes[src].migrate("127.0.0.1", dest, keys, 0, 5000)
        return src
    _finish_move(cluster, key, src, dest)
    return src


def _finish_move(cluster, key, src, dest):
    """Migrate the keys of ``key``'s slot left on ``src`` to ``dest`` and give ``dest`` the
    slot on every primary."""
    nodes = {p: cluster.node(p) for p in cluster.ports}
    slot = nodes[dest].execute_command("CLUSTER", "KEYSLOT", key)
    while keys := nodes[src].execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
        nodes[src].migrate("127.0.0.1", dest, keys, 0, 5000)
    dest_id = _ids(cluster)[dest]
    for node in nodes.values():
        node.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dest_id)


def _ids(cluster):
    """Each primary's node id, by port."""
    ids = {p: cluster.node(p).execute_command("CLUSTER", "MYID") for p in cluster.ports}
    return {p: i.decode() if isinstance(i, bytes) else i for p, i in ids.items()}


def test_a_resharded_metadata_slot_is_followed(tiny_dataset, redis_cluster):
    """The dataset's metadata slot moves to another primary mid-epoch: the loaders follow it
    (MOVED), every epoch stays exactly once, and the cache keeps serving from the new node."""
    loaders = _loaders(tiny_dataset, redis_cluster.url)
    _epoch(loaders)
    meta = _metadata_port(redis_cluster, loaders[0])
    dest = next(p for p in redis_cluster.ports if p != meta)
    moved = []
    _epoch(
        loaders,
        kill=lambda: moved.append(_move_slot(redis_cluster, loaders[0].store.keys.jobs, dest)),
    )
    assert moved == [meta] and _metadata_port(redis_cluster, loaders[0]) == dest
    assert not list(redis_cluster.node(meta).scan_iter("seneca:{*"))  # all of it moved
    for lo in loaders:
        lo.reset_stats()
    _epoch(loaders)
    stats = [lo.stats() for lo in loaders]
    assert all(s["cache_errors"] == 0 for s in stats)
    assert sum(s["decoded"]["hits"] + s["augmented"]["hits"] for s in stats) > 48


def test_a_metadata_slot_left_in_migration_finishes_every_epoch_from_storage(
    tiny_dataset, redis_cluster, monkeypatch, caplog
):
    """An operator's resharding stops with one of the dataset's metadata keys moved: every
    call naming the slot's keys is sent on by the old node (ASK) and refused by the new one
    (TRYAGAIN: it lacks the others). An epoch that starts so goes on from storage, every
    sample once; when the move is finished, the cache serves again."""
    monkeypatch.setattr(defaults, "CACHE_RETRY_CAP", 0.5)  # the wait before asking again
    loaders = _loaders(tiny_dataset, redis_cluster.url)
    _epoch(loaders)
    jobs = loaders[0].store.keys.jobs
    dest = next(p for p in redis_cluster.ports if p != _metadata_port(redis_cluster, loaders[0]))
    src = _move_slot(redis_cluster, jobs, dest, keys=[jobs])
    with caplog.at_level(logging.WARNING, logger="seneca"):
        _epoch(loaders)  # starts in the slot's migration
    assert "TryAgainError" in caplog.text, caplog.text
    _finish_move(redis_cluster, jobs, src, dest)
    time.sleep(defaults.CACHE_RETRY_CAP + 0.5)  # the next epoch starts by asking the cache again
    _epoch(loaders)
    for lo in loaders:
        lo.reset_stats()
    _epoch(loaders)
    stats = [lo.stats() for lo in loaders]
    assert all(s["cache_errors"] == 0 for s in stats), stats
    assert sum(s["decoded"]["hits"] + s["augmented"]["hits"] for s in stats) > 0, stats


def test_commands_follow_a_moved_slot_whatever_parser_reads_the_reply(redis_cluster):
    """A client whose slot map predates a resharding gets MOVED; redis-py's parser turns it
    into MovedError (without the word MOVED), ours into a ResponseError with it: both are
    followed, so the reply is the value, not an error."""
    from ods import routing

    client = redis.RedisCluster(host="127.0.0.1", port=redis_cluster.ports[0])
    try:
        client.set("seneca:v:{moved}", b"value")
        here = client.get_node_from_key("seneca:v:{moved}").port
        dest = next(p for p in redis_cluster.ports if p != here)
        _move_slot(redis_cluster, "seneca:v:{moved}", dest)  # the client's map is stale now
        assert routing.run(client, [("GET", "seneca:v:{moved}")]) == [b"value"]
        assert client.get_node_from_key("seneca:v:{moved}").port == dest  # map refreshed
    finally:
        client.close()


def test_keys_of_a_slot_in_migration_are_read_where_they_are(redis_cluster):
    """Mid-resharding, a key already migrated gets ASK from its old node: it is read from the
    importing node after ASKING (whatever parser reads the reply), one not migrated yet from
    the old node, and the slot map is left as it is (the slot still belongs to the old node)."""
    from ods import routing
    from seneca._cache import resp

    client = redis.RedisCluster(host="127.0.0.1", port=redis_cluster.ports[0])
    try:
        gone, stays = "seneca:v:{asked}1", "seneca:v:{asked}2"
        client.set(gone, b"migrated")
        client.set(stays, b"not yet")
        here = client.get_node_from_key(gone).port
        dest = next(p for p in redis_cluster.ports if p != here)
        _move_slot(redis_cluster, gone, dest, keys=[gone])
        assert routing.run(client, [("GET", gone), ("GET", stays)]) == [b"migrated", b"not yet"]
        replies = resp.execute(client, [("MGET", stays, gone)])
        assert [bytes(v) for v in replies[0]] == [b"not yet", b"migrated"]
        assert client.get_node_from_key(gone).port == here  # no MOVED: the map stands
    finally:
        client.close()
