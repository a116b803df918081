"""OdsBatchSampler: epochs, drop_last, len, resume, and use as a DataLoader batch_sampler."""

import collections
import logging
import threading

import pytest
import torch
from helpers.resume import through_resumes
from torch.utils.data import DataLoader, Dataset

from ods.decision import Pick
from ods.sampler import OdsBatchSampler
from ods.store import OdsStore
from seneca_base.errors import ConfigError, JobInUseError
from seneca_base.stateful import Stateful


def make(redis_proc, n=100, **kw):
    store = OdsStore(redis_proc.client, "smp", n, capacity={"encoded": n // 4}, seed=2)
    return store, OdsBatchSampler(store, "job", **kw)


def test_epochs_are_exactly_once_and_advance(redis_proc):
    store, sampler = make(redis_proc, batch_size=16)
    assert len(sampler) == 7
    for epoch in range(2):
        batches = list(sampler)
        assert len(batches) == 7 and all(isinstance(p, Pick) for b in batches for p in b)
        seen = collections.Counter(p.index for b in batches for p in b)
        assert set(seen) == set(range(100)) and max(seen.values()) == 1
        assert sampler.epoch == epoch + 1
        for b in batches:  # fetched: admit the misses so later epochs hit
            store.admit("job", [(p.index, "encoded", 1, b"") for p in b if p.tier is None])
    sampler.set_epoch(5)
    assert sum(len(b) for b in sampler) == 100 and sampler.epoch == 6


def test_drop_last_and_subset(redis_proc):
    _, sampler = make(redis_proc, batch_size=16, drop_last=True, indices=range(0, 100, 2))
    assert len(sampler) == 3
    batches = list(sampler)
    assert [len(b) for b in batches] == [16, 16, 16]
    assert all(p.index % 2 == 0 for b in batches for p in b)


def test_restore_from_consumed_batches(redis_proc):
    store, sampler = make(redis_proc, batch_size=10)
    it = iter(sampler)
    decided = [next(it) for _ in range(4)]  # decided (prefetched) ...
    consumed = sampler.consumed_bitmap(0, 3)  # ... but the trainer only consumed 3
    again = OdsBatchSampler(store, "job", batch_size=10)  # a new process resumes the job
    store.join("job")
    assert store.restore("job", 0, consumed) == 30
    again.resume(0)  # (a sampler told nothing starts its job afresh)
    rest = list(again)
    seen = collections.Counter(p.index for b in decided[:3] + rest for p in b)
    assert set(seen) == set(range(100)) and max(seen.values()) == 1


def _taken(sampler):
    """The sample indices of a new iteration's batches, each counted as taken by a loop (as
    a loader's batch path counts them)."""
    progress = sampler.progress
    token = progress.begin(sampler.next_epoch())
    for batch in progress.tracked(iter(sampler), token, lambda: sampler.current):
        yield [p.index for p in batch]


@pytest.mark.parametrize("stops", [[0], [3], [9], [1, 1, 1], [4, 0, 2], [2, 3, 4]])
def test_state_at_midpoints_resumes_every_sample_once(redis_proc, stops):
    store = OdsStore(redis_proc.client, "st", 100, capacity={"encoded": 25}, seed=2)

    def start(state):
        sampler = OdsBatchSampler(store, "job", batch_size=10)
        if state is not None:
            sampler.load_state_dict(state)
        return sampler, _taken(sampler)

    seen, last = through_resumes(start, stops)
    assert set(seen) == set(range(100)) and max(seen.values()) == 1
    assert isinstance(last.progress, Stateful)
    assert last.progress.state_dict() == {"epoch": 1, "batches": 0}  # the epoch completed
    assert sum(len(b) for b in _taken(last)) == 100  # and the next one is whole


def test_state_of_several_ranks_needs_the_ranks(redis_proc):
    store, _ = make(redis_proc, batch_size=10)
    rank = OdsBatchSampler(store, "ddp", 10, num_replicas=2, rank=0)
    with pytest.raises(ConfigError, match="ranks="):
        rank.load_state_dict(rank.state_dict())


def test_ranks_get_equal_shares_and_together_the_epoch(redis_proc):
    store, _ = make(redis_proc, n=103, batch_size=10)
    ranks = [OdsBatchSampler(store, "ddp", 10, num_replicas=3, rank=r) for r in range(3)]
    assert [len(r) for r in ranks] == [4, 4, 4]  # ceil(103 / 3) = 35 samples each
    its = [iter(r) for r in ranks]
    got = [[], [], []]
    for _ in range(4):  # in lock step, as data-parallel training runs
        for r, it in enumerate(its):
            got[r] += [p.index for p in next(it)]
    assert all(len(g) == 35 for g in got)
    together = collections.Counter(i for g in got for i in g)
    assert set(together) == set(range(103))
    assert sum(together.values()) - 103 == 2  # 105 slots: 2 padded repeats
    for it in its:
        assert next(it, None) is None


class Indices(Dataset):
    def __len__(self):
        return 100

    def __getitem__(self, i):
        return torch.tensor(int(i))


def test_works_as_a_dataloader_batch_sampler(redis_proc):
    _, sampler = make(redis_proc, batch_size=32)
    loader = DataLoader(Indices(), batch_sampler=sampler)
    values = torch.cat(list(loader)).tolist()
    assert sorted(values) == list(range(100))


class CountingStore(OdsStore):
    """A real OdsStore that counts its decide calls."""

    decides = 0

    def decide(self, *args, **kw):
        self.decides += 1
        return super().decide(*args, **kw)


def test_lookahead_only_while_the_cache_covers_the_job(redis_proc):
    store = CountingStore(redis_proc.client, "look", 48, capacity={"encoded": 48}, seed=2)
    sampler = OdsBatchSampler(store, "job", batch_size=4, lookahead=4)
    cold = list(sampler)  # every sample a miss: one batch per decision
    assert store.decides == 13  # 12 batches and the empty answer that ends the epoch
    for b in cold:
        store.admit("job", [(p.index, "encoded", 1, b"") for p in b])
    store.decides = 0
    warm = list(sampler)  # all hits: 1 batch, then 4 per decision
    assert [len(b) for b in warm] == [4] * 12
    seen = collections.Counter(p.index for b in warm for p in b)
    assert set(seen) == set(range(48)) and max(seen.values()) == 1
    assert all(p.tier == "encoded" for b in warm for p in b)
    assert store.decides == 4  # 4 + 16 + 16 + 12 samples; the short answer ends the epoch
    pins = redis_proc.client.keys(store.prefix + "pin:*")
    assert sum(redis_proc.client.bitcount(k) for k in pins) == 48  # decided hits stay pinned


def test_each_epoch_starts_with_the_job_registered_before_its_first_decision(redis_proc):
    seen = []

    def look():  # what a loader's look at the plan finds
        seen.append((sampler.current, sampler.store.same_view(sampler.store.refresh_jobs())))
        seen.append(len(sampler.yielded[sampler.current]))

    store = OdsStore(redis_proc.client, "start", 20, capacity={"encoded": 5}, seed=2)
    sampler = OdsBatchSampler(store, "a", 8, on_start=look)
    for _ in range(2):
        assert sum(len(b) for b in sampler) == 20
    assert seen == [(0, 1), 0, (1, 1), 0]  # once an epoch: joined, nothing decided yet


@pytest.mark.parametrize("epochs_before", [1, 3])
def test_a_new_run_under_a_used_job_name_gets_every_sample_each_epoch(
    redis_proc, epochs_before, caplog
):
    """A script run again with the same job name (a sweep, a rerun after a crash without a
    checkpoint): its loops get every sample, not what the earlier run left unserved."""
    store, earlier = make(redis_proc, batch_size=16)
    for _ in range(epochs_before):
        list(earlier)
    first = list(earlier)[:2]  # and one left after two batches
    assert len(first) == 2
    store.lapse("job")  # its loader ended (its process exited): its lease ends, its state stays
    rerun = OdsBatchSampler(store, "job", batch_size=16)
    caplog.set_level(logging.INFO, logger="seneca")
    for _ in range(2):
        seen = collections.Counter(p.index for b in rerun for p in b)
        assert seen == collections.Counter(range(100))
    assert not _waited(caplog)  # not for the lease of the run that ended


def _waited(caplog) -> list[str]:
    """What the name's check logged of waiting for an earlier run's lease to run out."""
    return [r.getMessage() for r in caplog.records if "waiting to see" in r.getMessage()]


def _partly_run(redis_proc, lease):
    """A store with a ``lease`` of seconds, and a run of "job" that drew two batches of its
    first epoch and stopped (its lease live for ``lease`` more seconds)."""
    store = OdsStore(redis_proc.client, "smp", 100, capacity={"encoded": 25}, seed=2, lease=lease)
    it = iter(OdsBatchSampler(store, "job", batch_size=16))
    next(it), next(it)
    return store


def test_a_run_killed_under_a_name_is_waited_for_while_its_lease_runs_out(redis_proc, caplog):
    store = _partly_run(redis_proc, lease=1.0)  # no process renews it: it was killed
    end = store.lease_end("job")
    caplog.set_level(logging.INFO, logger="seneca")
    rerun = OdsBatchSampler(store, "job", batch_size=16)
    batches = iter(rerun)
    first = next(batches)
    assert store.now_ms() >= end  # its first batch came once the killed run's lease ran out
    seen = collections.Counter(p.index for b in [first, *batches] for p in b)
    assert seen == collections.Counter(range(100))  # a whole epoch of its own
    assert len(_waited(caplog)) == 1, caplog.text


def test_a_second_run_under_the_name_of_a_live_one_is_refused(redis_proc):
    store = _partly_run(redis_proc, lease=1.0)
    stop = threading.Event()

    def keeper():  # what the other run's process does while it lives
        while not stop.wait(0.1):
            store.renew("job")

    thread = threading.Thread(target=keeper)
    thread.start()
    try:
        with pytest.raises(JobInUseError, match="job='job': another loader"):
            list(OdsBatchSampler(store, "job", batch_size=16))
    finally:
        stop.set()
        thread.join()
    # the live run's epoch is untouched: it goes on with the samples it had left
    rest = store.decide("job", 100)
    assert rest.epoch == 0 and rest.served == 100 and 0 < len(rest.indices) <= 68


class _Alone:
    """The job's other ranks as a test of one rank's sampler sees them: nothing to unite."""

    def union(self, bitmap):
        return bitmap

    def barrier(self):
        pass


def test_a_rank_given_another_ranks_state_resumes_from_its_own_place(redis_proc, caplog):
    """A checkpoint that keeps rank 0's state only (Lightning's): rank 1 resumes from the place
    it kept in the cache when the states were saved; where the cache lost it, it says so."""
    store, _ = make(redis_proc, batch_size=10)

    def ranks(job):
        return [
            OdsBatchSampler(store, job, 10, num_replicas=2, rank=r, ranks=_Alone())
            for r in range(2)
        ]

    first = ranks("ddp")
    its = [r.progress.tracked(iter(r), r.progress.begin(0), lambda r=r: r.current) for r in first]
    taken = [{p.index for _ in range(2) for p in next(it)} for it in its]  # in lock step
    zero, one = (r.state_dict() for r in first)
    assert (zero["rank"], one["rank"], zero["job"], zero["batches"]) == (0, 1, "ddp", 2)
    again = ranks("ddp-again")
    again[1].load_state_dict(zero)  # rank 0's state, given to rank 1
    assert again[1].resumed == (0, 20)
    assert again[1].state_dict()["consumed"] == one["consumed"] != zero["consumed"]
    assert not taken[0] & taken[1]

    redis_proc.client.delete(store.keys.place("ddp", 0, 2))  # the cache lost the places
    lost = ranks("ddp-lost")
    with caplog.at_level(logging.WARNING, logger="seneca"):
        lost[1].load_state_dict(zero)
    assert "rank 1 resumes from rank 0's state" in caplog.text
