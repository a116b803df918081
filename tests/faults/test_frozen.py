"""A frozen cache (SIGSTOP: connections open, no replies) costs one socket timeout per process
per outage: the first caller to time out (a fetch or the sampler's decision) makes every cache
call of its process read around the cache until the retry time."""

import collections
import os
import signal
import time

from helpers.indexed import indexed

from seneca import SenecaLoader

TIMEOUT = 1.0


def test_a_frozen_cache_costs_one_timeout_per_process(tiny_dataset, redis_proc, monkeypatch):
    monkeypatch.setattr("seneca.defaults.SOCKET_TIMEOUT", TIMEOUT)
    monkeypatch.setattr("seneca.defaults.CACHE_RETRY_AFTER", 60.0)  # no retry within the test
    loader = SenecaLoader(
        indexed(tiny_dataset), batch_size=4, shuffle=True, cache=redis_proc.url, split=(1, 0, 0)
    )
    got = collections.Counter()
    it = iter(loader)
    for _ in range(2):
        got.update(int(y) for y in next(it)[1])
    os.kill(redis_proc.proc.pid, signal.SIGSTOP)
    try:
        start = time.monotonic()
        for _, ys in it:
            got.update(int(y) for y in ys)
        elapsed = time.monotonic() - start
    finally:
        os.kill(redis_proc.proc.pid, signal.SIGCONT)
    assert got == collections.Counter(range(48))  # the epoch whole, exactly once
    assert TIMEOUT <= elapsed < 1.8 * TIMEOUT  # one timeout, not one per caller or batch
