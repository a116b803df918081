"""seneca_base.process, the one place that tells a forked child from the process that made an
object, and a process starting a child from one pickling for anything else: real forks and a
real spawned child."""

import multiprocessing as mp
import os
import pickle

from seneca_base.process import Made, after_fork, current, spawning


def _in_child(action) -> int:
    """Fork; run ``action`` in the child and exit with what it returns (an int)."""
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            code = action()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_forked_child_holds_its_parents_object_until_it_takes_it():
    made = Made()
    assert not made.inherited and made.pid == current()
    assert not made.take()  # already this process's

    def child() -> int:
        if not made.inherited:
            return 1
        if not made.take() or made.inherited or made.take():
            return 2
        return 0

    assert _in_child(child) == 0
    assert not made.inherited  # the parent's is still the parent's


_RAN: list[int] = []
after_fork(lambda: _RAN.append(current()))


def test_after_fork_runs_first_in_every_forked_child():
    assert current() not in _RAN

    def child() -> int:
        return 0 if _RAN and _RAN[-1] == current() else 1

    assert _in_child(child) == 0


class _Probe:
    """Pickles as whether the pickling process was starting a child."""

    def __reduce__(self):
        return bool, (spawning(),)


def _send(flag, queue) -> None:
    queue.put(flag)


def test_spawning_is_true_only_while_pickling_for_a_child_being_started():
    assert pickle.loads(pickle.dumps(_Probe())) is False
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    child = ctx.Process(target=_send, args=(_Probe(), queue))
    child.start()
    got = queue.get()
    child.join(60)
    assert got is True and child.exitcode == 0
