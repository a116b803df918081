"""A frozen cache (SIGSTOP: connections open, no replies, as in a network partition) and a cache
killed and restarted empty, under jobs that train with a worker each.

A frozen cache is read around: batches keep coming, every epoch stays exactly once, and the job
returns to the cache after it thaws; a restarted cache is used again. How long a freeze stalls
training (one call's deadline per process: no gap between two batches more than a second above
the median) is a figure, measured by `make bench`. Each outage is logged once per job: one
warning, and one info line when the cache answers again (the log file collects the workers'
lines too).
"""

import collections
import itertools
import logging
import os
import signal
import statistics
import threading
import time

import pytest
from conftest import RedisProcess
from helpers.indexed import indexed

from seneca import SenecaLoader

#: frozen servers: calls abandoned at the default deadlines (conftest.patient_deadlines)
pytestmark = pytest.mark.deadlines

STEP = 0.03  # seconds of "training" per batch
FREEZE = 4.0


@pytest.fixture
def seneca_log(tmp_path):
    """The ``seneca`` logger's lines, from every process of the test's jobs (a file)."""
    path = tmp_path / "seneca.log"
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(levelname)s %(process)d %(message)s"))
    logger = logging.getLogger("seneca")
    old = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    yield lambda: path.read_text().splitlines()
    logger.removeHandler(handler)
    logger.setLevel(old)
    handler.close()


def _loader(root, url):
    return SenecaLoader(
        indexed(root),
        batch_size=4,
        shuffle=True,
        cache=url,
        cache_size="20MB",
        split=(0.5, 0.5, 0),
        num_workers=1,
    )


def _hits(stats):
    return sum(stats[t]["hits"] for t in ("augmented", "decoded", "encoded"))


def _outage_lines(lines):
    failed = [line for line in lines if line.startswith("WARNING") and " failed" in line]
    back = [line for line in lines if line.startswith("INFO") and "answers again" in line]
    return failed, back


@pytest.mark.slow
def test_a_frozen_cache_is_read_around_and_used_again_once_thawed(
    tiny_dataset, redis_proc, seneca_log
):
    """Behaviour only (no clock): batches keep coming while the cache is frozen, every epoch
    whole, and the job hits the cache again after it thaws; one warning, one info line."""
    loader = _loader(tiny_dataset, redis_proc.url)
    arrivals = frozen = 0
    thawed = False
    deadline = time.monotonic() + 120  # a dozen epochs here; an epoch that never hits fails
    while True:
        got = collections.Counter()
        loader.reset_stats()
        began_thawed = thawed
        for _, ys in loader:
            arrivals += 1
            got.update(int(y) for y in ys)
            if arrivals == 30:
                os.kill(redis_proc.proc.pid, signal.SIGSTOP)
                frozen = arrivals
            elif frozen and not thawed and arrivals == frozen + 40:  # it went on, frozen
                os.kill(redis_proc.proc.pid, signal.SIGCONT)
                thawed = True
        assert got == collections.Counter(range(48))  # every epoch whole, exactly once
        if began_thawed and _hits(loader.stats()) > 0:
            break  # back to the cache
        assert time.monotonic() < deadline, "no epoch after the thaw read the cache"
    failed, back = _outage_lines(seneca_log())
    assert len(failed) == 1 and len(back) == 1, failed + back


@pytest.mark.bench
def test_a_frozen_cache_stalls_training_for_under_a_second(tiny_dataset, redis_proc, seneca_log):
    loader = _loader(tiny_dataset, redis_proc.url)
    arrivals, epochs = [], []
    frozen_at = thawed_at = None
    while thawed_at is None or time.monotonic() < thawed_at + 2.0:
        got = collections.Counter()
        loader.reset_stats()
        start = time.monotonic()
        for _, ys in loader:
            arrivals.append(time.monotonic())
            got.update(int(y) for y in ys)
            if frozen_at is None and len(arrivals) == 30:
                os.kill(redis_proc.proc.pid, signal.SIGSTOP)
                frozen_at = time.monotonic()
            if frozen_at is not None and thawed_at is None and arrivals[-1] > frozen_at + FREEZE:
                os.kill(redis_proc.proc.pid, signal.SIGCONT)
                thawed_at = time.monotonic()
            time.sleep(STEP)
        assert got == collections.Counter(range(48))  # every epoch whole, exactly once
        epochs.append((start, _hits(loader.stats())))
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert max(gaps) - statistics.median(gaps) < 1.0, sorted(gaps)[-5:]
    assert sum(1 for a in arrivals if frozen_at < a < thawed_at) > 2 * FREEZE  # it went on
    # back to the cache: the epochs that start a second after the thaw hit it
    assert all(hits > 0 for start, hits in epochs if start > thawed_at + 1.0)
    failed, back = _outage_lines(seneca_log())
    assert len(failed) == 1 and len(back) == 1, failed + back


def _hit_again(epochs, restarted_at):
    """Whether every job hit the cache in an epoch that started after the restart."""
    after = [hits for start, hits in epochs if start > restarted_at]
    return bool(after) and all(any(h[k] > 0 for h in after) for k in range(len(after[0])))


@pytest.mark.slow
def test_a_restarted_cache_is_used_again(tiny_dataset, free_port, seneca_log):
    server = RedisProcess(port=free_port)
    url = f"redis://127.0.0.1:{free_port}"
    jobs = [_loader(tiny_dataset, url) for _ in range(2)]
    restarted: list = []

    def restart():
        server.proc.kill()
        server.proc.wait()
        time.sleep(1.0)
        restarted.append(RedisProcess(port=free_port))
        restarted.append(time.monotonic())

    killer = None
    epochs = []  # (start, hits of each job)
    try:
        deadline = time.monotonic() + 120  # a few epochs here; jobs that never hit again fail
        while not restarted or not _hit_again(epochs, restarted[1]):
            assert time.monotonic() < deadline, f"no epoch after the restart hit: {epochs}"
            for job in jobs:
                job.reset_stats()
            start = time.monotonic()
            got = [collections.Counter() for _ in jobs]
            for k, batches in enumerate(zip(*jobs, strict=True)):
                for counter, (_, ys) in zip(got, batches, strict=True):
                    counter.update(int(y) for y in ys)
                if killer is None and k == 5:
                    killer = threading.Thread(target=restart)
                    killer.start()
                time.sleep(STEP)
            assert all(c == collections.Counter(range(48)) for c in got)
            epochs.append((start, [_hits(job.stats()) for job in jobs]))
    finally:
        killer.join()
        for job in jobs:
            job.close()
        server.stop()
        if restarted:
            restarted[0].stop()
    failed, back = _outage_lines(seneca_log())
    assert len(failed) == 2 and len(back) == 2, failed + back  # one of each per job
