"""Data of another type under Seneca's keys (another program's, or corrupt): a value key
holding a list is a counted miss and its value is cached again in its place; a metadata key of
the wrong type is deleted before the engine writes anything, and the call goes on."""

import collections
import logging

from helpers.serving import encoded_loader, serve_epoch

from ods.store import OdsStore

N = 48


def test_metadata_keys_of_another_type_are_deleted_before_any_write(redis_proc, caplog):
    r = redis_proc.client
    store = OdsStore(r, "fd", 100, capacity={"encoded": 50})
    store.join("a")
    store.start_epoch("a", 0)
    store.admit("a", [(i, "encoded", 1, b"") for i in range(10)])
    r.delete(store.keys.tier("encoded"))
    r.rpush(store.keys.tier("encoded"), "not a bitmap")  # another program's list
    r.delete(store.keys.used)
    r.set(store.keys.used, "not a hash")
    with caplog.at_level(logging.WARNING, logger="seneca"):
        served = serve_epoch(store, "a", 16)
    assert sorted(served) == list(range(100))  # the epoch whole, exactly once
    assert r.type(store.keys.tier("encoded")) == b"string"
    assert r.type(store.keys.used) == b"hash"
    assert sum("another type" in m for m in caplog.messages) == 2


def test_a_value_key_of_another_type_is_a_counted_miss_and_removed(tiny_dataset, redis_proc):
    loader = encoded_loader(tiny_dataset, redis_proc.url, shuffle=True)
    r, store = redis_proc.client, loader.store
    r.delete(store.value_key("encoded", 5))
    r.rpush(store.value_key("encoded", 5), b"a list, not a value")
    loader.reset_stats()
    got = collections.Counter(int(y) for _, ys in loader for y in ys)
    assert got == collections.Counter(range(N))
    stats = loader.stats()
    assert stats["ods_gone"] == 1 and stats["storage_reads"] == 1  # read like a missing value
    assert r.type(store.value_key("encoded", 5)) == b"string"  # its value cached again
    loader.reset_stats()
    assert sorted(int(y) for _, ys in loader for y in ys) == list(range(N))
    assert loader.stats()["ods_gone"] == 0 and loader.stats()["storage_reads"] == 0
