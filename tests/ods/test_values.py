"""The cache engine with values (what SenecaLoader uses, with or without ODS): tiers, budgets,
the two-step admission, evictions, declared keys and typed errors, on a real redis-server."""

import multiprocessing as mp
import random

import pytest
import redis
from redis.crc import key_slot

from ods.store import OdsStore
from seneca_base.errors import UnknownJobError

CAPACITY = {"encoded": 20_000, "decoded": 30_000, "augmented": 10_000}
OVERHEAD = 96


def _store(client, capacity=CAPACITY, samples=1000):
    return OdsStore(
        client, "ds1", samples, capacity=capacity, values=True, overhead=OVERHEAD, seed=1
    )


def _item(i, tier, value):
    return (i, tier, len(value) + OVERHEAD, value)


def _read(store, job, indices):
    """(tiers, values) of a lookup by ``job``, its pins released (as a fetch does)."""
    d = store.lookup(job, indices)
    pairs = zip(indices, d.tiers, strict=True)
    values = [store.client.get(store.value_key(t, i)) if t else None for i, t in pairs]
    store.release(job, d)
    return d.tiers, values


def test_lookup_finds_the_cheapest_tier(redis_proc):
    s = _store(redis_proc.client)
    assert _read(s, "a", [0, 1])[0] == [None, None]
    s.admit(
        "a", [_item(0, "encoded", b"E0"), _item(1, "encoded", b"E1"), _item(1, "decoded", b"D1")]
    )
    assert _read(s, "a", [0, 1, 2]) == (["encoded", "decoded", None], [b"E0", b"D1", None])
    assert s.usage()["encoded"] == 2 * (2 + OVERHEAD)


def test_admission_is_idempotent_and_budgeted(redis_proc):
    s = _store(redis_proc.client)
    assert s.admit("a", [_item(0, "encoded", b"x" * 100), _item(0, "encoded", b"y" * 100)]) == [
        1,
        2,
    ]
    assert _read(s, "a", [0])[1] == [b"x" * 100]  # the second offer did not replace it
    assert s.admit("a", [_item(1, "encoded", b"z" * 30_000)]) == [0]
    assert _read(s, "a", [1])[0] == [None]


def _value_keys(r, tier_letter):
    return [k for k in r.scan_iter(match=f"seneca:v:{{ds1:{tier_letter}:*") if b":s:" not in k]


def _admitter(url, seed, n):
    rng = random.Random(seed)
    s = _store(redis.Redis.from_url(url))
    s.join(f"w{seed}")
    for _ in range(n):
        batch = [
            _item(
                rng.randrange(400),
                rng.choice(["encoded", "decoded"]),
                b"v" * rng.randrange(50, 900),
            )
            for _ in range(8)
        ]
        s.admit(f"w{seed}", batch)


def test_budgets_hold_and_are_exact_with_concurrent_processes(redis_proc):
    procs = [mp.Process(target=_admitter, args=(redis_proc.url, s, 40)) for s in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    s, r = _store(redis_proc.client), redis_proc.client
    used = s.usage()
    for tier, letter in (("encoded", "e"), ("decoded", "d")):
        assert 0 < used[tier] <= CAPACITY[tier]
        actual = sum(r.strlen(k) + OVERHEAD for k in _value_keys(r, letter))
        assert actual == used[tier]  # the counter is exact, not just an upper bound
        assert used[tier] > CAPACITY[tier] - 1000  # and the tier did fill up
    assert not list(r.scan_iter(match="*:s:*"))  # nothing staged is left behind


def test_augmented_copy_served_once_per_job_and_never_to_its_maker(redis_proc):
    s, r = _store(redis_proc.client), redis_proc.client
    for job in ("a", "b", "c"):
        s.join(job)
    assert s.admit("a", [_item(0, "augmented", b"AUG")]) == [1]
    assert _read(s, "a", [0])[0] == [None]  # the maker never gets its own copy back
    assert _read(s, "b", [0])[1] == [b"AUG"]
    assert _read(s, "b", [0])[0] == [None]  # each job at most once
    assert _read(s, "c", [0])[1] == [b"AUG"]  # the last live job: the copy is spent
    assert s.usage()["augmented"] == 0
    assert not r.exists(s.value_key("augmented", 0))  # its value was deleted
    assert _read(s, "b", [0])[0] == [None]


def test_lookup_and_admit_take_one_function_call_each(redis_proc):
    s, r = _store(redis_proc.client, capacity=dict.fromkeys(CAPACITY, 10**9)), redis_proc.client
    s.join("a")
    r.config_resetstat()
    s.admit("a", [_item(i, "encoded", b"x" * 10) for i in range(64)])
    d = s.lookup("a", list(range(64)))
    assert d.tiers == ["encoded"] * 64
    assert r.info("commandstats")["cmdstat_fcall"]["calls"] == 2


def test_metadata_shares_one_slot_and_values_spread(redis_proc):
    s = _store(redis_proc.client)
    meta = s.keys.declared("job", 7, ["other"])
    assert len({key_slot(k.encode()) for k in meta}) == 1
    slots = {key_slot(s.value_key(t, i).encode()) for t in CAPACITY for i in range(300)}
    assert len(slots) > 800  # spread over the slots, not one hash tag
    staged = s.keys.staged("decoded", 5, "tok")
    assert key_slot(staged.encode()) == key_slot(s.value_key("decoded", 5).encode())


def test_values_are_staged_then_renamed_and_refused_ones_deleted(redis_proc):
    s, r = _store(redis_proc.client), redis_proc.client
    s.join("a")
    s.join("b")
    out = s.admit("a", [_item(0, "augmented", b"AUG"), _item(1, "decoded", b"D1")])
    assert out == [1, 1]
    for key in (s.value_key("augmented", 0), s.value_key("decoded", 1)):
        assert r.exists(key) and r.ttl(key) == -1  # renamed from an expiring staging key
    assert s.admit("a", [_item(2, "decoded", b"D" * 40_000)]) == [0]  # over the budget
    assert not r.exists(s.value_key("decoded", 2))
    assert not list(r.scan_iter(match="*:s:*"))  # no staged value left


def test_a_value_redis_refuses_to_store_is_counted_full_and_forgotten(redis_proc):
    s, r = _store(redis_proc.client, capacity=dict.fromkeys(CAPACITY, 10**9)), redis_proc.client
    s.join("a")
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", int(r.info("memory")["used_memory"]) + 100_000)
    try:
        big = [_item(0, "encoded", b"x" * 400_000), _item(1, "encoded", b"y" * 400_000)]
        assert s.admit("a", big) == [0, 0]
    finally:
        r.config_set("maxmemory", 0)
    assert s.usage()["encoded"] == 0 and s.lookup("a", [0, 1]).tiers == [None, None]


def test_an_evicted_entry_is_never_served_and_leaves_no_value(redis_proc):
    """Eviction under pressure: the entry goes from the metadata first (no lookup finds it),
    its value is deleted by the admitting call; no value is left without an entry."""
    s, r = _store(redis_proc.client, capacity={"encoded": 1_000}), redis_proc.client
    s.join("a")
    s.start_epoch("a", 0)  # 'a' still needs every sample this epoch
    s.join("b", indices=[5, 6])  # 'b' trains on samples 5 and 6 only
    assert s.admit("b", [_item(i, "encoded", b"e" * 300) for i in range(2)]) == [1, 1]
    r.delete(f"{s.prefix}r:a")  # 'a' has been served everything: nobody needs 0 or 1 now
    s.start_epoch("b", 0)  # 'b' needs sample 5
    assert s.admit("b", [_item(5, "encoded", b"n" * 300)]) == [1]  # evicts one of 0, 1
    cached = [i for i in range(10) if r.getbit(s.tier_key("encoded"), i)]
    assert 5 in cached and len(cached) == 2
    on_server = sorted(int(k.split(b":")[-1].rstrip(b"}")) for k in _value_keys(r, "e"))
    assert on_server == cached  # the evicted value is gone with its entry
    assert s.usage()["encoded"] == 2 * (300 + OVERHEAD)


def test_late_joiners_are_declared_and_functions_reloaded(redis_proc):
    s, r = _store(redis_proc.client), redis_proc.client
    s.join("a")
    other = _store(redis.Redis.from_url(redis_proc.url))
    other.join("b")  # 's' still knows only 'a': its next call refreshes the live jobs
    assert s.admit("a", [_item(0, "augmented", b"AUG")]) == [1]
    assert sorted(s._jobs) == ["a", "b"]
    r.function_flush()  # a restarted or flushed server: the functions are loaded again
    assert _read(s, "b", [0])[1] == [b"AUG"]


def test_an_unknown_job_is_a_typed_error(redis_proc):
    s = _store(redis_proc.client)
    with pytest.raises(UnknownJobError, match="SENECA_NOJOB"):
        s.start_epoch("nobody", 0)
