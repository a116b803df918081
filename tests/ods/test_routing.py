"""ods.routing's connections and packing, against a real redis-server."""

import multiprocessing as mp

import redis

from ods import routing
from seneca._cache.resp import execute


def _clients(r: redis.Redis) -> int:
    return len(r.client_list())


def test_round_trips_reuse_their_connections(redis_proc):
    r = redis.Redis(unix_socket_path=str(redis_proc.sock))
    probe = redis_proc.client
    before = _clients(probe)
    for k in range(50):
        assert execute(r, [("SET", f"k{k}", k), ("GET", f"k{k}")]) == [b"OK", str(k).encode()]
        pending = routing.send(r, [("PING",)])  # two round trips in flight at once
        assert execute(r, [("PING",)]) == [b"PONG"]
        assert routing.receive(pending) == [b"PONG"]
    assert _clients(probe) - before <= 2  # not one connection a call


def test_a_kept_connection_the_server_closed_is_connected_again(redis_proc):
    r = redis.Redis(unix_socket_path=str(redis_proc.sock))
    assert execute(r, [("SET", "k", b"v")]) == [b"OK"]
    killed = redis_proc.client.client_kill_filter(_type="normal", skipme=True)
    assert killed >= 1  # the connection kept for the next call is gone
    assert execute(r, [("GET", "k")]) == [b"v"]


_SHARED: list = []


def _child(out: mp.Queue) -> None:
    r = _SHARED[0]
    out.put([execute(r, [("CLIENT", "ID")])[0] for _ in range(3)])


def test_a_forked_child_uses_connections_of_its_own(redis_proc):
    r = redis.Redis(unix_socket_path=str(redis_proc.sock))
    _SHARED[:] = [r]
    mine = execute(r, [("CLIENT", "ID")])[0]  # the parent keeps this connection
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_child, args=(out,))
    child.start()
    theirs = out.get(timeout=60)
    child.join(timeout=60)
    assert child.exitcode == 0
    assert mine not in theirs and len(set(theirs)) == 1  # its own, kept in the child
    assert execute(r, [("CLIENT", "ID")]) == [mine]  # the parent's is still in step


def test_arguments_hiredis_does_not_pack_are_packed_by_redis_py(redis_proc):
    r = redis.Redis(unix_socket_path=str(redis_proc.sock))
    value = bytearray(b"x" * 100_000)  # a bytearray value (hiredis takes bytes, not these)
    assert execute(r, [("SET", "b", value), ("STRLEN", "b")]) == [b"OK", 100_000]
    assert execute(r, [("OBJECT ENCODING", "b")]) == [b"raw"]  # a name redis-py splits
    assert execute(r, [(b"OBJECT ENCODING", "b")]) == [b"raw"]  # as bytes too
    big = [("SET", f"v{k}", b"y" * 40_000) for k in range(4)]  # sent as separate pieces
    assert execute(r, [*big, ("MGET", "v0", "v3")])[-1] == [b"y" * 40_000] * 2
