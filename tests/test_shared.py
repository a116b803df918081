"""SharedFile: memory shared by a job's processes, whatever their start method, with no name."""

import multiprocessing as mp
import os
import pickle
import threading
import time

from helpers.shm import held, made_here

from seneca_base.shared import SharedFile


def _write(shared, value):
    with shared.locked() as memory:
        memory[0] = value
    return shared.once("said")


def _child(shared, value, said):
    said.put(_write(shared, value))


def _own_shm_names():
    """This process's open files and mappings whose name starts with seneca-."""
    return [n for n in held() if "/seneca-" in n]


def test_every_process_sees_one_memory_with_no_name():
    before = set(os.listdir("/dev/shm"))
    shared = SharedFile("test", 16)
    assert shared.size == 16 and len(shared.memory) == 16
    assert not made_here(before)  # nothing a killed job could leave behind
    assert _own_shm_names() and all(n.endswith("(deleted)") for n in _own_shm_names())
    answers = []
    # (not forkserver: this process's server would be started without what other tests preload)
    for method, value in (("fork", 7), ("spawn", 9)):
        ctx = mp.get_context(method)
        said = ctx.Queue()
        proc = ctx.Process(target=_child, args=(shared, value, said))
        proc.start()
        proc.join(60)
        assert proc.exitcode == 0 and shared.memory[0] == value  # the child's write, seen here
        answers.append(said.get(timeout=60))
    assert answers == [True, False]  # said once per job
    assert not shared.once("said") and shared.once("other")


def test_a_copy_pickled_outside_a_process_start_is_a_copy_of_the_bytes():
    shared = SharedFile("test", 4)
    shared.memory[:] = b"abcd"
    assert shared.once("said")
    copy = pickle.loads(pickle.dumps(shared))
    assert bytes(copy.memory) == b"abcd" and not copy.once("said")  # what was said, too
    copy.memory[0] = ord("z")
    assert bytes(shared.memory) == b"abcd"  # shared with no one


def _hold(shared, started, seconds):
    with shared.locked() as memory:
        started.set()
        time.sleep(seconds)
        memory[1] = 1


def test_locked_excludes_other_processes_and_threads():
    shared = SharedFile("test", 4)
    ctx = mp.get_context("fork")
    started = ctx.Event()
    proc = ctx.Process(target=_hold, args=(shared, started, 0.3))
    proc.start()
    assert started.wait(30)
    with shared.locked() as memory:  # waits for the child's change
        assert memory[1] == 1
    proc.join(30)
    done = threading.Event()
    thread = threading.Thread(target=_hold, args=(shared, done, 0.3))
    memory = shared.memory
    memory[1] = 0
    thread.start()
    assert done.wait(30)
    with shared.locked() as memory:  # waits for the thread's change
        assert memory[1] == 1
    thread.join()
