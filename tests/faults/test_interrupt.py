"""Ctrl-C, as a terminal sends it (SIGINT to the whole foreground process group): a training
script with workers ends at once, and a cache node stops cleanly."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

TRAIN = textwrap.dedent(
    """
    import faulthandler, signal, sys, time
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # stacks, should it not end
    sys.path[:0] = {paths!r}
    from torchvision import transforms as T
    from helpers.indexed import indexed
    from helpers.opaque import Slow
    from seneca import SenecaLoader
    ds = indexed({root!r})
    ds.transform = T.Compose([Slow({slow}), T.RandomResizedCrop(16), T.ToTensor()])
    loader = SenecaLoader(ds, batch_size=4, shuffle=True, num_workers=2, cache={url!r},
                          cache_size="20MB")
    for epoch in range(100):
        for k, _ in enumerate(loader):
            if epoch == 0 and k == 2:
                print("training", flush=True)
            time.sleep({step})  # a training step
    """
)


def _interruptible() -> None:
    """SIGINT as a terminal's job gets it: a suite started in the background of a shell ignores
    it, and a child that inherits that never sees KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _ctrl_c(proc: subprocess.Popen) -> float:
    """Send SIGINT to ``proc``'s process group; the seconds until it exits. One that has not
    ended in 30 s fails the test with every thread's stack of every process of the group."""
    start = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGUSR1)
        time.sleep(1.0)
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"still running 30 s after Ctrl-C; its stacks:\n{proc.stderr.read()[-12000:]}")
    return time.monotonic() - start


@pytest.mark.slow
@pytest.mark.parametrize(
    ("slow", "step"), [(0.0, 0.5), (0.2, 0.0)], ids=["in-a-step", "waiting-for-a-batch"]
)
def test_ctrl_c_ends_a_training_loop_with_workers_at_once(tiny_dataset, redis_url, slow, step):
    paths = [os.path.join(os.path.dirname(__file__), ".."), os.getcwd()]
    code = TRAIN.format(paths=paths, root=str(tiny_dataset), url=redis_url, slow=slow, step=step)
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a process group of its own, as a terminal's foreground job
        preexec_fn=_interruptible,
    )
    try:
        assert proc.stdout.readline().strip() == "training"
        time.sleep(1.0)  # in a step, with batches made ahead and workers busy
        took = _ctrl_c(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read()
    assert "KeyboardInterrupt" in err
    assert took < 3.0, took  # it took 5.7-5.9 s waiting on the stopped workers; DataLoader 0.8


@pytest.mark.slow
def test_ctrl_c_stops_a_cache_node_cleanly(free_port):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "seneca",
            "cache-node",
            "--port",
            str(free_port),
            "--maxmemory",
            "16MB",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        seen = []
        while not (seen and seen[-1].startswith("cache node ready")):
            seen.append(proc.stdout.readline())
            assert seen[-1], seen  # the node did not exit before it was ready
        _ctrl_c(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = proc.stdout.read()
    assert proc.returncode == 0, out
    assert "You insist" not in out and "error" not in out and "ready to exit" in out
