"""Fresh random seeds in every process forked from here: imported by the benchmark forkserver
(``seneca._bench.spawn``), never by the loader.

A forked process inherits its parent's generators. Python's ``random`` reseeds itself after a
fork, but torch's and numpy's default generators do not: every benchmark process forked from
the one forkserver would shuffle, crop and flip with the same numbers (concurrent jobs in the
same order), where a spawned process seeds them from the OS. This module makes forked
processes seed them from the OS too.
"""

from __future__ import annotations

import random
import sys

from seneca_base.process import after_fork

__all__: list[str] = []


def _reseed() -> None:
    random.seed()
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


after_fork(_reseed)
