"""Ctrl-C at every place it can land.

A signal handler (Python's for SIGINT raises KeyboardInterrupt; DataLoader's for SIGCHLD raises
for a worker that died) runs in the main thread between two instructions, at the places where
CPython (3.11) looks for pending signals: a function's start, a loop's jump back, the end of a
call. :func:`run` runs a function in a thread with a trace function that raises
:class:`Interrupted` at the ``at``-th such place, as a handler would there: a test sweeps ``at``
over every place a piece of code has, deterministically (signals sent at random times missed,
in 24,000 loops here, the one place where the batch thread's hand-over hung a CI run). Left
out: places inside CPython's ``Thread.start``, which is not safe against an interrupt itself
(and not ours to test), and in weak references' callbacks, which the interpreter runs as it
frees an object and where it prints and drops an exception. The function must not fork: the
child's thread would keep the trace function.
"""

from __future__ import annotations

import _weakrefset
import dis
import functools
import gc
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

from helpers.waiting import DEADLINE, stacks

__all__ = ["Interrupted", "run"]

#: where weak references' callbacks are
_CALLBACKS = frozenset({weakref.__file__, _weakrefset.__file__})


class Interrupted(BaseException):
    """The tests' Ctrl-C (pytest takes KeyboardInterrupt for its own)."""


@functools.cache
def _places(code: Any) -> frozenset[int]:
    """The offsets in ``code`` where a signal handler may run."""
    out, before = set(), None
    for ins in dis.get_instructions(code):
        if ins.opname in ("RESUME", "JUMP_BACKWARD") or (before and before.opname == "CALL"):
            out.add(ins.offset)
        before = ins
    return frozenset(out)


class _RaiseAt:
    def __init__(self, at: int, within: tuple[str, ...]) -> None:
        self.at, self.seen, self.within = at, 0, within

    def __call__(self, frame: Any, event: str, arg: Any) -> Any:
        if not frame.f_code.co_filename.startswith(self.within):
            return None  # (its calls are looked at)
        f = frame
        while f is not None:
            if f.f_code is threading.Thread.start.__code__ or f.f_code.co_filename in _CALLBACKS:
                return None
            f = f.f_back
        places = _places(frame.f_code)
        frame.f_trace_opcodes = True

        def step(frame: Any, event: str, arg: Any) -> Any:
            if event == "opcode" and frame.f_lasti in places:
                self.seen += 1
                if self.seen == self.at:
                    raise Interrupted  # (a trace function that raises is turned off)
            return step

        return step


def run(fn: Callable[[], Any], at: int, within: tuple[str, ...] = ("",)) -> tuple[int, bool]:
    """Run ``fn`` in a thread of its own, interrupted at its ``at``-th place (0: never) in
    code whose file is ``within`` the folders given (default: any); the places it passed and
    whether the interrupt came out of it. One that has not ended within the suite's deadline
    fails the test with every thread's stack."""
    raise_at, out = _RaiseAt(at, within), []

    def body() -> None:
        sys.settrace(raise_at)
        try:
            fn()
            out.append(False)
        except Interrupted:
            out.append(True)
        except BaseException as err:  # the test's own failure: raised in the test
            out.append(err)
        finally:
            sys.settrace(None)

    thread = threading.Thread(target=body, name=f"interrupted-at-{at}", daemon=True)
    collecting = gc.isenabled()
    gc.disable()  # no other test's garbage is finalized in the run (where an interrupt is lost)
    try:
        thread.start()
        thread.join(DEADLINE)
    finally:
        if collecting:
            gc.enable()
    if not out:
        raise AssertionError(f"interrupted at place {at}, it did not end; threads:\n{stacks()}")
    if isinstance(out[0], BaseException):
        raise out[0]
    return raise_at.seen, out[0]
