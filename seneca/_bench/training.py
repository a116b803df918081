"""What a ``seneca bench`` job does with each batch: nothing, an emulated step, or a real one.

* ``--step-ms MS``: a sleep of MS per batch stands in for an accelerator's step; with
  ``--step-gil-ms G``, its first G ms spin in Python, holding the GIL as a training loop does
  while it launches kernels, and the rest sleeps.
* ``--model NAME``: a torchvision model (``resnet18``, ``resnet50``, ``mobilenet_v3_large``,
  ...; any name ``torchvision.models.get_model`` knows) trains on ``--device``: SGD with
  momentum, channels-last images, bf16 autocast on CUDA, as a typical image-classification
  script. The model is warmed up (cuDNN's choice of algorithms, the allocator) on a synthetic
  batch before the job says it is ready, so the timed epochs measure the steady state; each
  epoch ends with the device's queue drained, so its time includes the steps it queued.

"""

from __future__ import annotations

import time
from typing import Any

import torch

__all__ = ["Trainer", "on_device"]


def on_device(batch: Any, device: torch.device) -> Any:
    """``batch`` ([images, labels]) on ``device`` (a no-op for tensors already there)."""
    return [t.to(device, non_blocking=True) if isinstance(t, torch.Tensor) else t for t in batch]


class Trainer:
    """One job's step: ``model`` (a torchvision name) trained on ``device``, or a ``step_ms``
    step (its first ``gil_ms`` spinning in Python, the rest asleep), or nothing."""

    def __init__(
        self,
        model: str | None,
        device: str | None,
        step_ms: float,
        classes: int,
        crop: int,
        gil_ms: float = 0.0,
    ) -> None:
        self.device = torch.device(device or "cpu")
        self.step_ms = step_ms
        self.gil_ms = gil_ms
        #: CPU seconds the steps took in the loop's thread (the model's, or the spin's)
        self.step_cpu_s = 0.0
        self.model: Any = None
        if model:
            self._build(model, classes, crop)

    def _build(self, name: str, classes: int, crop: int) -> None:
        import torchvision

        from seneca_base.errors import ConfigError

        try:
            model = torchvision.models.get_model(name, weights=None, num_classes=classes)
        except ValueError as e:
            raise ConfigError(f"--model: {e}") from None
        self.cuda = self.device.type == "cuda"
        if self.cuda:
            torch.backends.cudnn.benchmark = True
        self.model = model.to(self.device, memory_format=torch.channels_last).train()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.classes = classes
        self.crop = crop

    def warm_up(self, batch_size: int, steps: int = 3) -> None:
        """A few steps on a synthetic batch (before the timed epochs)."""
        if self.model is None:
            return
        x = torch.randn(batch_size, 3, self.crop, self.crop, device=self.device)
        y = torch.randint(0, self.classes, (batch_size,), device=self.device)
        for _ in range(steps):
            self.step(x, y)
        self.drain()
        self.step_cpu_s = 0.0  # the timed steps' only

    def step(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        """One training step on a batch (moved to the device first when it is elsewhere)."""
        cpu = time.thread_time()
        try:
            self._step(images, labels)
        finally:
            self.step_cpu_s += time.thread_time() - cpu

    def _step(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        if self.model is None:
            if self.step_ms:
                _emulated_step(self.step_ms / 1000, self.gil_ms / 1000)
            return
        images, labels = on_device([images, labels], self.device)
        images = images.contiguous(memory_format=torch.channels_last)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.cuda):
            loss = torch.nn.functional.cross_entropy(self.model(images), labels)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()

    def drain(self) -> None:
        """Wait until the device has run every step queued."""
        if self.model is not None and self.cuda:
            torch.cuda.synchronize(self.device)


def _emulated_step(seconds: float, holding: float) -> None:
    """``holding`` seconds spinning in Python (the GIL held, but for the interpreter's switch
    interval), then asleep for the rest of ``seconds``."""
    start = time.perf_counter()
    while time.perf_counter() - start < holding:
        pass
    left = seconds - (time.perf_counter() - start)
    if left > 0:
        time.sleep(left)
