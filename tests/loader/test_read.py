"""The read part of a fetch (``seneca.loader._read``) on a real redis-server: a decided value
that is not there when its batch is read is a counted miss, and its entry is dropped, so that a
later miss of the sample caches it again (else every job would be decided a hit it cannot
read, until the entry was evicted)."""

from collections import Counter

import pytest

from ods.store import OdsStore
from seneca.loader._admit import Admitter
from seneca.loader._link import CacheLink, job_backoff
from seneca.loader._read import Reader
from seneca.loader._stats import Counters
from seneca_base.process import TRAINING

N = 8


@pytest.mark.parametrize("tier", ["encoded", "decoded"])
def test_a_decided_value_gone_before_its_read_is_counted_and_its_entry_dropped(
    redis_proc, tier, monkeypatch
):
    monkeypatch.setattr("seneca.defaults.MISSING_WAIT", 0.0)  # no look again
    r = redis_proc.client
    store = OdsStore(r, "gone", N, capacity={tier: 1 << 20}, values=True, seed=1)
    for job in ("maker", "j"):
        store.join(job)
        store.start_epoch(job, 0)
    made = store.decide("maker", N)  # every sample a miss, pending
    store.admit("maker", [(i, tier, 64, b"value %d" % i) for i in made.indices])
    decided = store.decide("j", N)
    assert all(t == tier for t in decided.tiers)  # all cached: every sample a hit
    gone = sorted(decided.indices)[:3]
    for i in gone:  # deleted behind ODS's back (a late eviction's UNLINK)
        r.delete(store.value_key(tier, i))

    counters = Counters(rows=1)
    link = CacheLink(counters)
    link.attach(store, "j", job_backoff(redis_proc.url))
    reader = Reader(link, counters, Admitter(link).forget)
    count: Counter = Counter()
    values, _ = reader.batch(decided.picks(), count, None, TRAINING, None)

    for i, (got_tier, value) in zip(decided.indices, values, strict=True):
        if i in gone:
            assert (got_tier, value) == (None, None)  # read from storage
        else:
            assert got_tier == tier and bytes(value) == b"value %d" % i
    assert count["ods_gone"] == len(gone)
    store.outbox.settle()
    assert store.cached(tier, gone) == [False] * len(gone)  # their entries went
    assert all(store.cached(tier, [i for i in range(N) if i not in gone]))  # the others stay
    assert count["cache_errors"] == 0
