"""ODS guarantees against a real Redis: exactly-once epochs, substitution, pins, leases,
subsets, augmented copies, randomness."""

import collections
import multiprocessing as mp
import random
import time

import pytest
from helpers.serving import serve_as_rank

from ods import defaults as ods_defaults
from ods.admission import REFUSED
from ods.store import OdsStore
from seneca_base.errors import ConfigError, UnknownJobError

TIERS = ("augmented", "decoded", "encoded")


def make_store(redis_proc, n, **kw):
    kw.setdefault("capacity", {"encoded": n // 5})
    kw.setdefault("seed", 1)
    return OdsStore(redis_proc.client, "ds", n, **kw)


def run_epochs(store, jobs, epochs, batches, speeds=None, tier="encoded", admit=True):
    """Drive jobs (interleaved by speed) through epochs; returns per job a list of epochs,
    each a Counter of samples served, and the decisions made."""
    speeds = speeds or dict.fromkeys(jobs, 1)
    clock = dict.fromkeys(jobs, 0.0)
    epoch = dict.fromkeys(jobs, 0)
    served = {j: [collections.Counter()] for j in jobs}
    decisions = []
    for j in jobs:
        store.start_epoch(j, 0)
    active = set(jobs)
    while active:
        j = min(active, key=lambda x: (clock[x], x))
        clock[j] += 1 / speeds[j]
        d = store.decide(j, batches[j])
        if not d.indices:
            if epoch[j] + 1 == epochs:
                active.discard(j)
                continue
            epoch[j] += 1
            store.start_epoch(j, epoch[j])
            served[j].append(collections.Counter())
            continue
        assert d.epoch == epoch[j]
        served[j][-1].update(d.indices)
        decisions.append((j, d))
        store.release(j, d)
        if admit:
            misses = [(i, tier, 1, b"") for i, t in zip(d.indices, d.tiers, strict=True) if not t]
            store.admit(j, misses)
    return served, decisions


def test_exactly_once_per_epoch_with_speeds_and_batch_sizes(redis_proc):
    n = 600
    store = make_store(redis_proc, n)
    jobs = ["a", "b", "c"]
    for j in jobs:
        store.join(j)
    served, decisions = run_epochs(
        store, jobs, epochs=3, batches={"a": 16, "b": 50, "c": 7}, speeds={"a": 1, "b": 2, "c": 3}
    )
    for j in jobs:
        assert len(served[j]) == 3
        for epoch in served[j]:
            assert set(epoch) == set(range(n)) and max(epoch.values()) == 1
    subs = sum(d.substitutions for _, d in decisions)
    hits = sum(d.hits for _, d in decisions)
    assert subs > 0 and hits > 0.3 * 3 * 3 * n  # misses were displaced and served later
    state = store.state()
    assert state["encoded"]["entries"] <= n // 5
    assert state["encoded"]["entries"] == redis_proc.client.bitcount(store.tier_key("encoded"))


def test_substitution_can_be_turned_off(redis_proc):
    store = make_store(redis_proc, 200, capacity={"encoded": 50})
    for j in ("a", "b"):
        store.join(j)
        store.start_epoch(j, 0)
    first = store.decide("a", 50)
    store.admit("a", [(i, "encoded", 1, b"") for i in first.indices])
    plain = store.decide("b", 20, substitute=False)
    assert plain.substitutions == 0 and len(plain.indices) == 20
    cached = store.cached("encoded", plain.indices)  # a uniform pick: its hits are still hits
    assert [t == "encoded" for t in plain.tiers] == cached
    swapped = store.decide("b", 20)  # misses are replaced by a's cached samples
    assert swapped.substitutions > 0 and swapped.hits == 20
    assert set(swapped.indices) <= set(first.indices)


def test_subsets_share_the_intersection(redis_proc):
    n = 400
    store = make_store(redis_proc, n, capacity={"encoded": 100})
    first, second = range(0, 300), range(100, 400)
    store.join("a", first)
    store.join("b", second)
    served, _ = run_epochs(store, ["a", "b"], 2, {"a": 25, "b": 25})
    for job, members in (("a", first), ("b", second)):
        for epoch in served[job]:
            assert set(epoch) == set(members) and max(epoch.values()) == 1
    with pytest.raises(ConfigError, match="indices"):
        store.join("c", [0, n])


def test_pinned_samples_are_not_evicted(redis_proc):
    n = 100
    store = make_store(redis_proc, n, capacity={"encoded": 10})
    store.join("a")
    store.join("b")
    store.start_epoch("a", 0)
    store.start_epoch("b", 0)
    store.admit("a", [(i, "encoded", 1, b"") for i in range(10)])
    d = store.decide("b", 10)  # b sees the 10 cached samples and keeps them pinned
    assert d.hits == 10 and set(d.indices) == set(range(10))
    # a is served the whole epoch, so no live job needs the cached samples any more; sample
    # 50, which b still needs, pushes for room, but every entry is pinned by b's fetch
    while (da := store.decide("a", 10)).indices:
        store.release("a", da)
    assert store.admit("a", [(50, "encoded", 1, b"")]) == [0]
    assert redis_proc.client.bitcount(store.tier_key("encoded")) == 10
    store.release("b", d)  # b's fetch is done: the spent entries may go
    assert store.admit("a", [(50, "encoded", 1, b"")]) == [1]
    assert redis_proc.client.getbit(store.tier_key("encoded"), 50) == 1
    assert store.state()["encoded"]["entries"] == 10


def test_a_sample_pinned_by_two_fetches_stays_pinned_until_both_release(redis_proc):
    """Two jobs are served the same cached samples (their pins set as a whole bitmap): one
    job's release leaves them pinned by the other's fetch; after both, they may go."""
    n = 100
    store = make_store(redis_proc, n, capacity={"encoded": 10})
    for job in ("a", "b", "c"):
        store.join(job)
        store.start_epoch(job, 0)
    store.admit("a", [(i, "encoded", 1, b"") for i in range(10)])
    db, dc = store.decide("b", 10), store.decide("c", 10)
    assert db.hits == dc.hits == 10 and set(db.indices) == set(dc.indices) == set(range(10))
    while (da := store.decide("a", 10)).indices:  # a needs none of them any more
        store.release("a", da)
    store.release("b", db)
    assert store.admit("a", [(50, "encoded", 1, b"")]) == [0]  # c's fetch still pins them
    store.release("c", dc)
    assert store.admit("a", [(50, "encoded", 1, b"")]) == [1]


def test_paper_policy_evicts_at_threshold(redis_proc):
    n = 50
    store = make_store(redis_proc, n, policy="paper", capacity={"encoded": 5})
    for j in ("a", "b"):
        store.join(j)
        store.start_epoch(j, 0)
    store.admit("a", [(i, "encoded", 1, b"") for i in range(5)])
    da = store.decide("a", 5)
    assert store.release("a", da) == []  # 1 use of 2 live jobs
    db = store.decide("b", 5)
    assert sorted(store.release("b", db)) == [0, 1, 2, 3, 4]  # both jobs used them
    assert store.state()["encoded"]["entries"] == 0


# offset 20,000: the jobs train on samples 20,000-20,119, so the bitmaps (2.5 KB) are read with
# BITFIELD; without it, whole (the script reads a bitmap whole up to 32 bytes per position)
@pytest.mark.parametrize("offset", [0, 20_000])
def test_a_job_never_gets_the_same_augmented_copy_twice(redis_proc, offset):
    n = 120
    store = make_store(redis_proc, offset + n, capacity={"augmented": 40}, seed=3)
    jobs = ["a", "b", "c"]
    for j in jobs:
        store.join(j, range(offset, offset + n) if offset else None)
        store.start_epoch(j, 0)
    generation = collections.Counter()
    used = set()
    epoch = dict.fromkeys(jobs, 0)
    rng = random.Random(0)
    for _ in range(400):
        j = rng.choice(jobs)
        d = store.decide(j, rng.choice([4, 9, 16]))
        if not d.indices:
            epoch[j] += 1
            store.start_epoch(j, epoch[j])
            continue
        for i, t in zip(d.indices, d.tiers, strict=True):
            if t == "augmented":
                copy = (j, i, generation[i])
                assert copy not in used
                used.add(copy)
        store.release(j, d)
        misses = [i for i, t in zip(d.indices, d.tiers, strict=True) if t != "augmented"]
        result = store.admit(j, [(i, "augmented", 1, b"") for i in misses])
        for i, ok in zip(misses, result, strict=True):
            if ok == 1:
                generation[i] += 1
                used.add((j, i, generation[i]))  # the job that made the copy used it
    assert min(epoch.values()) >= 2 and len(used) > 100


def test_substitutes_include_copies_past_the_end_of_the_used_copies_bitmap(redis_proc):
    """A job that has used one augmented copy (of sample 3: its used-copies bitmap is one byte
    long) is still offered every other cached copy: all 10 samples of its batch are hits."""
    store = make_store(redis_proc, 200, capacity={"augmented": 200})
    for j in ("a", "b"):
        store.join(j)
        store.start_epoch(j, 0)
    assert store.admit("b", [(i, "augmented", 1, b"") for i in range(100, 200)]) == [1] * 100
    used = store.keys.job("a")[3]  # a's used-copies bitmap, as serving one copy leaves it
    redis_proc.client.delete(used)
    redis_proc.client.setbit(used, 3, 1)
    d = store.decide("a", 10)
    assert d.tiers == ["augmented"] * 10 and all(i >= 100 for i in d.indices)


def test_lease_expiry_and_leave(redis_proc):
    store = make_store(redis_proc, 50, lease=1.0)  # outlives a few round trips, when busy
    store.join("a")
    store.join("b")
    assert store.state()["live_jobs"] == 2
    time.sleep(1.2)
    store.join("a")  # a renews; b has crashed
    assert store.state()["live_jobs"] == 1
    store.leave("a")
    assert store.state()["live_jobs"] == 0
    with pytest.raises(UnknownJobError, match="SENECA_NOJOB"):
        store.decide("a", 5)


def test_a_lapsed_lease_has_run_out_at_once_and_keeps_the_state(redis_proc):
    store = make_store(redis_proc, 50)
    store.join("a")
    store.start_epoch("a", 0)
    taken = store.decide("a", 20).indices
    for _ in range(200):  # in the same millisecond too
        store.join("a")
        store.lapse("a")
        assert store.refresh_jobs() == [] and store.lease_end("a") <= store.now_ms()
    store.join("a")  # a run that continues the epoch: the 30 samples not taken
    rest = store.decide("a", 50).indices
    assert len(rest) == 30 and not set(rest) & set(taken)


def test_late_join_starts_a_full_epoch(redis_proc):
    n = 300
    store = make_store(redis_proc, n)
    store.join("a")
    store.start_epoch("a", 0)
    first = store.decide("a", 100)
    store.admit("a", [(i, "encoded", 1, b"") for i in first.indices])
    store.join("late")
    served, _ = run_epochs(store, ["late"], 1, {"late": 32})
    assert set(served["late"][0]) == set(range(n)) and max(served["late"][0].values()) == 1
    rest = collections.Counter(first.indices)
    while d := store.decide("a", 64):
        if not d.indices:
            break
        rest.update(d.indices)
    assert set(rest) == set(range(n)) and max(rest.values()) == 1


@pytest.mark.slow
def test_ranks_of_one_job_together_see_each_sample_once(redis_proc):
    n = 2000
    store = make_store(redis_proc, n, capacity={"encoded": n // 4})
    store.join("job")
    assert store.start_epoch("job", 0) == (0, 0)
    assert store.start_epoch("job", 0) == (0, 0)  # the second rank's call changes nothing
    ctx = mp.get_context("spawn")
    out, barrier = ctx.Queue(), ctx.Barrier(3)
    rank = (redis_proc.url, "ds", n, 13, barrier, out)
    procs = [ctx.Process(target=serve_as_rank, args=rank) for _ in range(3)]
    for p in procs:
        p.start()
    parts = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert all(parts), "every rank got a share"
    together = collections.Counter(i for part in parts for i in part)
    assert set(together) == set(range(n)) and max(together.values()) == 1


def test_order_is_random(redis_proc):
    from scipy import stats  # here: a second of import, paid by the process that runs this

    n, runs = 200, 60
    first_batch_deciles = collections.Counter()
    correlations = []
    for seed in range(runs):
        store = OdsStore(redis_proc.client, f"r{seed}", n, capacity={"encoded": 0}, seed=seed)
        store.join("a")
        store.start_epoch("a", 0)
        order = []
        while d := store.decide("a", 20):
            if not d.indices:
                break
            order += d.indices
        assert sorted(order) == list(range(n))
        first_batch_deciles.update(i * 10 // n for i in order[:20])
        correlations.append(stats.spearmanr(order, range(n)).statistic)
    # the first batch is spread evenly over the index range (chi-square over 60 seeds)
    counts = [first_batch_deciles[k] for k in range(10)]
    assert stats.chisquare(counts).pvalue > 0.001
    # no correlation of position with index, per run and on average
    assert max(abs(c) for c in correlations) < 0.35
    assert abs(sum(correlations) / runs) < 0.05


def test_option_errors(redis_proc):
    with pytest.raises(ConfigError, match="policy"):
        make_store(redis_proc, 10, policy="lru")
    with pytest.raises(ConfigError, match="samples"):
        make_store(redis_proc, 0)
    with pytest.raises(ConfigError, match="capacity"):
        make_store(redis_proc, 10, capacity={"pixels": 1})


def value_store(redis_proc, capacity):
    """A store that keeps values, with job "a" in epoch 0."""
    store = make_store(redis_proc, 10, capacity=capacity, values=True, overhead=96)
    store.join("a")
    store.start_epoch("a", 0)
    return store


def test_admitted_values_are_staged_then_renamed(redis_proc):
    r = redis_proc.client
    store = value_store(redis_proc, {"augmented": 10**6})
    items = [(i, "augmented", 1096, bytes([i]) * 1000) for i in range(3)]
    assert store.admit("a", items) == [1, 1, 1]
    for i in range(3):
        key = store.value_key("augmented", i)
        assert r.get(key) == bytes([i]) * 1000 and r.ttl(key) == -1  # no staging expiry left
    assert store.admit("a", [(0, "augmented", 1096, b"other")]) == [2]  # already cached
    assert r.get(store.value_key("augmented", 0)) == bytes([0]) * 1000  # kept, not replaced
    assert not list(r.scan_iter(match=store.prefix + "s:*"))  # the refused copy was dropped
    assert store.state()["augmented"] == {"entries": 3, "units": 3 * 1096}


def test_values_redis_refuses_to_store_are_not_admitted(redis_proc):
    r = redis_proc.client
    store = value_store(redis_proc, {"encoded": 10**9})
    items = [(i, "encoded", 2_000_096, bytes([i]) * 2_000_000) for i in range(2)]
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", int(r.info("memory")["used_memory"]) + 100_000)
    try:
        assert store.admit("a", items) == [REFUSED, REFUSED]  # every SET answered OOM: errors
    finally:
        r.config_set("maxmemory", 0)
    assert store.state()["encoded"] == {"entries": 0, "units": 0}
    assert not list(r.scan_iter(match=store.prefix + "*v:*"))
    assert store.admit("a", items) == [1, 1]  # with room again


@pytest.mark.parametrize("policy", ["seneca", "paper"])
def test_batches_of_any_size_up_to_65536(redis_proc, policy, monkeypatch):
    """No command the functions build grows with the batch past Lua's unpack limit: large
    decisions, admissions, lookups and releases, with and without substitution."""
    # a call of a kind measured on batches of 2,048 gets a deadline for those; one of 65,536
    # on a loaded machine may pass it (a loader would read from storage): here, no deadline
    monkeypatch.setattr(ods_defaults, "DEADLINE_FLOOR", 60.0)
    monkeypatch.setattr(ods_defaults, "DEADLINE_CEILING", 60.0)
    n = 200_000
    store = make_store(redis_proc, n, policy=policy, capacity={"encoded": n})
    for job in ("a", "b"):
        store.join(job)
        store.start_epoch(job, 0)
    seen = collections.Counter()
    for batch in (2_048, 65_536):
        d = store.decide("a", batch)
        assert len(d.indices) == batch and d.hits == 0
        seen.update(d.indices)
        assert store.admit("a", [(i, "encoded", 1, b"") for i in d.indices]) == [1] * batch
        store.release("a", d)
    both = store.decide("b", 65_536)  # cached samples substitute for misses
    assert both.hits == len(both.indices) == 65_536
    store.release("b", both)
    assert store.lookup("b", list(range(20_000))).hits > 0
    assert max(seen.values()) == 1


def _skewed_join(url, skew, job):
    import redis as redis_py

    real = time.time
    time.time = lambda: real() + skew  # this host's clock is off by skew seconds
    store = OdsStore(redis_py.Redis.from_url(url), "ds", 100, capacity={"encoded": 10}, seed=1)
    store.join(job)


def test_leases_are_on_the_servers_clock(redis_proc):
    """Jobs on hosts whose clocks are an hour ahead or behind hold leases as long as any."""
    ctx = mp.get_context("fork")
    for skew, job in ((3600, "ahead"), (-3600, "behind")):
        p = ctx.Process(target=_skewed_join, args=(redis_proc.url, skew, job))
        p.start()
        p.join(30)
        assert p.exitcode == 0
    store = make_store(redis_proc, 100)
    assert sorted(store.refresh_jobs()) == ["ahead", "behind"]
    seconds, micros = redis_proc.client.time()
    server_ms = seconds * 1000 + micros // 1000
    for job in ("ahead", "behind"):
        lease_end = redis_proc.client.zscore(store.keys.jobs, job)
        assert abs(lease_end - (server_ms + store.lease_ms)) < 3000
