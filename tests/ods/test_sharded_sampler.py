"""ODS's batch sampler over a dataset kept in shards (``ods.shards.ShardedStore``): every epoch
each sample once, hits pinned and released, decisions ahead while the cache covers the job,
resumes at midpoints, and a shard that forgets the job mid-epoch."""

import collections

import pytest
from helpers.resume import through_resumes

from ods.sampler import OdsBatchSampler
from ods.shards import ShardedStore


def sharded(redis_proc, name, n=200, cached=50):
    """A store of ``n`` samples in shards of at most 64 (4 shards for 200)."""
    cap = {"encoded": cached}
    return ShardedStore(redis_proc.client, name, n, shard_size=64, capacity=cap, seed=2)


def fetched(store, job, batch):
    """What a loader's fetch does with a batch: the hits' pins released, the misses offered."""
    store.release(job, batch)
    store.admit(job, [(p.index, "encoded", 1, b"") for p in batch if p.tier is None])


@pytest.mark.parametrize("cached", [50, 200])
def test_every_epoch_is_each_sample_once_and_the_cache_serves_later_ones(redis_proc, cached):
    store = sharded(redis_proc, f"ss{cached}", cached=cached)
    sampler = OdsBatchSampler(store, "job", batch_size=16, lookahead=4)
    assert len(sampler) == 13
    hits, calls = [], []
    for epoch in range(3):
        before = store.commands["decide"]
        batches = list(sampler)
        calls.append(store.commands["decide"] - before)
        seen = collections.Counter(p.index for b in batches for p in b)
        assert set(seen) == set(range(200)) and max(seen.values()) == 1, epoch
        assert len(batches) == 13 and sampler.epoch == epoch + 1
        hits.append(sum(p.tier is not None for b in batches for p in b))
        for batch in batches:
            fetched(store, "job", batch)
    assert hits[0] == 0 and hits[1] == hits[2] == cached  # each shard holds its share
    if cached == 200:  # covered by the cache: 4 batches a call, posted ahead
        assert calls[0] >= 13 and calls[2] <= calls[0] // 2, calls
    pins = [k for k in redis_proc.client.keys(f"*ss{cached}#*pin*".encode())]
    assert all(redis_proc.client.bitcount(k) == 0 for k in pins)  # every hit released


@pytest.mark.parametrize("stops", [[0], [3], [1, 1, 1], [4, 0, 2], [2, 5, 4]])
def test_state_at_midpoints_resumes_every_sample_once(redis_proc, stops):
    store = sharded(redis_proc, "ssr")

    def start(state):
        sampler = OdsBatchSampler(store, "job", batch_size=16)
        if state is not None:
            sampler.load_state_dict(state)
        progress = sampler.progress
        token = progress.begin(sampler.next_epoch())
        batches = progress.tracked(iter(sampler), token, lambda: sampler.current)
        return sampler, ([p.index for p in b] for b in batches)

    seen, last = through_resumes(start, stops)
    assert set(seen) == set(range(200)) and max(seen.values()) == 1
    assert last.progress.state_dict() == {"epoch": 1, "batches": 0}


def test_a_shard_that_forgets_the_job_mid_epoch_costs_no_sample(redis_proc):
    store = sharded(redis_proc, "ssf")
    sampler = OdsBatchSampler(store, "job", batch_size=16)
    it = iter(sampler)
    got = [p.index for _ in range(5) for p in next(it)]
    client = redis_proc.client
    for key in client.keys(b"*{ssf#1}*"):  # one shard's server restarted empty
        client.delete(key)
    got += [p.index for b in it for p in b]
    seen = collections.Counter(got)
    assert set(seen) == set(range(200)) and max(seen.values()) == 1


def test_while_the_cache_covers_the_job_its_next_decision_is_posted_ahead(redis_proc):
    store = sharded(redis_proc, "ssp", cached=200)
    sampler = OdsBatchSampler(store, "job", batch_size=16, lookahead=4)
    for batch in sampler:  # the first epoch fills the cache
        fetched(store, "job", batch)
    known = []
    for batch in sampler:
        fetched(store, "job", batch)
        store.outbox.flush()  # as a fetch sends what was posted after its reads
        known.append(sampler.upcoming() is not None)  # the next batch, decided already
    assert len(known) == 13 and all(known[:-2])


def test_the_shards_calls_wait_for_one_flush_of_their_one_outbox(redis_proc):
    """The shards share the store's outbox: what is posted for any shard is held until the
    store's flush, and then sent, however many shards the calls are for."""
    store = sharded(redis_proc, "sso")
    assert all(shard.outbox is store.outbox for shard in store.shards)
    store.outbox.flush()  # as after a fetch's first flush: held calls wait for the next
    client = redis_proc.client
    calls = [s.outbox.post(("INCR", f"sso-{k}")) for k, s in enumerate(store.shards)]
    assert not any(c.sent for c in calls) and client.get("sso-0") is None
    store.outbox.flush()
    assert [c.result() for c in calls] == [1] * len(store.shards)


@pytest.mark.parametrize("wiped", [0, 1, 2, 3])
def test_a_shard_that_forgets_the_job_after_a_decision_was_posted_costs_no_sample(
    redis_proc, wiped
):
    """A decision posted ahead in one shard has come back when another shard forgets the job
    (its server restarted empty or was flushed): making the decision up there fails, and the
    epoch goes on from what was yielded, each sample once (what the posted shard marked served
    for that decision is served again)."""
    store = sharded(redis_proc, f"ssw{wiped}", cached=200)
    sampler = OdsBatchSampler(store, "job", batch_size=16, lookahead=4)
    for batch in sampler:  # the first epoch fills the cache: the next decisions are posted
        fetched(store, "job", batch)
    got = []
    for k, batch in enumerate(sampler):
        fetched(store, "job", batch)
        got += [p.index for p in batch]
        store.outbox.flush()  # the posted decision is sent and answered
        if k % 3 == 0:  # now and then another shard, in turn, forgets the job (its values stay)
            store.shards[(k // 3 + wiped) % len(store.shards)].leave("job")
    seen = collections.Counter(got)
    assert set(seen) == set(range(200)) and max(seen.values()) == 1, seen
