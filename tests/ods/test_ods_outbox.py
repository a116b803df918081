"""ods.outbox: calls held until a flush, replies read later, errors, forks; the sampler's
prefetched decisions and the fetch's deferred releases."""

import collections
import os

import pytest
import redis
from conftest import once
from helpers.pools import checked_out

from ods import routing
from ods.decision import parse_decision
from ods.outbox import Outbox
from ods.sampler import OdsBatchSampler
from ods.store import OdsStore
from seneca_base.errors import UnknownJobError


def _box(redis_proc, flushing=True):
    """An outbox on a client of its own (``flushing``: as after a fetch's first flush, so held
        calls wait), and how many of that client's pool connections are checked out (other than
    those ``ods.routing`` keeps for its next writes)."""
    client = once(redis.Redis(unix_socket_path=str(redis_proc.sock)))  # as Seneca's: no retries
    box = Outbox(client)
    if flushing:
        box.flush()
    pool = client.connection_pool
    return box, lambda: len(checked_out(pool)) - len(routing.kept(pool))


def test_held_calls_wait_for_the_flush_and_replies_are_read_later(redis_proc):
    box, in_use = _box(redis_proc, flushing=False)
    r = redis_proc.client
    first = box.post(("SET", "k", "1"))  # no flush seen yet: sent at once
    assert first.sent and first.result() == b"OK"
    box.flush()  # from now on a fetch flushes: held calls wait for it
    held = box.post(("INCR", "k"))
    assert not held.sent and r.get("k") == b"1"
    seen = []
    box.post(("INCR", "k"), hold=False, on_reply=seen.append)  # sent now, in its own write
    assert seen == []  # its reply is read at the next settle or flush
    box.settle()
    assert seen == [2] and not held.sent
    box.flush()  # sends the held call
    assert held.sent and held.result() == 3 and r.get("k") == b"3"
    assert in_use() == 0  # every connection went back to the pool


def test_result_sends_a_held_call_that_no_flush_sent(redis_proc):
    box, in_use = _box(redis_proc)
    call = box.post(("PING",))
    assert not call.sent
    assert call.result() == b"PONG" and in_use() == 0


def test_a_cancelled_call_never_reaches_the_server(redis_proc):
    box, _ = _box(redis_proc)
    call = box.post(("SET", "gone", "1"))
    assert call.cancel()
    box.flush()
    box.settle()
    assert redis_proc.client.get("gone") is None
    sent = box.post(("SET", "kept", "1"), hold=False)
    assert not sent.cancel() and sent.result() == b"OK"


def test_error_replies_are_returned_and_on_reply_errors_raised_after_all_were_read(redis_proc):
    box, in_use = _box(redis_proc)
    redis_proc.client.set("s", "text")

    def strict(reply):
        if isinstance(reply, Exception):
            raise reply

    bad = box.post(("INCR", "s"), on_reply=strict)
    good = box.post(("INCR", "n"))
    box.flush()
    assert isinstance(bad.result(), redis.ResponseError) and good.result() == 1
    with pytest.raises(redis.ResponseError, match="not an integer"):
        box.settle()
    assert in_use() == 0


@pytest.mark.slow
def test_a_dead_server_raises_where_the_reply_is_asked_for(redis_proc):
    box, in_use = _box(redis_proc)
    call = box.post(("PING",))
    redis_proc.stop()
    with pytest.raises(redis.ConnectionError):
        call.result()
    with pytest.raises(redis.ConnectionError):  # the same error for every caller
        call.result()
    assert in_use() == 0


def test_a_forked_child_does_not_touch_its_parents_calls(redis_proc):
    box, _ = _box(redis_proc)
    box.post(("SET", "parent", "1"))
    pid = os.fork()
    if pid == 0:  # the child: a fresh outbox state, the parent's held call is not sent
        try:
            box.flush()
            os._exit(0 if not box.queued and not box.unsettled else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert redis_proc.client.get("parent") is None
    box.flush()
    box.settle()
    assert redis_proc.client.get("parent") == b"1"


class _Recording(OdsStore):
    """A real OdsStore that records the decisions asked for at once (not posted)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.direct = []

    def decide(self, *args, later=False, **kwargs):
        if not later:
            self.direct.append(args)
        return super().decide(*args, later=later, **kwargs)


def _covered_store(redis_proc, n=48, form=OdsStore):
    store = form(redis_proc.client, "pre", n, capacity={"encoded": n}, seed=3)
    store.join("filler")
    store.admit("filler", [(i, "encoded", 1, b"") for i in range(n)])
    return store


def test_prefetched_decisions_are_sent_at_the_flush_and_keep_epochs_exactly_once(redis_proc):
    store = _covered_store(redis_proc)
    sampler = OdsBatchSampler(store, "job", batch_size=4, lookahead=3)
    store.outbox.flush()  # as the fetch in this process does after each batch
    it = iter(sampler)
    served = []
    sent_before_flush = []
    for batch in it:
        served += [p.index for p in batch]
        sent_before_flush += [c.sent for c in store.outbox.queued]
        store.outbox.flush()
    assert sorted(served) == list(range(48))
    assert sent_before_flush and not any(sent_before_flush)  # held until the flush
    assert collections.Counter(served).most_common(1)[0][1] == 1


def test_prefetch_after_a_function_flush_and_an_early_stop(redis_proc):
    store = _covered_store(redis_proc, form=_Recording)
    sampler = OdsBatchSampler(store, "job", batch_size=4, lookahead=3)
    store.outbox.flush()
    served = []
    for k, batch in enumerate(sampler):
        served += [p.index for p in batch]
        if k == 1:
            redis_proc.client.function_flush()  # the prefetch finds no function: decided again
        store.outbox.flush()
    assert sorted(served) == list(range(48))
    assert len(store.direct) == 2  # the epoch's first decision, and the one that failed
    # an early stop: the held prefetch is dropped, so the job's epoch keeps its samples
    it = iter(sampler)
    for _ in range(4):  # decisions of 4, then 12 (prefetched at the first batch)
        next(it)
        assert store.outbox.queued or store.outbox.unsettled <= 1
    assert store.outbox.queued  # the next decision, posted and held
    it.close()
    assert not store.outbox.queued
    left = redis_proc.client.bitcount(f"{store.prefix}r:job")  # epoch 1's unserved
    assert left == 48 - 16  # nothing more was decided


def test_parse_decision_raises_an_error_reply_as_its_type():
    with pytest.raises(UnknownJobError, match="SENECA_NOJOB"):
        parse_decision(redis.ResponseError("SENECA_NOJOB job"))
    with pytest.raises(redis.ResponseError, match="ERR other"):
        parse_decision(redis.ResponseError("ERR other"))


def test_a_decision_whose_reply_is_lost_while_read_ahead_leaves_no_sample_out(redis_proc):
    """The fetch collects a sent decision early for its read-ahead (``upcoming``) and reads
    around cache errors. When the connection breaks there after the server ran the decision,
    the epoch goes on as when the batch loop finds it broken: from storage, every sample once
    (the lost decision's samples are not left out)."""
    store = _covered_store(redis_proc)
    sampler = OdsBatchSampler(store, "job", batch_size=4, lookahead=3)
    store.outbox.flush()
    served, broken, read_ahead = [], [], []
    for batch in sampler:
        served += [p.index for p in batch]
        run = sampler._run
        try:  # what the fetch does after reading a batch, reading around cache errors
            store.outbox.flush()  # the posted decision is sent (and run)
            if not broken and run.prefetch and run.prefetch[0].sent and len(run.ahead) < 4:
                for _, conn, _ in run.prefetch[0]._sent._sent.groups:
                    conn.disconnect()  # its reply is lost
                    broken.append(conn)
            read_ahead.append(sampler.upcoming())
        except (redis.RedisError, OSError):
            pass
    assert broken and None in read_ahead
    assert sorted(served) == list(range(48))
