"""A process forked while another thread of its parent uses the cache (DataLoader starts its
workers while the loader's lease and batch threads talk to Redis) gets a client of its own and
never waits on the parent's: a real redis-server, real forks."""

import os
import threading
import time

from seneca._cache.client import CacheClient


def _child_finishes(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return True
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return False


def test_a_child_forked_while_a_thread_holds_the_pool_makes_its_own_client(redis_proc):
    client = CacheClient(redis_proc.url)
    client.redis.ping()
    pool = client.redis.connection_pool
    held, release = threading.Event(), threading.Event()

    def inside_the_pool():  # a thread of the parent in the middle of a pool operation
        with pool._lock:  # redis-py's own lock of the pool, as get_connection holds it
            held.set()
            release.wait()

    thread = threading.Thread(target=inside_the_pool)
    thread.start()
    held.wait()
    try:
        pid = os.fork()
        if pid == 0:  # the child: the inherited client is dropped for a new one, then closed
            code = 1
            try:
                code = 0 if client.redis.ping() else 1
                client.close()
            finally:
                os._exit(code)
        finished = _child_finishes(pid, within=10)
    finally:
        release.set()
        thread.join()
    assert finished, "the forked child waited on a lock its parent's thread held"
    assert client.redis.ping()  # the parent's client is untouched
