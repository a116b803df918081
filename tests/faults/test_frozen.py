"""A frozen cache (SIGSTOP: connections open, no replies, as in a network partition) and a cache
killed and restarted empty, under jobs that train with a worker each.

A frozen cache costs each process one call's deadline: no gap between two batches is more than
a second above the median, every epoch stays exactly once, and the job returns to the cache
soon after it thaws. A restarted cache is used again from the epoch that starts a second after
it is back. Each outage is logged once per job: one warning, and one info line when the cache
answers again (the log file collects the workers' lines too).
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


@pytest.mark.slow
def test_a_restarted_cache_is_used_again_within_a_second(tiny_dataset, free_port, seneca_log):
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
        while not restarted or time.monotonic() < restarted[1] + 3.0:
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
    after = [hits for start, hits in epochs if start > restarted[1] + 1.0]
    assert after and after[0][0] > 0 and after[0][1] > 0, epochs
    failed, back = _outage_lines(seneca_log())
    assert len(failed) == 2 and len(back) == 2, failed + back  # one of each per job
