"""The budgets in force are published by a function: a server out of memory refuses a plain
write, but the smaller budgets a refused write asks for must still reach every process."""

import pytest
import redis

from ods.store import OdsStore


def test_budgets_are_published_by_a_server_out_of_memory(redis_proc):
    r = redis_proc.client
    store = OdsStore(r, "ds", 64, capacity={"encoded": 1000, "decoded": 2000}, seed=1)
    store.join("a")
    store.publish_budgets("a")
    used = r.info("memory")["used_memory"]
    r.config_set("maxmemory", used + 200_000)
    r.config_set("maxmemory-policy", "noeviction")
    try:
        with pytest.raises(redis.OutOfMemoryError):
            for k in range(1000):  # (small values: a refused one's buffer frees little)
                r.set(f"filler{k}", b"x" * 1000)
        with pytest.raises(redis.OutOfMemoryError):
            r.hset(store.keys.info, "other", 1)  # a plain write: refused
        store.scale_budgets(0.5)
        store.publish_budgets("a")
        other = OdsStore(r, "ds", 64, seed=2)  # another process reads them
        assert other.adopt_budgets(r.execute_command(*other.budgets_command()))
        assert other.capacity["encoded"] == 500 and other.capacity["decoded"] == 1000
    finally:
        r.config_set("maxmemory", 0)
