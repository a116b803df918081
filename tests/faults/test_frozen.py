"""A frozen cache (SIGSTOP: connections open, no replies) costs one socket timeout per process
per outage: the first caller to time out (a fetch or the sampler's decision) makes every cache
call of its process read around the cache until the retry time. Counted, not timed: the calls
that waited on the frozen server."""

import collections
import os
import signal

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
    backoff = loader._cached.backoff  # shared by every cache call of this process
    before = backoff.failures
    os.kill(redis_proc.proc.pid, signal.SIGSTOP)
    try:
        for _, ys in it:
            got.update(int(y) for y in ys)
    finally:
        os.kill(redis_proc.proc.pid, signal.SIGCONT)
    assert got == collections.Counter(range(48))  # the epoch whole, exactly once
    assert backoff.failures - before == 1  # one timeout, not one per caller or batch
