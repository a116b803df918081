"""Jobs as separate OS processes on one cache: different speeds, a late join, workers, a job
killed and resumed from its checkpoint. Every job's every epoch is exactly once, and the jobs
read each other's cached samples."""

import collections
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from helpers import warm

N = 48

_JOB = textwrap.dedent(
    """
    import json, sys, time
    sys.path[:0] = {paths!r}
    from pathlib import Path
    from helpers.indexed import indexed
    from seneca import SenecaLoader
    loader = SenecaLoader(indexed(Path({root!r})), batch_size=4, shuffle=True, cache={url!r},
                          cache_size="20MB", job={job!r}, num_workers={workers})
    for epoch in range({epochs}):
        labels = []
        for _, ys in loader:
            labels += [int(y) for y in ys]
            time.sleep({step})  # a training step
        stats = loader.stats()
        hits = sum(stats[t]["hits"] for t in ("augmented", "decoded", "encoded"))
        print(json.dumps({{"epoch": epoch, "labels": labels, "hits": hits}}), flush=True)
        loader.reset_stats()
    """
)


def _start(root, url, job, step, epochs=2, workers=0):
    paths = [os.path.join(os.path.dirname(__file__), ".."), os.getcwd()]
    code = _JOB.format(
        paths=paths, root=str(root), url=url, job=job, step=step, epochs=epochs, workers=workers
    )
    return warm.popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def _check(child, epochs, read=""):
    """``child``'s epochs, each of every sample once (``read``: what was read of its output
    already)."""
    out, _ = child.communicate(timeout=240)
    assert child.returncode == 0
    lines = [json.loads(line) for line in (read + out).splitlines()]
    assert [line["epoch"] for line in lines] == list(range(epochs))
    for line in lines:
        assert collections.Counter(line["labels"]) == collections.Counter(range(N))
    return lines


@pytest.mark.slow
def test_jobs_at_speeds_1_2_3_with_a_late_join(tiny_dataset, redis_proc):
    slow = _start(tiny_dataset, redis_proc.url, "slow", step=0.03)
    middle = _start(tiny_dataset, redis_proc.url, "middle", step=0.015)
    # the fast job joins once the others are under way: after the slow one's first epoch (a
    # fixed wait was not enough on a busy machine, where starting Python takes seconds)
    first = slow.stdout.readline()
    fast = _start(tiny_dataset, redis_proc.url, "fast", step=0.01)
    _check(slow, 2, read=first)
    _check(middle, 2)
    late = _check(fast, 2)
    assert late[0]["hits"] > 0  # its first epoch reads what the other jobs cached


@pytest.mark.slow
def test_concurrent_jobs_with_two_workers_each(tiny_dataset, redis_proc):
    """Three jobs of three processes each (six workers) deciding and fetching at once."""
    jobs = [_start(tiny_dataset, redis_proc.url, f"w{k}", 0.0, 1, 2) for k in range(3)]
    for child in jobs:
        _check(child, 1)


_CHECKPOINTED = textwrap.dedent(
    """
    import json, os, sys, time
    sys.path[:0] = {paths!r}
    from pathlib import Path
    from helpers.indexed import indexed
    from seneca import SenecaLoader
    loader = SenecaLoader(indexed(Path({root!r})), batch_size=4, shuffle=True, cache={url!r},
                          cache_size="20MB", job="resumable")
    saved, kill_after = Path({saved!r}), {kill_after!r}
    if saved.exists():  # a restart: continue the epoch from the checkpoint
        state = json.loads(saved.read_text())
        loader.load_state_dict({{**state, "consumed": bytes.fromhex(state["consumed"])}})
    labels = []
    for k, (_, ys) in enumerate(loader):
        labels += [int(y) for y in ys]
        if kill_after:  # the first run checkpoints after every batch
            state = loader.state_dict()
            tmp = saved.with_suffix(".tmp")
            tmp.write_text(json.dumps({{**state, "consumed": state["consumed"].hex(),
                                        "labels": labels}}))
            os.replace(tmp, saved)
        if k + 1 == kill_after:
            print("ready", flush=True)
            time.sleep(60)
    print(json.dumps(labels), flush=True)
    """
)


@pytest.mark.slow
def test_a_job_killed_and_resumed_from_its_checkpoint_serves_its_epoch_once(
    tiny_dataset, redis_proc, tmp_path
):
    paths = [os.path.join(os.path.dirname(__file__), ".."), os.getcwd()]
    saved = tmp_path / "state.json"

    def run(kill_after):
        code = _CHECKPOINTED.format(
            paths=paths,
            root=str(tiny_dataset),
            url=redis_proc.url,
            saved=str(saved),
            kill_after=kill_after,
        )
        return warm.popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)

    first = run(5)
    try:
        assert first.stdout.readline().strip() == "ready"
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=60)
    before = json.loads(saved.read_text())["labels"]
    assert len(before) == 5 * 4
    second = run(None)
    out, _ = second.communicate(timeout=120)
    assert second.returncode == 0
    after = json.loads(out.splitlines()[-1])
    assert collections.Counter(before + after) == collections.Counter(range(N))
