"""The cache engine with values (what SenecaLoader uses, with or without ODS): tiers, budgets,
the two-step admission, evictions, declared keys and typed errors, on a real redis-server."""

import multiprocessing as mp
import random
import time

import pytest
import redis
from redis.crc import key_slot

from ods.admission import REFUSED, admit_args
from ods.store import OdsStore
from seneca_base.errors import UnknownJobError

CAPACITY = {"encoded": 20_000, "decoded": 30_000, "augmented": 10_000}
OVERHEAD = 96


def _store(client, capacity=CAPACITY, samples=1000, **options):
    return OdsStore(
        client,
        "ds1",
        samples,
        capacity=capacity,
        values=True,
        overhead=OVERHEAD,
        seed=1,
        **options,
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
    assert _read(s, "a", [0])[1] == [b"y" * 100]  # the same size: the offer heals the value
    assert s.admit("a", [_item(0, "encoded", b"w" * 99)]) == [2]
    assert _read(s, "a", [0])[1] == [b"y" * 100]  # another size is not taken for it
    assert s.usage()["encoded"] == 100 + OVERHEAD
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


def test_augmented_copy_spent_by_the_jobs_that_train_on_it(redis_proc):
    """A job training on a subset without the sample does not keep its copy; one whose subset
    holds it does, until it used the copy too. A copy made again serves every job again."""
    s, r = _store(redis_proc.client), redis_proc.client
    s.join("a")
    s.join("b", range(1, 10))  # never trains on sample 0
    s.join("c", range(0, 10))
    s.join("d")
    assert s.admit("a", [_item(0, "augmented", b"A0"), _item(1, "augmented", b"A1")]) == [1, 1]
    assert _read(s, "c", [0, 1])[1] == [b"A0", b"A1"]
    assert _read(s, "d", [0])[1] == [b"A0"]  # a, c and d used copy 0; b never needs it
    assert r.getbit(s.tier_key("augmented"), 0) == 0
    assert not r.exists(s.value_key("augmented", 0))
    assert _read(s, "d", [1])[1] == [b"A1"]  # copy 1: b still needs it
    assert r.getbit(s.tier_key("augmented"), 1) == 1
    assert _read(s, "b", [1])[1] == [b"A1"]
    assert r.getbit(s.tier_key("augmented"), 1) == 0
    assert s.admit("b", [_item(0, "augmented", b"B0")]) == [1]  # a new copy, used by b only
    for job in ("a", "c"):
        assert _read(s, job, [0])[1] == [b"B0"]
        assert r.getbit(s.tier_key("augmented"), 0) == 1  # d has not used this copy yet
    assert _read(s, "d", [0])[1] == [b"B0"]
    assert r.getbit(s.tier_key("augmented"), 0) == 0


def test_lookup_and_admit_take_one_function_call_each(redis_proc):
    s, r = _store(redis_proc.client, capacity=dict.fromkeys(CAPACITY, 10**9)), redis_proc.client
    s.join("a")
    r.config_resetstat()
    s.admit("a", [_item(i, "encoded", b"x" * 10) for i in range(64)])
    d = s.lookup("a", list(range(64)))
    assert d.tiers == ["encoded"] * 64
    assert r.info("commandstats")["cmdstat_fcall"]["calls"] == 2


def test_a_large_admission_is_made_in_calls_of_at_most_admit_chunk_values(redis_proc):
    """No admit call accounts more than ADMIT_CHUNK values (each holds the server's one thread
    for a bounded time); the answers and the budget are those of one admission."""
    from ods import defaults

    s, r = _store(redis_proc.client, capacity=dict.fromkeys(CAPACITY, 10**9)), redis_proc.client
    s.join("a")
    count = 2 * defaults.ADMIT_CHUNK + 5
    r.config_resetstat()
    items = [_item(i, "encoded", b"x" * 10) for i in range(count)]
    assert s.admit("a", [*items, items[0]]) == [1] * count + [2]
    assert r.info("commandstats")["cmdstat_fcall"]["calls"] == 3
    assert s.usage()["encoded"] == count * (10 + OVERHEAD)
    assert s.lookup("a", list(range(count))).tiers == ["encoded"] * count


def test_metadata_shares_one_slot_and_values_spread(redis_proc):
    s = _store(redis_proc.client)
    meta = s.keys.declared("job", 7, ["other"])
    assert len({key_slot(k.encode()) for k in meta}) == 1
    slots = {key_slot(s.value_key(t, i).encode()) for t in CAPACITY for i in range(300)}
    assert len(slots) > 800  # spread over the slots, not one hash tag
    staged = s.keys.staged("decoded", 5, "tok")
    assert key_slot(staged.encode()) == key_slot(s.value_key("decoded", 5).encode())


def test_a_batch_of_value_keys_is_each_value_key():
    from ods.keys import Keys

    for keys in (Keys("ds"), Keys("ds", view="crop")):
        items = [(t, i) for i in (0, 7, 123_456) for t in CAPACITY]
        assert keys.values(items) == [keys.value(t, i) for t, i in items]
    assert Keys("ds", view="crop").value("augmented", 3) == "seneca:v:{ds:a:crop:3}"
    assert Keys("ds", view="crop").value("encoded", 3) == "seneca:v:{ds:e:3}"


def test_declared_keys_follow_their_arguments():
    from ods.keys import Keys

    keys = Keys("ds")
    first = keys.declared("j", 7, ["x"])
    later = keys.declared("j", 8, ["x", "y"])
    assert keys.pins(7)[0] in first and keys.pins(8)[0] in later
    assert len(later) == len(first) + 3 and keys.members("y") in later
    assert keys.declared("j", 7, ["x"]) == first and keys.declared("k", 7, ["x"]) != first


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


def _sets(r):
    """SET commands the server has run so far (INFO commandstats)."""
    return int(r.info("commandstats").get("cmdstat_set", {}).get("calls", 0))


def test_a_value_offered_to_a_full_tier_is_sent_only_once_admitted(redis_proc):
    """``later``: a crop offered to a full augmented tier is not staged. Refused (the cached
    copies are needed as much), it costs no write; admitted (it evicts a copy nobody needs), it
    is written in place, permanent, and the evicted value is deleted."""
    r = redis_proc.client
    s = _store(r, capacity={"augmented": 2 * (300 + OVERHEAD)})
    for job in ("a", "b"):
        s.join(job)
        s.start_epoch(job, 0)
    r.delete(f"{s.prefix}r:a")  # a made its copies of samples it was served: only b needs them
    assert s.admit("a", [_item(i, "augmented", b"c" * 300) for i in (0, 1)]) == [1, 1]
    before = _sets(r)
    assert s.admit("a", [_item(2, "augmented", b"n" * 300)], later=[0]) == [0]  # b needs all
    assert _sets(r) == before and not r.exists(s.value_key("augmented", 2))
    assert not list(r.scan_iter(match="*:s:*"))
    r.setbit(f"{s.prefix}r:b", 0, 0)  # b has been served sample 0: nobody needs copy 0
    assert s.admit("a", [_item(2, "augmented", b"n" * 300)], later=[0]) == [1]
    assert _sets(r) == before + 1
    key = s.value_key("augmented", 2)
    assert r.get(key) == b"n" * 300 and r.ttl(key) == -1
    assert not r.exists(s.value_key("augmented", 0))  # evicted, its value deleted
    assert _read(s, "b", [2, 1])[1] == [b"n" * 300, b"c" * 300]
    assert s.usage()["augmented"] == 0  # b was the last job to need them: both spent


def test_a_new_crop_counts_the_jobs_that_used_an_earlier_copy_of_its_sample(redis_proc):
    """A job that used a spent copy of a sample (an earlier epoch's, say) may use a new copy:
    an offered crop's demand counts it, so the crop can evict a copy fewer jobs need."""
    r = redis_proc.client
    s = _store(r, capacity={"augmented": 300 + OVERHEAD})  # one crop
    for job in ("a", "b"):
        s.join(job)
        s.start_epoch(job, 0)
    r.delete(f"{s.prefix}r:a")  # a was served everything it makes
    assert s.admit("a", [_item(0, "augmented", b"old" * 100)]) == [1]
    assert _read(s, "b", [0])[1] == [b"old" * 100]  # b used copy 0: spent
    assert s.usage()["augmented"] == 0
    s.join("c", indices=[0, *range(2, 10)])  # c never trains on sample 1
    s.start_epoch("c", 0)
    assert s.admit("a", [_item(1, "augmented", b"one" * 100)]) == [1]  # only b needs it
    # a new copy of sample 0: b (which used the old one) and c need it, more than copy 1
    assert s.admit("a", [_item(0, "augmented", b"new" * 100)], later=[0]) == [1]
    assert _read(s, "b", [0, 1])[1] == [b"new" * 100, None]


@pytest.mark.parametrize("later", [[], [1]])  # staged, or value 1 written once admitted
def test_a_value_redis_refuses_to_store_is_reported_refused_and_forgotten(redis_proc, later):
    s, r = _store(redis_proc.client, capacity=dict.fromkeys(CAPACITY, 10**9)), redis_proc.client
    s.join("a")
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", int(r.info("memory")["used_memory"]) + 100_000)
    try:
        big = [_item(0, "encoded", b"x" * 400_000), _item(1, "encoded", b"y" * 400_000)]
        assert s.admit("a", big, later=later) == [REFUSED, REFUSED]  # an error, not a full tier
    finally:
        r.config_set("maxmemory", 0)
    assert s.usage()["encoded"] == 0 and s.lookup("a", [0, 1]).tiers == [None, None]


def test_a_staged_value_redis_refuses_is_reported_refused_even_when_its_tier_is_full(
    redis_proc,
):
    """A value staged for a tier that turns out full is refused by the policy (0), but the
    server refused to store it first: that is reported (an error the job counts and warns
    about), never only a full tier."""
    s, r = _store(redis_proc.client, capacity={"encoded": 1_000}), redis_proc.client
    s.join("a")
    assert s.admit("a", [_item(0, "encoded", b"e" * 800)]) == [1]  # the tier is full now
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", int(r.info("memory")["used_memory"]) + 100_000)
    try:
        staged = [_item(1, "encoded", b"x" * 400_000)]
        assert s.admit("a", staged) == [REFUSED]  # by Redis, before the policy refused it
    finally:
        r.config_set("maxmemory", 0)
    assert s.usage()["encoded"] == 800 + OVERHEAD


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
    assert sorted(s.declared_jobs) == ["a", "b"]
    r.function_flush()  # a restarted or flushed server: the functions are loaded again
    assert _read(s, "b", [0])[1] == [b"AUG"]


def test_an_unknown_job_is_a_typed_error(redis_proc):
    s = _store(redis_proc.client)
    with pytest.raises(UnknownJobError, match="SENECA_NOJOB"):
        s.start_epoch("nobody", 0)


def _pressure(s, r):
    """Samples 0 and 1 cached in the encoded tier and needed by nobody; 'b' needs 5."""
    s.join("b", indices=[0, 1, 5])
    assert s.admit("b", [_item(i, "encoded", b"e" * 300) for i in range(2)]) == [1, 1]
    s.start_epoch("b", 0)
    for i in (0, 1):
        r.setbit(f"{s.prefix}r:b", i, 0)  # 'b' was served 0 and 1


def _on_server(r):
    return sorted(int(k.split(b":")[-1].rstrip(b"}")) for k in _value_keys(r, "e"))


def test_a_value_whose_deleter_crashed_is_collected_after_the_grace(redis_proc):
    """The process an eviction named the value to dies before deleting it: once the grace
    has passed, the next admission (of any job) deletes it. (A grace of seconds: the calls
    "within the grace" below are two round trips apart, even on a busy machine.)"""
    s = _store(redis_proc.client, capacity={"encoded": 1_000}, orphan_grace=3.0)
    r = redis_proc.client
    _pressure(s, r)
    r.set(s.value_key("encoded", 5), b"n" * 300)  # the value renamed in; then the crash:
    results, evicted = s.call(
        "admit", "b", *admit_args(s, [(5, "encoded", 300 + OVERHEAD, b"")]), jobs=True
    )
    assert results == [1] and len(evicted) == 2  # one of 0, 1 evicted, its value never deleted
    assert _on_server(r) == [0, 1, 5]
    s.admit("b", [_item(7, "decoded", b"d")])  # within the grace: nothing collected
    assert _on_server(r) == [0, 1, 5]
    time.sleep(3.1)
    s.admit("b", [_item(8, "decoded", b"d")])
    cached = [i for i in range(10) if r.getbit(s.tier_key("encoded"), i)]
    assert _on_server(r) == cached and len(cached) == 2
    assert r.zcard(f"{s.prefix}gc") == 0


def test_a_late_rename_after_its_eviction_is_collected(redis_proc):
    """A value admitted, then evicted before its admitter renamed it into place: the late
    rename leaves a value without an entry, which is collected after the grace."""
    s = _store(redis_proc.client, capacity={"encoded": 1_000}, orphan_grace=0.3)
    r = redis_proc.client
    _pressure(s, r)
    r.delete(f"{s.prefix}r:b")  # nobody needs anything now: 9 has no more demand than 0, 1
    s.join("c", indices=[9])
    s.start_epoch("c", 0)
    for i in (0, 1):
        r.setbit(f"{s.prefix}r:c", i, 0)
    s.call("forget", "b", "e", 1)  # room for one
    r.delete(s.value_key("encoded", 1))
    assert s.call("admit", "b", *admit_args(s, [(2, "encoded", 300 + OVERHEAD, b"")]), jobs=True)[
        0
    ] == [1]
    # before 2's value is renamed into place, an admission of 9 (needed by 'c') evicts 2 or 0
    assert s.admit("c", [_item(9, "encoded", b"n" * 300)]) == [1]
    r.set(s.value_key("encoded", 2), b"late" * 75)  # the late rename
    time.sleep(0.4)
    s.admit("c", [_item(8, "decoded", b"d")])
    cached = [i for i in range(10) if r.getbit(s.tier_key("encoded"), i)]
    assert 9 in cached and _on_server(r) == cached


def test_an_entry_whose_value_went_missing_heals_at_its_next_miss(redis_proc):
    s, r = _store(redis_proc.client), redis_proc.client
    s.join("a")
    assert s.admit("a", [_item(3, "decoded", b"D3")]) == [1]
    r.delete(s.value_key("decoded", 3))  # an UNLINK of a racing eviction landed late
    assert _read(s, "a", [3]) == (["decoded"], [None])  # a counted miss, read from storage
    assert s.admit("a", [_item(3, "decoded", b"D3")]) == [2]  # offered again: it heals
    assert _read(s, "a", [3]) == (["decoded"], [b"D3"])
    assert s.usage()["decoded"] == 2 + OVERHEAD


def test_views_share_encoded_and_decoded_entries_and_keep_their_own_augmented(redis_proc):
    """Two transforms (views) of one dataset: one encoded/decoded tier and budget; an augmented
    copy serves, and is spent by, the jobs of its view only."""
    r = redis_proc.client
    v1, v2 = _store(r, view="v1"), _store(r, view="v2")
    for s, jobs in ((v1, ("a", "b")), (v2, ("c",))):
        for job in jobs:
            s.join(job)
    assert v1.admit("a", [_item(0, "augmented", b"AUG"), _item(1, "decoded", b"D1")]) == [1, 1]
    assert _read(v2, "c", [0, 1]) == ([None, "decoded"], [None, b"D1"])
    assert v2.admit("c", [_item(1, "decoded", b"D1")]) == [2]  # one entry, one budget
    assert v1.usage()["decoded"] == v2.usage()["decoded"] == 2 + OVERHEAD
    assert v2.usage()["augmented"] == 0
    assert _read(v1, "b", [0])[1] == [b"AUG"]  # 'b' was the last of v1's jobs to use it:
    assert v1.usage()["augmented"] == 0  # spent, whatever 'c' (another view) still needs
    assert not r.exists(v1.value_key("augmented", 0))
    assert v1.value_key("augmented", 0) != v2.value_key("augmented", 0)
    assert v1.same_view(r.execute_command(*v1.live_command())) == 2
    assert v2.same_view(r.execute_command(*v2.live_command())) == 1
