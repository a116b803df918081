"""The embedded cache is easy to find: the first loader logs its URL, ``seneca cache status``
without a URL finds it, and with SENECA_KEEP_CACHE=1 it outlives its jobs until ``seneca cache
stop``."""

import logging
import os
import sys

import pytest
from helpers import warm
from helpers.indexed import indexed

from seneca import SenecaLoader
from seneca._cli.main import main

JOB = """
import logging
from helpers.indexed import indexed
from seneca import SenecaLoader
logging.basicConfig(level=logging.INFO)
loader = SenecaLoader(indexed({root!r}), batch_size=8, cache_size="20MB", job={job!r})
assert sum(len(y) for _, y in loader) == 48
stats = loader.stats()
print(sum(stats[t]["hits"] for t in ("augmented", "decoded", "encoded")) / stats["samples"])
"""


def test_the_loader_logs_the_url_and_status_finds_it(tiny_dataset, caplog, capsys):
    assert main(["cache", "status"]) == 2  # none runs yet: the error says what to do
    assert "SENECA_KEEP_CACHE=1" in capsys.readouterr().err
    with caplog.at_level(logging.INFO, logger="seneca"):
        loader = SenecaLoader(indexed(tiny_dataset), batch_size=8, cache_size="20MB")
    [line] = [m for m in caplog.messages if "embedded cache unix://" in m]
    assert line.startswith("started") and loader.cache_url in line
    assert sum(len(y) for _, y in loader) == 48
    assert main(["cache", "status"]) == 0
    out = capsys.readouterr().out
    assert loader.cache_url in out and "1 dataset(s)" in out
    assert main(["cache", "gc"]) == 0 and main(["cache", "metrics"]) == 0


@pytest.mark.slow
def test_a_kept_cache_outlives_its_jobs_until_stopped(tiny_dataset, capsys):
    env = {**os.environ, "SENECA_KEEP_CACHE": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(os.path.dirname(os.path.dirname(__file__)))])
    job = [sys.executable, "-c", JOB.format(root=str(tiny_dataset), job=None)]
    warm.run(job, env=env, check=True, timeout=120)
    assert main(["cache", "status", "--json"]) == 0  # the job is gone, its cache is not
    assert '"served": 48' in capsys.readouterr().out
    assert main(["cache", "stop"]) == 0
    assert "stopped" in capsys.readouterr().out
    assert main(["cache", "status"]) == 2


@pytest.mark.slow
def test_a_sweep_run_one_job_after_another_finds_the_cache_warm(tiny_dataset, capsys):
    env = {**os.environ, "PYTHONPATH": str(os.path.dirname(os.path.dirname(__file__)))}
    del env["SENECA_CACHE_IDLE"]  # the default: the cache outlives its last job a while
    # a sweep that names its runs alike: each run's loader ends the name's lease as it exits
    job = [sys.executable, "-c", JOB.format(root=str(tiny_dataset), job="sweep")]
    rates = []
    for _ in range(2):
        done = warm.run(job, env=env, check=True, timeout=120, capture_output=True)
        rates.append(float(done.stdout.decode().split()[-1]))
        assert "waiting to see whether it still runs" not in done.stderr.decode()
    assert rates[0] == 0.0 and rates[1] >= 0.9, rates  # the second job's first epoch: hits
    assert main(["cache", "stop"]) == 0  # ends it now, not after the idle time
    assert "stopped" in capsys.readouterr().out
    assert main(["cache", "status"]) == 2


def test_stop_while_a_job_runs_says_the_truth(tiny_dataset, capsys):
    loader = SenecaLoader(indexed(tiny_dataset), batch_size=8, cache_size="20MB")
    assert sum(len(y) for _, y in loader) == 48
    assert main(["cache", "stop"]) == 0
    assert "still serves 1 process" in capsys.readouterr().out
    assert main(["cache", "status"]) == 0  # it does: status still finds it
    assert loader.cache_url in capsys.readouterr().out
