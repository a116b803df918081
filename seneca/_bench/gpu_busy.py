"""How busy a GPU was while a benchmark ran, from NVML (``pynvml``, package nvidia-ml-py).

NVML's utilisation is the share of its last sample period (1/6 s to 1 s, by the device) in
which at least one kernel ran. :class:`GpuBusy` polls it every ``interval`` seconds in a thread
while a configuration runs and reports the mean: the share of the run the GPU had work. Without
NVML (no NVIDIA driver, or no pynvml) it measures nothing and reports None.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

__all__ = ["GpuBusy"]


class GpuBusy:
    """Polls the utilisation of CUDA device ``index`` (NVML's numbering; None: measure
    nothing) while in a ``with`` block; :attr:`busy` is the mean share (0-1), None when nothing
    was measured."""

    def __init__(self, index: int | None = 0, interval: float = 0.1) -> None:
        self.index = index
        self.interval = interval
        self.busy: float | None = None
        self._samples: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: Any = None

    def __enter__(self) -> GpuBusy:
        if self.index is None:
            return self
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(self.index)
        except Exception:  # no NVML here: nothing to measure
            return self
        self._nvml = pynvml
        self._thread = threading.Thread(
            target=self._poll, args=(handle,), name="seneca-gpu-busy", daemon=True
        )
        self._thread.start()
        return self

    def _poll(self, handle: Any) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._samples.append(self._nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            except Exception:
                return

    def __exit__(self, *exc: object) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        if self._samples:
            self.busy = sum(self._samples) / len(self._samples) / 100
        with contextlib.suppress(Exception):
            self._nvml.nvmlShutdown()
