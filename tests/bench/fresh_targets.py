"""Targets the fresh-job tests run in ``python -m seneca._bench.fresh`` (importable by name)."""

import multiprocessing
import os
import sys


def report(spec, ready):
    ready()
    return {
        "tag": spec["tag"],
        "pid": os.getpid(),
        "torch_loaded": "torch" in sys.modules,
        "start_method": multiprocessing.get_start_method(),
    }


def fail_before_ready(spec, ready):
    raise ValueError(f"{spec['tag']} cannot start")


def fail_after_ready(spec, ready):
    ready()
    raise ValueError(f"{spec['tag']} failed")
