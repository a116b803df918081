"""Waiting for an event in a test: a deadline far beyond its quiet time, and a failure that says
what was awaited and where every thread of this process was."""

from __future__ import annotations

import faulthandler
import tempfile
import time
from collections.abc import Callable
from typing import Any

__all__ = ["DEADLINE", "stacks", "wait_for"]

#: the default deadline: the events awaited come within a second or two on a quiet machine,
#: and well within this on one loaded many times over
DEADLINE = 60.0


def wait_for(
    condition: Callable[[], Any], what: str, timeout: float = DEADLINE, poll: float = 0.01
) -> Any:
    """Poll ``condition`` until it returns something true (returned); past ``timeout`` seconds,
    fail the test naming what was awaited, with every thread's stack."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:g} s for {what}; threads:\n{stacks()}")
        time.sleep(poll)


def stacks() -> str:
    """Every thread's stack in this process, as faulthandler writes them."""
    with tempfile.TemporaryFile("w+") as f:
        faulthandler.dump_traceback(f, all_threads=True)
        f.seek(0)
        return f.read()
