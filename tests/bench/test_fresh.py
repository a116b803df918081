"""``seneca bench``'s jobs are fresh interpreters that start together and report once."""

import multiprocessing
import os
import sys
from pathlib import Path

import pytest
import torch

from seneca._bench.fresh import FreshJobs
from seneca_base.errors import SenecaError


@pytest.fixture(autouse=True)
def importable(monkeypatch):
    """The jobs import this folder's targets module by name."""
    here = str(Path(__file__).parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))


def test_jobs_are_fresh_interpreters_that_start_together():
    jobs = FreshJobs("fresh_targets:report", [{"tag": "a"}, {"tag": "b"}])
    jobs.start_together(60, "test")
    reports = sorted(jobs.reports(60, "test"), key=lambda r: r["tag"])
    assert [r["tag"] for r in reports] == ["a", "b"]
    assert len({r["pid"] for r in reports} | {os.getpid()}) == 3
    assert torch.__name__ in sys.modules  # imported here, not in the jobs: they start fresh
    assert not any(r["torch_loaded"] for r in reports)
    # a script's start method: its DataLoader workers start as a user's would
    default = multiprocessing.get_all_start_methods()[0]
    assert [r["start_method"] for r in reports] == [default, default]


def test_a_job_that_fails_before_it_is_ready_is_an_error_naming_the_work():
    jobs = FreshJobs("fresh_targets:fail_before_ready", [{"tag": "x"}, {"tag": "y"}])
    with pytest.raises(SenecaError, match="bench x: a job failed before it was ready: .*x cannot"):
        jobs.start_together(60, "bench x")


def test_a_job_that_fails_while_working_is_an_error_naming_the_work():
    jobs = FreshJobs("fresh_targets:fail_after_ready", [{"tag": "x"}])
    jobs.start_together(60, "bench x")
    with pytest.raises(SenecaError, match="bench x failed in a job: ValueError: x failed"):
        jobs.reports(60, "bench x")
