"""A job that stops calling (crashed, SIGKILLed) leaves no metadata behind: its lease runs out,
and once ``job_forget`` has passed too the next admission or release of any job of the
dataset deletes its keys. A job that was only slow joins again and restores its epoch."""

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from helpers import warm
from helpers.indexed import indexed

from ods.store import OdsStore
from seneca import SenecaLoader
from seneca_base.errors import UnknownJobError


def _job_keys(r, store, name):
    return [k for k in store.keys.job(store.keys.job_name(name)) if r.exists(k)]


def test_a_silent_jobs_keys_are_deleted_after_its_lease_and_the_forget_time(redis_proc):
    r = redis_proc.client
    # a forget time of seconds: the checks between the lease's end and the forget time's are
    # a few round trips apart, even on a busy machine
    opts = dict(capacity={"encoded": 10}, lease=0.2, job_forget=3.0)
    a, b = OdsStore(r, "cj", 100, **opts), OdsStore(r, "cj", 100, **opts)
    for store, name in ((a, "a"), (b, "b")):
        store.join(name)
        store.start_epoch(name, 0)
        store.decide(name, 8)
    assert _job_keys(r, a, "a")
    time.sleep(0.3)  # a's lease ran out, the forget time not yet: a's keys stay
    b.join("b")
    assert _job_keys(r, a, "a") and b.refresh_jobs() == ["b"]
    time.sleep(3.0)
    b.admit("b", [(99, "encoded", 1, b"")])  # any admission or release of the dataset
    assert _job_keys(r, a, "a") == []
    assert r.zscore(a.keys.jobs, "a") is None
    with pytest.raises(UnknownJobError):
        a.decide("a", 8)


_CHILD = textwrap.dedent(
    """
    import sys, time
    sys.path[:0] = {paths!r}
    import ods.defaults
    ods.defaults.JOB_LEASE, ods.defaults.JOB_FORGET = 0.5, 0.5
    from pathlib import Path
    from helpers.indexed import indexed
    from seneca import SenecaLoader
    loader = SenecaLoader(indexed(Path({root!r})), batch_size=8, shuffle=True, num_workers=2,
                          cache={url!r}, cache_size="20MB", job="doomed")
    for k, _ in enumerate(loader):
        if k == 2:
            print("ready", flush=True)
            time.sleep(60)
    """
)


def _named_shared_memory(pid):
    """The files and mappings of process ``pid`` and its children whose names start with
    seneca-, as (name, still named)."""
    pids = [pid]
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        pids += [int(p) for p in f.read().split()]
    names = []
    for p in pids:
        for fd in os.listdir(f"/proc/{p}/fd"):
            with contextlib.suppress(FileNotFoundError):
                names.append(os.readlink(f"/proc/{p}/fd/{fd}"))
        with open(f"/proc/{p}/maps") as f:
            names += [line.split(None, 5)[-1].strip() for line in f if line.count(" ") >= 5]
    return [(n, not n.endswith("(deleted)")) for n in names if "/seneca-" in n]


@pytest.mark.slow
def test_a_sigkilled_job_leaves_no_metadata(tiny_dataset, redis_proc, monkeypatch):
    monkeypatch.setattr("ods.defaults.JOB_FORGET", 0.5)  # for this process's calls too
    paths = [os.path.join(os.path.dirname(__file__), ".."), os.getcwd()]
    code = _CHILD.format(paths=paths, root=str(tiny_dataset), url=redis_proc.url)
    child = warm.popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        shared = _named_shared_memory(child.pid)  # its workers' too
        assert shared and not [n for n, named in shared if named]  # nothing to leave behind
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(timeout=60)
    other = SenecaLoader(
        indexed(tiny_dataset), batch_size=8, shuffle=True, cache=redis_proc.url, cache_size="20MB"
    )
    store, r = other.store, redis_proc.client
    assert _job_keys(r, store, "doomed")  # the killed job's state is still there
    time.sleep(1.2)  # its lease and the forget time (0.5 s each) ran out
    got = sorted(int(y) for _, ys in other for y in ys)
    assert got == list(range(len(other.dataset)))
    assert _job_keys(r, store, "doomed") == []
    other.close()
