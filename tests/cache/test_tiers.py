import multiprocessing as mp
import random

import pytest

from seneca import defaults
from seneca.cache.client import CacheClient
from seneca.cache.keys import KeySpace
from seneca.cache.tiers import CacheTiers

BUDGETS = {"encoded": 20_000, "decoded": 30_000, "augmented": 10_000}


def _tiers(url, job="job-a", budgets=BUDGETS):
    return CacheTiers(CacheClient(url), KeySpace("ds1", "tf1"), budgets, job)


def test_lookup_finds_the_cheapest_tier(redis_url):
    t = _tiers(redis_url)
    assert t.lookup([0, 1]).tiers == [None, None]
    t.admit([(0, "encoded", b"E0"), (1, "encoded", b"E1"), (1, "decoded", b"D1")])
    found = t.lookup([0, 1, 2])
    assert found.tiers == ["encoded", "decoded", None]
    assert found.values == [b"E0", b"D1", None]
    assert found.used["encoded"] == 2 * (2 + defaults.ENTRY_OVERHEAD)


def test_admission_is_idempotent_and_budgeted(redis_url):
    t = _tiers(redis_url)
    r = t.admit([(0, "encoded", b"x" * 100), (0, "encoded", b"y" * 100)])
    assert r.admitted["encoded"] == 1
    assert t.lookup([0]).values == [b"x" * 100]
    r = t.admit([(1, "encoded", b"z" * 30_000)])
    assert r.full["encoded"] == 1 and t.lookup([1]).tiers == [None]


def _admitter(url, seed, n):
    rng = random.Random(seed)
    t = _tiers(url, job=f"w{seed}")
    for _ in range(n):
        batch = [
            (rng.randrange(400), rng.choice(["encoded", "decoded"]), b"v" * rng.randrange(50, 900))
            for _ in range(8)
        ]
        t.admit(batch)


def test_budgets_hold_with_concurrent_processes(redis_proc):
    procs = [mp.Process(target=_admitter, args=(redis_proc.url, s, 40)) for s in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    t = _tiers(redis_proc.url)
    used = t.usage()
    r = redis_proc.client
    for tier, code in (("encoded", "e"), ("decoded", "d")):
        assert 0 < used[tier] <= BUDGETS[tier]
        keys = list(r.scan_iter(match=f"*:{code}:*"))
        actual = sum(r.strlen(k) + defaults.ENTRY_OVERHEAD for k in keys)
        assert actual == used[tier]  # the counter is exact, not just an upper bound
        assert used[tier] > BUDGETS[tier] - 1000  # and the tier did fill up


def test_augmented_copy_served_once_per_job_and_never_to_its_maker(redis_url):
    a, b, c = (_tiers(redis_url, job=j) for j in ("a", "b", "c"))
    a.lookup([0])  # single live job: augmented copies are not admitted (no one to share with)
    assert a.admit([(0, "augmented", b"AUG")]).full["augmented"] == 1
    b.lookup([0])
    c.lookup([0])  # three live jobs now
    assert a.admit([(0, "augmented", b"AUG")]).admitted["augmented"] == 1
    assert a.lookup([0]).tiers == [None]  # the maker never gets its own copy back
    assert b.lookup([0]).values == [b"AUG"]
    assert b.lookup([0]).tiers == [None]  # each job at most once
    assert c.lookup([0]).values == [b"AUG"]  # last live job: copy is used up and deleted
    assert a.usage()["augmented"] == 0
    assert a.lookup([0]).tiers == [None]


def test_batch_lookup_and_admit_take_one_script_call_each(redis_proc):
    t = _tiers(redis_proc.url, budgets={k: 10**9 for k in BUDGETS})
    r = redis_proc.client
    t.lookup([0])  # loads the scripts
    r.config_resetstat()
    t.admit([(i, "encoded", b"x" * 10) for i in range(64)])
    found = t.lookup(list(range(64)))
    assert found.tiers == ["encoded"] * 64
    stats = r.info("commandstats")
    assert stats["cmdstat_evalsha"]["calls"] == 2


@pytest.mark.parametrize("shards", [1, 4])
def test_keys_carry_one_hash_tag_per_shard(shards):
    ks = KeySpace("abc", "t", shards=shards)
    for i in range(20):
        tag = ks.sample("decoded", i).split("{")[1].split("}")[0]
        assert tag == f"abc.{i % shards}"
        assert ks.used(i % shards).startswith(f"seneca:{{{tag}}}")


def test_values_are_staged_and_renamed_and_used_up_copies_read_once(redis_proc):
    a, b = _tiers(redis_proc.url, job="a"), _tiers(redis_proc.url, job="b")
    r = redis_proc.client
    a.lookup([0])
    b.lookup([0])  # two live jobs
    assert a.admit([(0, "augmented", b"AUG"), (1, "decoded", b"D1")]).admitted == {
        "augmented": 1,
        "decoded": 1,
        "encoded": 0,
    }
    ks = a.keys
    assert r.get(ks.sample("augmented", 0)) == b"AUG" and r.ttl(ks.sample("augmented", 0)) == -1
    assert r.ttl(ks.sample("decoded", 1)) == -1  # renamed from an expiring staging key
    assert not list(r.scan_iter(match="*:s:*"))  # no staged value left
    found = b.lookup([0, 1])  # b is the last live job to use the copy: it is taken and read
    assert found.tiers == ["augmented", "decoded"] and found.values == [b"AUG", b"D1"]
    assert r.exists(ks.sample("augmented", 0), ks.augmented_meta(0)) == 0
    assert not list(r.scan_iter(match="*:t:*"))  # the taken key was deleted after its read
    assert a.usage() == {"augmented": 0, "decoded": 2 + defaults.ENTRY_OVERHEAD, "encoded": 0}


def test_a_set_refused_by_redis_is_counted_full(redis_proc):
    t = _tiers(redis_proc.url, budgets={k: 10**9 for k in BUDGETS})
    r = redis_proc.client
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", int(r.info("memory")["used_memory"]) + 100_000)
    try:
        result = t.admit([(0, "encoded", b"x" * 400_000), (1, "encoded", b"y" * 400_000)])
        assert result.full["encoded"] == 2 and result.admitted["encoded"] == 0
    finally:
        r.config_set("maxmemory", 0)
    assert t.usage()["encoded"] == 0 and t.lookup([0, 1]).tiers == [None, None]


class _Racing(CacheTiers):
    """Deletes the keys the lookup script named before they are read (as when another job
    used up an augmented copy in between)."""

    def _execute(self, before, calls):
        out = super()._execute(before, calls)
        for reply in out:
            names = [bytes(k) for k in reply[5::2] if k]
            if names and calls[0][0] == "lookup":
                self.client.redis.delete(*names)
        return out


def test_a_value_gone_before_its_read_is_a_miss(redis_url):
    t = _Racing(CacheClient(redis_url), KeySpace("ds1", "tf1"), BUDGETS, "job")
    t.admit([(0, "encoded", b"E0")])
    found = t.lookup([0, 1])
    assert found.tiers == [None, None] and found.values == [None, None]
