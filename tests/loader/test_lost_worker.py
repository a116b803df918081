"""A worker's connection that breaks while it hands a batch over is raised as the worker's death,
in the loop's thread: DataLoader's SIGCHLD handler names the worker there, or WorkerError says
what broke; on real processes and signals."""

import multiprocessing
import os
import signal
import threading
import time

import pytest

from seneca import CacheUnavailableError, WorkerError
from seneca.loader._workers import reported


def _broken(before, error):
    yield from before
    raise error


def test_a_broken_connection_with_no_handler_speaking_is_a_worker_error():
    it = reported(_broken([1, 2], EOFError()), wait=0.05)
    assert [next(it), next(it)] == [1, 2]
    started = time.monotonic()
    with pytest.raises(WorkerError, match=r"worker's connection broke .*EOFError") as caught:
        next(it)
    assert time.monotonic() - started >= 0.05
    assert isinstance(caught.value.__cause__, EOFError)
    assert isinstance(caught.value, RuntimeError)  # what DataLoader raises for a dead worker


def test_a_workers_own_cache_error_passes_at_once_as_it_is():
    error = CacheUnavailableError("cache at redis://x:1 unreachable")
    started = time.monotonic()
    with pytest.raises(CacheUnavailableError) as caught:
        list(reported(_broken([], error), wait=600.0))
    assert caught.value is error
    assert time.monotonic() - started < 60.0  # not after the wait for a handler to speak


def _sleep():
    time.sleep(60)


def test_the_sigchld_handler_names_the_dead_worker_in_the_loops_thread():
    """As DataLoader's handler does: the worker's death, raised where the loop waits, not the
    broken connection, and well before the wait is over."""

    def handler(signum, frame):
        raise RuntimeError("DataLoader worker is killed by signal: Killed.")

    child = multiprocessing.get_context("fork").Process(target=_sleep, daemon=True)
    before = signal.signal(signal.SIGCHLD, handler)
    try:
        child.start()

        # the connection breaks first and the worker is seen dead a moment later, as when its
        # sockets close before it is a zombie
        kill = threading.Timer(0.2, os.kill, (child.pid, signal.SIGKILL))
        it = reported(_broken([1], ConnectionResetError("reset by peer")), wait=600.0)
        assert next(it) == 1
        started = time.monotonic()
        kill.start()
        with pytest.raises(RuntimeError, match="killed by signal") as caught:
            next(it)
        assert not isinstance(caught.value, WorkerError)
        assert 0.15 <= time.monotonic() - started < 60.0  # the kill's, not the wait's end
    finally:
        signal.signal(signal.SIGCHLD, before)
        child.join(5)
    assert child.exitcode == -signal.SIGKILL
