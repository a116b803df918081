"""The loader process's share of each batch, run with the intra-op threads of a worker.

With workers, DataLoader runs a batch's work in the workers, each with one torch intra-op
thread. SenecaLoader moves part of that work into the loader process: hits read into the
batch, the workers' rows copied in, and the batch tail (``ToDtype``/``Normalize`` once per
batch). Run there with the process's own setting (by default one thread per core), that work
woke OpenMP threads that then spun on cores the workers were decoding on: with 1 worker on 2
cores the loader process took 21-25 ms of CPU a batch instead of 4.6 ms, and each batch came
9% later. :func:`with_threads` runs that share with ``defaults.LOADER_THREADS`` threads and
puts the process's setting back before the batch is handed over, so the training step runs
with the user's setting.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["with_threads"]


def with_threads(it: Iterator[Any], threads: int) -> Iterator[Any]:
    """The items of ``it``, each made with torch's intra-op threads set to ``threads`` (the
    setting in force when it is asked for is put back before it is yielded)."""
    while True:
        before = torch.get_num_threads()
        if before != threads:
            torch.set_num_threads(threads)
        try:
            item = next(it)
        except StopIteration:
            return
        finally:
            if before != threads:
                torch.set_num_threads(before)
        yield item
