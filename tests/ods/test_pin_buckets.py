"""The bitmaps of the pin-lease bucket before go once nothing is marked in them: a dataset's
metadata holds a second pin or pending bitmap only while it still pins or marks something; on a
real redis-server."""

import time

from ods.decision import Pick
from ods.outbox import RoundTrip
from ods.store import OdsStore

N = 4_000
LEASE = 1.5  # seconds: a pin-lease bucket (the calls of one step take well under it)


def _bitmaps(client, kind):
    return sorted(k for k in client.keys(f"*:{kind}:*".encode()) if client.type(k) == b"string")


def _next_bucket(store):
    now = store.now_ms()
    time.sleep((LEASE * 1000 - now % (LEASE * 1000)) / 1000 + 0.05)


def _batch(store, job, n=64):
    d = store.decide(job, n)
    misses = [i for i, t in zip(d.indices, d.tiers, strict=True) if not t]
    return d, misses


def test_the_bucket_before_goes_once_its_pins_and_pending_marks_are_released(redis_proc):
    client = redis_proc.client
    store = OdsStore(client, "pb", N, capacity={"encoded": N}, pin_lease=LEASE, seed=4)
    for job in ("a", "b"):
        store.join(job)
        store.start_epoch(job, 0)

    def made_and_offered(job):
        d, misses = _batch(store, job)
        store.admit(job, [(i, "encoded", 1, b"") for i in misses])
        store.release(job, d)

    _next_bucket(store)  # a bucket; the calls below take well under LEASE
    made_and_offered("a")
    held, kept = _batch(store, "b", 128)  # pins a's 64 copies, marks 64 misses; keeps both
    assert held.hits and kept
    assert len(_bitmaps(client, "pin")) == 1 and len(_bitmaps(client, "pend")) == 1
    _next_bucket(store)
    made_and_offered("a")
    later, _ = _batch(store, "b", 128)  # pins and marks in this bucket too
    assert later.hits
    assert len(_bitmaps(client, "pin")) == 2 and len(_bitmaps(client, "pend")) == 2
    store.release("b", held)
    store.admit("b", [(i, "encoded", 1, b"") for i in kept])
    # nothing is marked in the bucket before any more: its bitmaps are gone, this one's stay
    assert len(_bitmaps(client, "pin")) == 1 and len(_bitmaps(client, "pend")) == 1
    hits = [i for i, t in zip(later.indices, later.tiers, strict=True) if t]
    assert all(store.cached("encoded", hits))  # this bucket's pins still hold


def _pinned(client, store):
    return sum(client.bitcount(k) for k in client.keys(f"{store.prefix}pin:*"))


def test_a_batch_whose_picks_were_decided_in_two_buckets_releases_both(redis_proc):
    """A batch may hold samples decided one pin lease apart: each pick's pins go from its own
    bucket, whether released now, posted to the outbox (the loader process) or riding a fetch's
    round trip (a worker)."""
    client = redis_proc.client
    store = OdsStore(client, "two", 64, capacity={"encoded": 64}, seed=2)
    store.join("j")
    store.start_epoch("j", 0)
    first = store.decide("j", 64)
    store.admit("j", [(i, "encoded", 1, b"") for i in first.indices])
    store.start_epoch("j", 1)
    for via in (None, store.outbox, RoundTrip()):
        d = store.decide("j", 8)
        assert d.hits == 8 and _pinned(client, store) == 8
        b = d.pin_bucket
        older = set(d.indices[4:])  # as if decided one pin lease earlier
        for i in older:
            client.setbit(f"{store.prefix}pin:{b}", i, 0)
            client.setbit(f"{store.prefix}pin:{b - 1}", i, 1)
        picks = [Pick(i, t, b - (i in older)) for i, t in zip(d.indices, d.tiers, strict=True)]
        store.release("j", picks, via=via)
        if isinstance(via, RoundTrip):  # the fetch sends the riding commands after its reads
            via.answer([client.execute_command(*c) for c in via.commands])
        store.outbox.settle()
        assert _pinned(client, store) == 0, via
