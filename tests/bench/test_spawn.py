"""Benchmark processes start fresh (none of the caller's state) and together, and report once."""

import multiprocessing
import os
import sys
import time

import pytest

from seneca._bench import spawn
from seneca_base.errors import SenecaError

_CALLER_STATE: list[str] = []


def _report(tag, barrier, out):
    barrier.wait(timeout=60)
    out.put(
        {
            "tag": tag,
            "pid": os.getpid(),
            "caller_state": list(_CALLER_STATE),
            "torch_loaded": "torch" in sys.modules,
            "draws": _draws(),
            "start_method": multiprocessing.get_start_method(),
        }
    )


def _draws():
    import numpy
    import torch

    return torch.initial_seed(), torch.randint(0, 2**62, ()).item(), numpy.random.randint(2**62)


def _fail(tag, barrier, out):
    barrier.abort()
    out.put({"error": f"{tag} failed"})


def test_processes_start_fresh_from_a_server_that_imported_torch():
    _CALLER_STATE.append("set in the caller only")
    try:
        group = spawn.ProcessGroup(_report, [("a",), ("b",)], parent_waits=True)
        group.start_together(timeout=60)
        reports = sorted(group.reports(60, "test"), key=lambda r: r["tag"])
    finally:
        _CALLER_STATE.clear()
    assert [r["tag"] for r in reports] == ["a", "b"]
    assert len({r["pid"] for r in reports} | {os.getpid()}) == 3
    assert all(r["caller_state"] == [] for r in reports)  # not forked from the caller
    assert all(r["torch_loaded"] for r in reports)  # preloaded by the forkserver
    # each seeds torch and numpy afresh (forked, they would draw the forkserver's numbers:
    # concurrent benchmark jobs in one order)
    draws = [r["draws"] for r in reports]
    assert all(x != y for x, y in zip(*draws, strict=True))
    assert spawn.job_context().get_start_method() == "forkserver"
    # but each starts its own processes (a DataLoader's workers) as a script would: with the
    # platform's default (the first listed), not from a forkserver of its own
    default = multiprocessing.get_all_start_methods()[0]
    assert [r["start_method"] for r in reports] == [default, default]


def test_a_failed_process_is_an_error_naming_the_work():
    group = spawn.ProcessGroup(_fail, [("x",)])
    with pytest.raises(SenecaError, match="x failed"):
        group.reports(60, "test")


def _die(tag, barrier, out):
    if tag == "dies":
        os._exit(3)  # killed, or crashed: no report
    barrier.wait(timeout=60)
    out.put({"tag": tag})


def test_a_process_that_ends_without_its_report_is_an_error_at_once():
    group = spawn.ProcessGroup(_die, [("dies",), ("waits",)])
    start = time.monotonic()
    with pytest.raises(SenecaError, match="ended or timed out without a report"):
        group.reports(600, "test")
    assert time.monotonic() - start < 120  # found when it ended, not at the timeout (600 s)
