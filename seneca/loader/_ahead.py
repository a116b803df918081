"""The loader process's share of each batch, made one batch ahead in a thread of its own.

With DataLoader workers, SenecaLoader still does part of each batch in the loader process: it
reads the batch's cache hits into the batch tensor, puts the workers' rows in place and runs the
batch tail (``ToDtype``/``Normalize`` once per batch). Made when the training loop asks for the
batch, that work starts only after the loop's step, and the step then waits for it (the GPU
idles meanwhile). :func:`made_ahead` makes the next batch in a thread while the loop has the
one before (a training step spends its time in CUDA calls, which release the GIL, as
DataLoader's pin-memory thread relies on), so the loop finds it ready. What this saves is
measured in docs/benchmarks.md (Emulated GPU steps with workers).

The thread runs torch with ``threads`` intra-op threads (one, as each DataLoader worker has):
the process's own setting would wake OpenMP threads that then spin on the cores the workers
decode on, taking CPU from them. Under OpenMP, torch's setting is per thread, so the training
loop keeps its own; with another thread pool the setting would be the process's, and the thread
leaves it alone.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import queue
import threading
from collections.abc import Iterator
from typing import Any, TypeVar

from seneca import defaults

__all__ = ["closing", "made_ahead"]

log = logging.getLogger(__name__)

T = TypeVar("T")
_END = object()


@functools.cache
def _per_thread() -> bool:
    """Whether torch.set_num_threads in a thread leaves the other threads' setting alone (torch
    is imported here, so :func:`closing` is usable without it)."""
    import torch

    return "OpenMP" in torch.__config__.parallel_info()


def made_ahead(it: Iterator[T], threads: int, device: int | None = None) -> Iterator[T]:
    """The items of ``it``, each made in a thread while the caller has the one before.

    An error making an item is raised where the caller asks for that item. Closing this
    generator (a ``break`` out of the loop, or the loader's next iteration) stops the thread
    once it has made the item it is on, and closes ``it`` in that thread. ``device``: the CUDA
    device the thread works for (batches pinned for it), None for none.

    The caller's side touches only C-level queues (``queue.SimpleQueue``): an exception that a
    signal handler raises in the main thread (Ctrl-C's KeyboardInterrupt, DataLoader's error for
    a worker that died) lands between two of its instructions, never inside a lock that
    ``queue.Queue`` takes and releases in Python code, which such an exception can leave held,
    and the end of the loop would then wait on it forever.
    """
    made: queue.SimpleQueue = queue.SimpleQueue()  # (item, error) from the thread
    room: queue.SimpleQueue = queue.SimpleQueue()  # a place for one more item (or: look at stop)
    stop: list[bool] = []  # not empty: the caller is gone (a list's append takes no lock)
    room.put(None)  # one item made ahead, waiting for the caller
    thread = threading.Thread(
        target=_make,
        args=(it, made, room, stop, threads, device),
        name="seneca-batches",
        daemon=True,
    )
    interrupted = False
    try:
        thread.start()
        while True:
            item, err = made.get()
            if err is not None:
                try:
                    raise err
                finally:  # its traceback holds this frame: no reference cycle through it
                    del err
            if item is _END:
                return
            room.put(None)  # the next is made while the caller has this one
            yield item
    except GeneratorExit:
        raise
    except BaseException:  # Ctrl-C (or any error) while waiting: the loop is over
        interrupted = True
        raise
    finally:
        stop.append(True)
        room.put(None)  # wakes the thread if it waits for room
        _drain(made)  # a batch made for nobody: its memory goes now
        # a loop cut short by its caller waits for the thread to stop cleanly (the next
        # iteration may reuse what it uses); one interrupted does not wait on a thread that
        # may be waiting for workers the same Ctrl-C stopped (it is a daemon)
        if thread.is_alive():  # (not if the exception came before it started)
            wait = defaults.AHEAD_INTERRUPT_WAIT_S if interrupted else defaults.AHEAD_STOP_WAIT_S
            thread.join(wait)
        _drain(made)
        if thread.is_alive() and not interrupted:
            log.warning(
                "the loader's batch thread is still making a batch %.0f s after its loop ended",
                defaults.AHEAD_STOP_WAIT_S,
            )


@contextlib.contextmanager
def closing(it: Any) -> Iterator[None]:
    """Close ``it`` (a generator, or anything with ``close``) when the block ends, however."""
    try:
        yield
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()


def _make(
    it: Iterator[Any],
    made: queue.SimpleQueue,
    room: queue.SimpleQueue,
    stop: list[bool],
    threads: int,
    device: int | None,
) -> None:
    """The thread: ``it``'s items into ``made``, each once there is ``room`` for it, until
    ``it`` ends or fails, or the caller is gone (``stop``)."""
    import torch

    def handed(entry: tuple[Any, Any]) -> bool:
        room.get()
        if stop:
            return False
        made.put(entry)
        return True

    with closing(it):
        try:
            if threads and _per_thread():
                torch.set_num_threads(threads)
            if device is not None:
                torch.cuda.set_device(device)
            for item in it:
                if not handed((item, None)):
                    return
            handed((_END, None))
        except BaseException as err:  # raised in the caller's thread, where it asks for it
            handed((None, err))


def _drain(made: queue.SimpleQueue) -> None:
    """Drop what ``made`` holds."""
    while True:
        try:
            made.get_nowait()
        except queue.Empty:
            return
