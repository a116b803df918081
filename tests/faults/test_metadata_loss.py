"""A cache that forgets everything mid-epoch (FLUSHALL, or a restart with no persistence): every
job's epoch stays exactly once, and the next epochs run whole. Corrupt or foreign values under
Seneca's keys: counted misses, removed when found."""

import collections
import logging

import pytest
from conftest import RedisProcess
from helpers.indexed import indexed
from helpers.serving import encoded_loader

from ods import defaults as ods_defaults
from ods.shards import ShardedStore
from seneca import SenecaLoader
from seneca.pipeline import codec

N = 48


def _run(loader, lose, after=3):
    """One epoch, calling ``lose()`` after ``after`` batches; the samples served."""
    got = collections.Counter()
    for k, (_, ys) in enumerate(loader):
        got.update(int(y) for y in ys)
        if k + 1 == after:
            lose()
    return got


@pytest.mark.parametrize(("workers", "shard_size"), [(0, None), (2, None), (0, 16), (2, 16)])
def test_a_flushed_cache_loses_no_sample(
    tiny_dataset, redis_proc, workers, shard_size, monkeypatch
):
    if shard_size is not None:  # the metadata in 3 shards
        monkeypatch.setattr(ods_defaults, "SHARD_SIZE", shard_size)
    loader = SenecaLoader(
        indexed(tiny_dataset),
        batch_size=5,
        shuffle=True,
        num_workers=workers,
        cache=redis_proc.url,
        cache_size="20MB",
    )
    assert isinstance(loader.store, ShardedStore) == (shard_size is not None)
    for _ in range(2):
        got = _run(loader, redis_proc.client.flushall)
        assert set(got) == set(range(N)) and max(got.values()) == 1
    got = _run(loader, lambda: None)
    assert set(got) == set(range(N)) and max(got.values()) == 1


def test_a_cache_restarted_at_once_loses_no_sample(tiny_dataset, free_port):
    servers = [RedisProcess(port=free_port)]

    def restart():
        servers[0].stop()
        servers.append(RedisProcess(port=free_port))  # empty, on the same address
        servers.pop(0)

    loader = SenecaLoader(
        indexed(tiny_dataset),
        batch_size=5,
        shuffle=True,
        cache=f"redis://127.0.0.1:{free_port}",
        cache_size="20MB",
    )
    try:
        got = _run(loader, restart)
        assert set(got) == set(range(N)) and max(got.values()) == 1
        got = _run(loader, lambda: None)
        assert set(got) == set(range(N)) and max(got.values()) == 1
    finally:
        servers[0].stop()


def test_corrupt_and_foreign_values_are_counted_once_and_removed(tiny_dataset, redis_proc, caplog):
    """A value with a bad header (or of another program) is a counted miss read from storage;
    its entry is dropped when found, so the next epoch does not count it again."""
    loader = encoded_loader(tiny_dataset, redis_proc.url, shuffle=False)
    r, store = redis_proc.client, loader.store
    r.set(store.value_key("encoded", 3), b"garbage, not a Seneca value")
    r.set(store.value_key("encoded", 7), b"SNCA" + b"\x07" * 40)  # a future format version
    with caplog.at_level(logging.WARNING, logger="seneca"):
        got = sorted(int(y) for _, ys in loader for y in ys)
    assert sum("bad cached encoded value" in m for m in caplog.messages) == 2
    assert got == list(range(N)) and loader.stats()["cache_errors"] == 2
    for i in (3, 7):  # gone, or cached again from storage
        value = r.get(store.value_key("encoded", i))
        assert value is None or codec.decode(value, expect=codec.Kind.RAW)
    loader.reset_stats()
    got = sorted(int(y) for _, ys in loader for y in ys)
    assert got == list(range(N)) and loader.stats()["cache_errors"] == 0


def test_a_corrupt_augmented_copy_is_dropped_by_the_first_job_that_finds_it(
    tiny_dataset, redis_proc, caplog
):
    opts = dict(batch_size=8, shuffle=True, cache=redis_proc.url, cache_size="20MB")
    a, b, c = (SenecaLoader(indexed(tiny_dataset), job=j, split=(0, 0, 1), **opts) for j in "abc")
    next(iter(b)), next(iter(c))  # b and c are live: a's copies are worth making
    list(a)
    r, store = redis_proc.client, a.store
    copies = [i for i in range(N) if r.getbit(store.tier_key("augmented"), i)]
    assert copies
    bad_shape = b"SNCA" + bytes([codec.FORMAT_VERSION, 1, 0, 3]) + b"\xff" * 12
    for i in copies:
        r.set(store.value_key("augmented", i), bad_shape)
    with caplog.at_level(logging.WARNING, logger="seneca"):
        list(b)
    assert any("bad cached augmented value" in m for m in caplog.messages)
    assert b.stats()["cache_errors"] > 0
    list(c)
    assert c.stats()["cache_errors"] == 0  # b dropped every corrupt copy it found
