"""A cache that forgets everything mid-epoch (FLUSHALL, or a restart with no persistence): every
job's epoch stays exactly once, and the next epochs run whole."""

import collections

import pytest
from conftest import RedisProcess
from helpers.indexed import indexed

from seneca import SenecaLoader

N = 48


def _run(loader, lose, after=3):
    """One epoch, calling ``lose()`` after ``after`` batches; the samples served."""
    got = collections.Counter()
    for k, (_, ys) in enumerate(loader):
        got.update(int(y) for y in ys)
        if k + 1 == after:
            lose()
    return got


@pytest.mark.parametrize("workers", [0, 2])
def test_a_flushed_cache_loses_no_sample(tiny_dataset, redis_proc, workers):
    loader = SenecaLoader(
        indexed(tiny_dataset),
        batch_size=5,
        shuffle=True,
        num_workers=workers,
        cache=redis_proc.url,
        cache_size="20MB",
    )
    for _ in range(2):
        got = _run(loader, redis_proc.client.flushall)
        assert set(got) == set(range(N)) and max(got.values()) == 1
    got = _run(loader, lambda: None)
    assert set(got) == set(range(N)) and max(got.values()) == 1


def test_a_cache_restarted_at_once_loses_no_sample(tiny_dataset, free_port):
    servers = [RedisProcess(port=free_port)]

    def restart():
        servers[0].stop()
        servers.append(RedisProcess(port=free_port))  # empty, on the same address
        servers.pop(0)

    loader = SenecaLoader(
        indexed(tiny_dataset),
        batch_size=5,
        shuffle=True,
        cache=f"redis://127.0.0.1:{free_port}",
        cache_size="20MB",
    )
    try:
        got = _run(loader, restart)
        assert set(got) == set(range(N)) and max(got.values()) == 1
        got = _run(loader, lambda: None)
        assert set(got) == set(range(N)) and max(got.values()) == 1
    finally:
        servers[0].stop()
