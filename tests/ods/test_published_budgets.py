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
    r.config_set("maxmemory-policy", "noeviction")
    # half the memory in use: every plain write is refused, however the server's buffers come
    # and go (filled to a limit just above, a write could find room again once a refused one's
    # buffer was freed)
    r.config_set("maxmemory", r.info("memory")["used_memory"] // 2)
    try:
        with pytest.raises(redis.OutOfMemoryError):
            r.hset(store.keys.info, "other", 1)  # a plain write: refused
        store.fit_budgets("a", 1500)
        other = OdsStore(r, "ds", 64, seed=2)  # another process reads them
        assert other.adopt_budgets(r.execute_command(*other.budgets_command()))
        assert other.capacity["encoded"] == 500 and other.capacity["decoded"] == 1000
    finally:
        r.config_set("maxmemory", 0)


def _in_force(r, store):
    other = OdsStore(r, "ds", 64, seed=2)
    other.adopt_budgets(r.execute_command(*other.budgets_command()))
    return other.capacity


def test_budgets_of_an_older_plan_are_not_put_back_in_force(redis_proc):
    """A job still on plan 1 publishing after another put plan 2's budgets in force (a job
    that looks at the plan later, a new job registering) does not put plan 1's back: it takes
    plan 2's."""
    r = redis_proc.client
    old = OdsStore(r, "ds", 64, capacity={"decoded": 3000}, seed=1)
    old.join("a")
    new = OdsStore(r, "ds", 64, capacity={"augmented": 3000}, seed=1)
    assert new.publish_budgets("b", version=2)
    assert not old.publish_budgets("a", version=1)
    assert old.capacity == _in_force(r, old) == {"encoded": 0, "decoded": 0, "augmented": 3000}
    old.register("a dataset")  # registering writes no budgets over those in force
    assert _in_force(r, old)["augmented"] == 3000
    fixed = OdsStore(r, "ds", 64, capacity={"decoded": 3000}, seed=1)
    assert fixed.publish_budgets("c")  # a fixed split, no plan: written
    assert _in_force(r, old)["decoded"] == 3000


def test_a_refused_write_shrinks_the_budgets_in_force_not_a_stale_view(redis_proc):
    """A worker that last read plan 1's budgets and then finds the server full shrinks the
    budgets in force (plan 2's), in their proportions."""
    r = redis_proc.client
    stale = OdsStore(r, "ds", 64, capacity={"decoded": 3000}, seed=1)
    stale.join("a")
    new = OdsStore(r, "ds", 64, capacity={"encoded": 1000, "augmented": 2000}, seed=1)
    new.publish_budgets("b", version=2)
    stale.fit_budgets("a", 1500)
    assert stale.capacity == _in_force(r, new) == {"encoded": 500, "decoded": 0, "augmented": 1000}
    stale.fit_budgets("a", 2000)  # never grows them
    assert _in_force(r, new)["augmented"] == 1000
