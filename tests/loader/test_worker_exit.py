"""A worker's exit waits for the results its queue is still sending: a spawned process whose
interpreter ends while the queue's feeder thread moves a tensor into shared memory aborts
("terminate called without an active exception") unless it waits."""

import multiprocessing as mp

import pytest
import torch

from seneca.loader._workers import guard_exit


def _send_and_exit(queue) -> None:
    guard_exit()
    queue.put(torch.zeros(50_000_000, dtype=torch.uint8))  # moved to shared memory as it is sent
    queue.cancel_join_thread()  # as a worker told to stop does: it leaves without waiting
    queue.close()


@pytest.mark.slow
def test_a_spawned_process_exits_cleanly_while_its_queue_sends_a_tensor():
    # without the guard the process aborts at every try here (4 of 4): one shows it
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    process = ctx.Process(target=_send_and_exit, args=(queue,))
    process.start()
    process.join(120)
    assert process.exitcode == 0
