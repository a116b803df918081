"""seneca._cache.resp: replies read into their own buffers, against a real redis-server."""

import os
import socket
import sys
import threading

import pytest
import redis
from helpers import warm

from seneca._cache.client import CacheClient
from seneca._cache.resp import execute


def test_values_misses_integers_and_big_replies(redis_proc):
    r = redis_proc.client
    big = os.urandom(3_000_017)  # many socket reads
    small = [os.urandom(n) for n in (0, 1, 150_000)]
    r.set("big", big)
    for k, v in enumerate(small):
        r.set(f"s{k}", v)
    r.zadd("z", {"a": 1, "b": 5})
    values, ints, single, status = execute(
        r,
        [
            ("MGET", "s0", "nope", "s1", "s2", "big"),
            ("ZCOUNT", "z", 2, "+inf"),
            ("GET", "s2"),
            ("SET", "x", b"1"),
        ],
    )
    assert [bytes(v) if v is not None else None for v in values] == [
        small[0],
        None,
        small[1],
        small[2],
        big,
    ]
    assert all(isinstance(v, bytearray) for v in values if v is not None)
    assert ints == 1 and single == small[2] and status == b"OK"
    # the borrowed connection went back in step: the client still works
    assert r.get("s1") == small[1]


def test_large_values_in_a_row_then_many_small_ones(redis_proc):
    """After a large value the reader asks the socket for little (the next value's header):
    large values back to back, and a long reply of small values after them, arrive whole."""
    r = redis_proc.client
    values = [os.urandom(65_536 + 997 * k) for k in range(40)]
    for k, v in enumerate(values):
        r.set(f"v{k}", v)
    items = [f"item-{k}".encode() for k in range(3_000)]
    r.rpush("l", *items)
    got, small, last = execute(
        r, [("MGET", *(f"v{k}" for k in range(40))), ("LRANGE", "l", 0, -1), ("GET", "v39")]
    )
    assert [bytes(v) for v in got] == values and bytes(last) == values[39]
    assert [bytes(v) for v in small] == items


def test_error_reply_raises_after_reading_every_reply(redis_proc):
    r = redis_proc.client
    r.set("s", b"v")
    r.rpush("list", b"x")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        execute(r, [("GET", "list"), ("GET", "s")])
    assert execute(r, [("GET", "s")]) == [b"v"]  # same pool, nothing left unread


def test_resp3_client(redis_proc):
    r = redis.Redis(unix_socket_path=str(redis_proc.sock), protocol=3)
    r.set("k", b"value")
    assert execute(r, [("MGET", "k", "missing"), ("ZCOUNT", "nozset", 0, 1)]) == [
        [b"value", None],
        0,
    ]


def test_dead_server_fails_fast(redis_proc):
    r = CacheClient(redis_proc.url).redis  # fail-fast settings, as the loader uses
    r.ping()
    redis_proc.stop()
    with pytest.raises(redis.ConnectionError):
        execute(r, [("MGET", "k")])


def test_a_server_that_drops_connections_is_tried_once_per_call():
    """Fail-fast, counted rather than timed: a call to a server that drops every connection
    costs one connection (no retry, no back-off wait inside redis-py)."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted = []

    def drop_all():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(conn.getpeername())  # counted before the client sees it close
            conn.close()

    threading.Thread(target=drop_all, daemon=True).start()
    r = CacheClient(f"redis://127.0.0.1:{listener.getsockname()[1]}").redis
    probes = len(accepted)  # the client's own cluster probe
    try:
        for _ in range(3):
            with pytest.raises(redis.ConnectionError):
                execute(r, [("MGET", "k")])
    finally:
        listener.close()
    assert len(accepted) - probes == 3


_FAULTS = """
import resource, sys
from seneca.pipeline.malloc import tune_malloc
print(tune_malloc())

def batch():  # a batch's worth of 150 KB values, all freed together
    values = [bytearray(150_000) for _ in range(20)]
    for v in values:
        v[::4096] = b"x" * len(v[::4096])

for _ in range(3):
    batch()  # warm up
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):
    batch()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 50)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc")
def test_malloc_tuning_reuses_big_buffers():
    def run(env):  # a fresh interpreter: a fork's heap is tuned by what its parent freed
        out = warm.fresh(_FAULTS, **env).split()
        return out[0] == "True", float(out[1])

    tuned, faults_tuned = run({})
    off, faults_off = run({"SENECA_MALLOC_TUNING": "0"})
    assert tuned and not off
    # 3 MB per batch: glibc's default trims the freed heap after each batch and faults ~730
    # pages back in for the next; tuned, the heap is reused
    assert faults_off > 300 and faults_tuned < 30


def test_the_server_tells_its_cpu_and_an_acl_user_without_info_gets_none(redis_proc):
    cache = CacheClient(redis_proc.url)
    before = cache.cpu_seconds()
    for _ in range(2000):
        cache.redis.set("k", b"x" * 1000)
    after = cache.cpu_seconds()
    # all threads, and the main thread's share (each read on its own clock: within 10 ms)
    assert after[0] >= after[1] - 0.01 and after[1] > before[1] >= 0
    redis_proc.client.acl_setuser("plain", enabled=True, passwords=["+pw"], commands=["+ping"])
    user = CacheClient(f"unix://plain:pw@{redis_proc.sock}")
    assert user.cpu_seconds() is None
