"""Public names imported on first use, with Python's garbage collector paused meanwhile.

``from seneca import SenecaLoader`` imports the loader's modules and what they need (redis-py,
``ods``, ``mdp``) the first time it runs. In a process that has imported torch, those imports
create enough long-lived objects to start a full garbage collection, which walks torch's
objects: most of the CPU the import takes (``scripts/worker_start.py`` measures it). A
DataLoader worker started with ``spawn`` or ``forkserver`` imports the training script again,
and with it SenecaLoader, so each worker paid that per start. The collector is paused while
the modules are imported (nothing they make is garbage) and resumed after, if it was running.
"""

from __future__ import annotations

import gc
import importlib
from typing import Any

__all__ = ["attribute"]


def attribute(module: str, name: str) -> Any:
    """``module.name``, the module imported with the garbage collector paused."""
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        return getattr(importlib.import_module(module), name)
    finally:
        if paused:
            gc.enable()
