"""A job's back-off of its cache: shared by its processes (a spawned one maps the same state),
retries that start soon and double to a cap, an outage ended for all by one success; and the
deadline that abandons a call to a frozen server."""

import multiprocessing
import os
import signal
import time

import pytest
import redis
from helpers.waiting import wait_for

from ods import defaults as ods_defaults
from ods import routing
from seneca._cache.client import CacheClient
from seneca_base.backoff import Backoff

#: calls to a frozen server abandoned at the default deadlines (conftest.patient_deadlines)
pytestmark = pytest.mark.deadlines


def test_retries_start_soon_and_double_up_to_the_cap():
    b = Backoff("cache", first=0.05, cap=0.12)
    assert not b.down() and not b.in_outage and b.interval == 0
    assert b.failed() and b.down() and b.interval == 0.05  # an outage starts
    assert not b.failed()  # another caller failing meanwhile: the same outage, the same wait
    assert b.interval == 0.05
    intervals = []
    for _ in range(3):
        wait_for(lambda: not b.down(), "the next retry to be due", timeout=30)
        assert not b.failed()  # the retry failed
        intervals.append(b.interval)
    assert intervals == [0.1, 0.12, 0.12], intervals
    assert b.failures == 5 and b.outages == 1
    assert b.succeeded() and not b.down() and not b.in_outage and b.interval == 0
    assert not b.succeeded()  # nothing to end


def _fail_in_child(backoff, queue):
    queue.put(backoff.failed(RuntimeError("gone")))
    while backoff.in_outage:  # ended by the parent
        time.sleep(0.01)
    queue.put(backoff.down())


def test_the_jobs_processes_share_one_back_off():
    b = Backoff("cache", first=30.0, cap=60.0)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_fail_in_child, args=(b, queue))
    child.start()
    assert queue.get(timeout=60) is True  # the child started the outage ...
    assert b.down() and b.outages == 1  # ... and this process backs off too
    assert not b.failed()  # the same outage
    assert b.succeeded()  # one success ends it for every process
    assert queue.get(timeout=60) is False
    child.join(timeout=60)


def test_a_call_to_a_frozen_server_is_abandoned_at_its_deadline(redis_proc):
    client = CacheClient(redis_proc.url, timeout=ods_defaults.DEADLINE_CEILING).redis
    for _ in range(20):  # healthy: the kind's deadline is measured down to the floor
        routing.run(client, [("GET", "k")])
    assert routing.deadline("GET") == pytest.approx(ods_defaults.DEADLINE_FLOOR)
    os.kill(redis_proc.proc.pid, signal.SIGSTOP)
    try:
        start = time.monotonic()
        with pytest.raises(redis.TimeoutError):
            routing.run(client, [("GET", "k")])
        waited = time.monotonic() - start
    finally:
        os.kill(redis_proc.proc.pid, signal.SIGCONT)
    # abandoned at its deadline, not before (how soon after is the machine's to say: the
    # call raising rather than waiting on the frozen server is the behaviour)
    assert waited >= ods_defaults.DEADLINE_FLOOR, waited
    assert routing.run(client, [("GET", "k")]) == [None]  # a new connection, in step


def test_a_calls_kind_is_its_first_command_or_function():
    assert routing.kind_of([("MGET", "a", "b"), ("GET", "c")]) == "MGET"
    assert routing.kind_of([("FCALL", "seneca_1_decide", 0)]) == "seneca_1_decide"
    assert routing.kind_of([]) == ""
