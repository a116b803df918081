"""Ctrl-C, as a terminal sends it (SIGINT to the whole foreground process group): a training
script with workers ends (its traceback, then every exit handler), and a cache node stops
cleanly."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from helpers import warm

TRAIN = textwrap.dedent(
    """
    import atexit, faulthandler, signal, sys, time
    faulthandler.enable(all_threads=True)  # stacks, should it die of a fatal signal
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # stacks, should it not end
    # Registered first, so it runs last of the exit handlers (the loader's, multiprocessing's)
    atexit.register(lambda: print("exit handlers done", file=sys.stderr, flush=True))
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


class _Lines:
    """A pipe's lines as they come, each with the monotonic time it arrived (read in a thread,
    so that a full pipe never holds the process up)."""

    def __init__(self, pipe) -> None:
        self.seen: list[tuple[float, str]] = []
        self._thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self._thread.start()

    def _read(self, pipe) -> None:
        for line in pipe:
            self.seen.append((time.monotonic(), line))

    def text(self) -> str:
        self._thread.join(timeout=60)
        return "".join(line for _, line in self.seen)

    def first(self, prefix: str) -> float:
        """When the first line starting with ``prefix`` arrived."""
        self._thread.join(timeout=60)
        return next(at for at, line in self.seen if line.startswith(prefix))


def _ctrl_c(proc: subprocess.Popen, stderr: _Lines | None = None) -> float:
    """Send SIGINT to ``proc``'s process group; the seconds until it exits. One that has not
    ended in 60 s (it takes 1-8 s) fails the test with every thread's stack of every process of
    the group."""
    start = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGUSR1)
        time.sleep(1.0)
        os.killpg(proc.pid, signal.SIGKILL)
        out = stderr.text() if stderr else proc.stderr.read()
        pytest.fail(f"still running 60 s after Ctrl-C; its stacks:\n{out[-12000:]}")
    return time.monotonic() - start


@pytest.mark.slow
@pytest.mark.parametrize(
    ("slow", "step"), [(0.0, 0.5), (0.2, 0.0)], ids=["in-a-step", "waiting-for-a-batch"]
)
def test_ctrl_c_ends_a_training_loop_with_workers(tiny_dataset, redis_url, slow, step):
    paths = [os.path.join(os.path.dirname(__file__), ".."), os.getcwd()]
    code = TRAIN.format(paths=paths, root=str(tiny_dataset), url=redis_url, slow=slow, step=step)
    # (a job of the fork server gets Python's SIGINT handler, as a terminal's job has it, even
    # where this suite ignores SIGINT: started in the background of a shell)
    proc = warm.popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        errors="replace",  # whatever a dying process writes, the reader reads on
        start_new_session=True,  # a process group of its own, as a terminal's foreground job
    )
    stderr = _Lines(proc.stderr)
    try:
        assert proc.stdout.readline().strip() == "training"
        time.sleep(1.0)  # in a step, with batches made ahead and workers busy
        _ctrl_c(proc, stderr)  # (fails with every process's stacks if it does not end)
    finally:
        if proc.poll() is None:
            proc.kill()
    # (a process that died before the Ctrl-C, or of it without Python's handler, says how)
    err = stderr.text()
    assert "KeyboardInterrupt" in err, (proc.returncode, err)
    # the traceback, then every exit handler (the loader's, multiprocessing's), in that order
    assert err.index("KeyboardInterrupt") < err.index("exit handlers done"), err
    # How soon it exits is the machine's to say (1-8 s here, for DataLoader and SenecaLoader
    # alike, most of it the interpreter freeing torch's objects); that the loop does not wait
    # for the batch the same Ctrl-C stopped is tests/loader/test_ahead.py's, without a clock.


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
