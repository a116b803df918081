"""With workers, the loader process's share of each batch is made a batch ahead by a thread,
with one intra-op thread there while the training loop keeps its own setting."""

import inspect
import signal
import threading
import time

import pytest
import torch
from helpers import interrupt, opaque
from helpers.indexed import indexed
from helpers.waiting import wait_for
from torchvision.datasets import ImageFolder
from torchvision.transforms import v2

from seneca import SenecaLoader
from seneca.loader._ahead import made_ahead

TRANSFORM = v2.Compose(
    [
        opaque.Resize((20, 28), antialias=True),
        v2.PILToTensor(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize([0.5, 0.5, 0.5], [0.25, 0.25, 0.25]),
    ]
)


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("workers", [0, 1])
def test_the_batch_tail_runs_ahead_with_one_thread_while_workers_run(
    tiny_dataset, redis_proc, two_threads, workers
):
    seen: list[tuple[int, bool]] = []
    last = v2.ToDtype(torch.float32)  # a batch tail step that the loader calls (not fused)
    forward = last.forward

    def record(*args):
        seen.append(
            (torch.get_num_threads(), threading.current_thread() is threading.main_thread())
        )
        return forward(*args)

    last.forward = record
    ds = ImageFolder(str(tiny_dataset), transform=v2.Compose([*TRANSFORM.transforms, last]))
    loader = SenecaLoader(
        ds, batch_size=8, shuffle=True, cache=redis_proc.url, split=(0, 0, 1), num_workers=workers
    )
    batches = 0
    for x, _ in loader:
        assert torch.get_num_threads() == 2  # the user's setting, all along
        assert x.dtype == torch.float32
        batches += 1
    assert batches == len(loader) and len(seen) == batches  # once per batch, not per sample
    # with workers, in the batch thread with one intra-op thread; without, as DataLoader
    assert set(seen) == ({(1, False)} if workers else {(2, True)})


def test_the_next_item_is_made_while_the_caller_has_this_one():
    making = [threading.Event() for _ in range(3)]

    def items():
        for k in range(3):
            making[k].set()
            yield k

    it = made_ahead(items(), 1)
    assert next(it) == 0
    assert making[1].wait(5)  # made without asking
    assert list(it) == [1, 2]


def test_an_error_is_raised_where_its_item_is_asked_for():
    def items():
        yield "first"
        raise ValueError("a bad sample")

    it = made_ahead(items(), 1)
    assert next(it) == "first"
    with pytest.raises(ValueError, match="a bad sample"):
        next(it)


def test_a_loop_cut_short_stops_the_thread_and_closes_its_items():
    closed = threading.Event()

    def items():
        try:
            k = 0
            while True:
                yield k
                k += 1
        finally:
            closed.set()

    before = {t.ident for t in threading.enumerate()}
    it = made_ahead(items(), 1)
    assert next(it) == 0
    it.close()
    assert closed.is_set()  # closed in the thread, which has ended
    assert {t.ident for t in threading.enumerate()} <= before


@pytest.mark.parametrize("persistent", [False, True])
def test_an_iteration_cut_short_stops_before_the_next_starts(tiny_dataset, redis_proc, persistent):
    loader = SenecaLoader(
        indexed(tiny_dataset),
        batch_size=4,
        shuffle=True,
        cache=redis_proc.url,
        num_workers=2,
        persistent_workers=persistent,
    )
    first = iter(loader)  # kept: not closed by the loop's end
    next(first)
    assert any(t.name == "seneca-batches" for t in threading.enumerate())  # making batches
    got = sorted(int(i) for _, y in loader for i in y)
    assert got == list(range(48))  # the next iteration: every sample once
    with pytest.raises(StopIteration):
        next(first)  # the abandoned iteration ends


class _Interrupted(BaseException):
    """A Ctrl-C of the test's own (pytest takes KeyboardInterrupt for its own)."""


def test_an_interrupted_loop_does_not_wait_for_the_batch_being_made(monkeypatch):
    """Ctrl-C while the loop waits for a batch that its thread is still making (its workers
    stopped by the same Ctrl-C): the loop ends at once, the thread left to end by itself. A
    loop that waited for the thread would wait here until the watchdog gives the batch up."""
    monkeypatch.setattr("seneca.defaults.AHEAD_STOP_WAIT_S", 3600.0)  # a wait would be long
    making, release, gave_up = threading.Event(), threading.Event(), []

    def batches():
        yield 0
        making.set()
        gave_up.append(not release.wait(60))  # the watchdog: the loop waited for this batch
        yield 1

    def interrupt(signum, frame):
        raise _Interrupted

    loop = made_ahead(batches(), threads=1)
    assert next(loop) == 0
    main = threading.get_ident()

    def ctrl_c():
        making.wait(60)
        while inspect.getgeneratorstate(loop) != inspect.GEN_RUNNING:  # the loop is waiting
            time.sleep(0.001)
        signal.pthread_kill(main, signal.SIGUSR2)

    old = signal.signal(signal.SIGUSR2, interrupt)
    sender = threading.Thread(target=ctrl_c)
    try:
        sender.start()
        with pytest.raises(_Interrupted):
            next(loop)
        assert not gave_up, "the interrupted loop waited for its thread's batch"
    finally:
        release.set()
        sender.join()
        signal.signal(signal.SIGUSR2, old)


@pytest.mark.parametrize("pause", [0.0, 0.001], ids=["items-ready", "waiting-for-items"])
def test_a_ctrl_c_anywhere_in_the_loop_ends_it_and_its_thread(pause):
    """A signal handler's exception (Ctrl-C's KeyboardInterrupt, DataLoader's error for a dead
    worker) at each place it can land in three steps of a loop: the loop ends with it, and so
    does the thread. (A lock taken in Python code, as queue.Queue's, is left held by one landing
    just after it is taken, and the loop's end then waits on it forever.)"""

    def loop() -> None:
        def items():
            k = 0
            while True:
                time.sleep(pause)
                yield k
                k += 1

        it = made_ahead(items(), 0)
        try:
            assert [next(it) for _ in range(3)] == [0, 1, 2]
        finally:
            it.close()

    def run(at: int) -> bool:
        """Whether the run was interrupted (the end of the loop has more places when it waits
        for the thread to end: a run may pass fewer than ``at``)."""
        before = set(threading.enumerate())
        seen, raised = interrupt.run(loop, at)
        assert raised == (0 < at <= seen)  # the loop ended with it
        wait_for(
            lambda: not any(t.is_alive() for t in set(threading.enumerate()) - before),
            f"the loop's thread to end, interrupted at place {at}",
        )
        return raised

    places, _ = interrupt.run(loop, 0)
    assert places > 20
    assert sum(run(at) for at in range(1, places + 1)) > places // 2
