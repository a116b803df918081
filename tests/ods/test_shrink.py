"""Shrinking a tier to a smaller budget (a new split): least needed entries go first, pinned
ones stay until released, values go with their entries; on a real redis-server."""

from ods.store import OdsStore

OVERHEAD = 96
SIZE = 100 + OVERHEAD  # units charged per entry below


def _store(client, encoded=20_000):
    capacity = {"encoded": encoded, "decoded": 0, "augmented": 0}
    return OdsStore(client, "ds1", 1000, capacity=capacity, values=True, overhead=OVERHEAD, seed=1)


def _fill(store, job, count):
    items = [(i, "encoded", SIZE, b"%03d" % i + b"x" * 97) for i in range(count)]
    assert store.admit(job, items) == [1] * count


def _cached(store, indices):
    return [i for i, c in zip(indices, store.cached("encoded", indices), strict=True) if c]


def test_a_tier_shrinks_to_its_new_budget_least_needed_first(redis_proc):
    s = _store(redis_proc.client)
    s.join("a")
    s.start_epoch("a", 0)
    _fill(s, "a", 60)
    d = s.decide("a", 40, substitute=True)  # 'a' is served 40 cached samples: it needs them no more
    s.release("a", d)
    served = set(d.indices)
    assert len(served) == 40 and served <= set(range(60))
    over = s.shrink("a", {"encoded": 25 * SIZE, "decoded": 0, "augmented": 0})
    assert over == {"encoded": 0, "decoded": 0, "augmented": 0}
    left = _cached(s, range(60))
    assert len(left) == 25 and s.usage()["encoded"] == 25 * SIZE
    # the 20 samples 'a' still needs stay; only served ones were evicted
    assert set(range(60)) - served <= set(left)
    gone = sorted(set(range(60)) - set(left))
    assert not any(redis_proc.client.exists(s.value_key("encoded", i)) for i in gone)
    assert all(redis_proc.client.exists(s.value_key("encoded", i)) for i in left)


def test_pinned_entries_stay_until_released(redis_proc):
    s = _store(redis_proc.client)
    s.join("a")
    _fill(s, "a", 30)
    pinned = s.lookup("a", list(range(20)))  # a fetch of 20 hits in flight
    budget = 5 * SIZE
    over = s.shrink("a", {"encoded": budget, "decoded": 0, "augmented": 0})
    assert over["encoded"] == 15 * SIZE  # the 10 unpinned went; the pinned 20 stay
    assert _cached(s, range(30)) == list(range(20))
    s.release("a", pinned)
    calls = 1
    while s.shrink("a", {"encoded": budget, "decoded": 0, "augmented": 0})["encoded"]:
        calls += 1  # (a call looks at a random window of the tier)
        assert calls < 10
    assert len(_cached(s, range(30))) == 5


def test_a_tier_within_its_budget_is_left_alone(redis_proc):
    s = _store(redis_proc.client)
    s.join("a")
    _fill(s, "a", 10)
    assert s.shrink("a", {"encoded": 10 * SIZE, "decoded": 0, "augmented": 0})["encoded"] == 0
    assert _cached(s, range(10)) == list(range(10))
