"""A large batch is decided in several bounded calls: what each call served, seen by the server
(MONITOR), and what the batches come to (exactly once, one pin bucket, hits not bunched)."""

import collections

import pytest
import redis

from ods import defaults
from ods.sampler import OdsBatchSampler
from ods.store import OdsStore


def _decide_sizes(redis_proc, action) -> list[int]:
    """The ``want`` of every decide call the server ran while ``action()`` ran (MONITOR)."""
    watcher = redis.Redis.from_url(redis_proc.url)
    with watcher.monitor() as monitor:
        action()
        redis_proc.client.echo("seneca-test-done")
        sizes = []
        while True:
            parts = monitor.next_command()["command"].split(" ")
            if parts[0] == "ECHO" and parts[1:] == ["seneca-test-done"]:
                return sizes
            if parts[0] == "FCALL" and parts[1].endswith("_decide"):
                argv = parts[3 + int(parts[2]) :]  # now, job, ..., D, the declared jobs, want
                sizes.append(int(argv[8 + int(argv[7])]))


def test_a_batch_above_the_chunk_is_decided_in_calls_of_at_most_the_chunk(redis_proc):
    n = 2_000
    store = OdsStore(redis_proc.client, "dc", n, capacity={"encoded": n}, seed=3)
    assert store.decide_chunk == defaults.DECIDE_CHUNK
    big = OdsStore(redis_proc.client, "dc2", 14_197_122, capacity={"encoded": 1}, seed=3)
    assert big.decide_chunk == 14_197_122 // defaults.DECIDE_CHUNK_SAMPLES > defaults.DECIDE_CHUNK
    for job in ("a", "b"):
        store.join(job)
        store.start_epoch(job, 0)
    first = store.decide("a", 300)
    store.admit("a", [(i, "encoded", 1, b"") for i in first.indices])
    store.release("a", first)
    got = []
    sizes = _decide_sizes(redis_proc, lambda: got.append(store.decide("b", 300)))
    assert sizes == [128, 128, 44]
    d = got[0]
    assert len(d.indices) == len(set(d.indices)) == 300
    # b's batch: the 300 samples a cached, drawn from C in the first calls, are shuffled in
    hits = [t is not None for t in d.tiers]
    assert sum(hits) == 300 and d.substitutions > 0
    pins = store.keys.pins(d.pin_bucket)[0]
    assert redis_proc.client.bitcount(pins) == 300  # in the bucket the decision names
    store.release("b", d)
    assert redis_proc.client.bitcount(pins) == 0


def test_epochs_of_batches_above_the_chunk_are_exactly_once(redis_proc):
    n = 1_000
    store = OdsStore(redis_proc.client, "dx", n, capacity={"encoded": n // 3}, seed=4)
    batches = {"a": 300, "b": 170, "c": 256}
    for j in batches:
        store.join(j)
    halves = [0, 0]  # hits in the first and second half of batches with hits and misses
    for epoch in range(3):
        served = {j: collections.Counter() for j in batches}
        for j in batches:
            store.start_epoch(j, epoch)
        while True:
            decisions = [store.decide(j, b) for j, b in batches.items()]
            if not any(d.indices for d in decisions):
                break
            for j, d in zip(batches, decisions, strict=True):
                served[j].update(d.indices)
                hits = [t is not None for t in d.tiers]
                if 0 < sum(hits) < len(hits):
                    halves[0] += sum(hits[: len(hits) // 2])
                    halves[1] += sum(hits[len(hits) // 2 :])
                store.release(j, d)
                misses = [i for i, t in zip(d.indices, d.tiers, strict=True) if not t]
                store.admit(j, [(i, "encoded", 1, b"") for i in misses])
        for counts in served.values():
            assert set(counts) == set(range(n)) and max(counts.values()) == 1
    # hits land anywhere in a batch, not only in the part of the calls that drew them first
    assert sum(halves) > 300 and 0.4 < halves[1] / sum(halves) < 0.6, halves


def test_the_sampler_fills_batches_above_the_chunk_while_it_looks_ahead(redis_proc):
    """A covered job posts one call's worth ahead (the chunk) and decides the rest of the
    batch when it needs it: whole batches, exactly once, no call above the chunk."""
    n = 2_000
    store = OdsStore(redis_proc.client, "ds", n, capacity={"encoded": n}, seed=5)
    store.join("warm")
    store.start_epoch("warm", 0)
    while d := store.decide("warm", 500):  # everything cached
        if not d.indices:
            break
        store.admit("warm", [(i, "encoded", 1, b"") for i in d.indices])
        store.release("warm", d)
    sampler = OdsBatchSampler(store, "job", batch_size=256)
    batches = []

    def epoch():
        for b in sampler:
            batches.append(b)
            store.release("job", b)

    sizes = _decide_sizes(redis_proc, epoch)
    assert [len(b) for b in batches] == [256] * 7 + [208]
    seen = collections.Counter(p.index for b in batches for p in b)
    assert set(seen) == set(range(n)) and max(seen.values()) == 1
    assert all(p.tier == "encoded" for b in batches for p in b)
    assert max(sizes) == store.decide_chunk and len(sizes) >= n // store.decide_chunk


# (dataset, cached samples): drawn with whole-bitmap updates, by single-bit probes (C dense)
# and by word probes; then bit by bit, by next-set-bit probes (C sparse in a large dataset)
ROUTES = [
    (2_000, [i for i in range(2_000) if i % 5]),
    (2_000, range(3, 2_000, 5)),
    (400_000, range(7, 400_000, 1_000)),
]


@pytest.mark.parametrize(("n", "cached"), ROUTES)
def test_hits_drawn_from_a_large_cached_set_leave_the_epoch_pinned_and_used(redis_proc, n, cached):
    """Hits drawn at random from many cached samples, on each route of the draw: distinct,
    each cached and unserved, pinned until released, out of the job's epoch, and its augmented
    copy marked used by the job."""
    r = redis_proc.client
    store = OdsStore(r, "dh", n, capacity={"augmented": n}, seed=6)
    for job in ("a", "b"):
        store.join(job)
        store.start_epoch(job, 0)
    assert store.admit("a", [(i, "augmented", 1, b"") for i in cached]) == [1] * len(cached)
    _, rest, _, used, _ = store.keys.job("b")
    drawn: list[int] = []

    def pinned(d):  # in the decision's pin bucket and the one before (if one began since)
        keys = store.keys.pins(d.pin_bucket)
        return r.bitcount(keys[0]) + r.bitcount(keys[2])

    for _ in range(8):
        d = store.decide("b", 16)
        assert d.tiers == ["augmented"] * 16 and set(d.indices) <= set(cached)
        drawn += d.indices
        assert len(set(drawn)) == len(drawn)
        assert [r.getbit(rest, i) for i in drawn] == [0] * len(drawn)  # served
        assert [r.getbit(used, i) for i in drawn] == [1] * len(drawn)
        assert pinned(d) == len(drawn) and r.bitcount(used) == len(drawn)
    assert r.bitcount(rest) == n - len(drawn)  # nothing else left the epoch
    store.release("b", d)
    assert pinned(d) == len(drawn) - 16
