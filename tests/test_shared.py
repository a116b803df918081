"""SharedFile: one file of state shared by a job's processes, whatever their start method."""

import gc
import multiprocessing as mp
import os
import pickle

from seneca_base.shared import SharedFile


def _write(shared, value):
    with shared.locked() as memory:
        memory[0] = value
    return shared.once("said")


def _child(shared, value, said):
    said.put(_write(shared, value))


def test_every_process_sees_one_file_and_its_owner_removes_it():
    shared = SharedFile("test", 16)
    path = shared.path
    assert os.path.basename(path).startswith("seneca-test-") and os.path.getsize(path) == 16
    answers = []
    for method, value in (("fork", 7), ("spawn", 9)):
        ctx = mp.get_context(method)
        said = ctx.Queue()
        proc = ctx.Process(target=_child, args=(shared, value, said))
        proc.start()
        proc.join(60)
        assert proc.exitcode == 0 and shared.memory[0] == value  # the child's write, seen here
        answers.append(said.get(timeout=5))
    assert answers == [True, False]  # said once per job
    assert not shared.once("said")
    copy = pickle.loads(pickle.dumps(shared))  # a copy maps the file, but does not own it
    del copy
    gc.collect()
    assert os.path.exists(path) and os.path.exists(f"{path}.said")
    del shared
    gc.collect()
    assert not os.path.exists(path) and not os.path.exists(f"{path}.said")
