"""Batches on the accelerator: SenecaLoader's ``device=``.

A training loop that copies each batch to its GPU (``x.to("cuda")``) after DataLoader pinned
it gets a float32 batch made on the CPU: the transform's ``ToDtype``/``Normalize`` ran there,
and four times the bytes of the uint8 images were pinned (a new pinned allocation per batch)
and copied over PCIe. With ``device=`` the loader does it the other way round:

1. each tensor of a collated batch is copied into a pinned host buffer the loader reuses
   (:class:`HostBuffers`: a buffer is used again once the GPU has finished copying out of it,
   so after the first batches no pinned memory is allocated);
2. from there to the device on a stream of the loader's own (asynchronous, so the copy overlaps
   the step the GPU is running), and the transform's batch tail (``ToDtype``, ``Normalize``)
   runs on the device, on the same stream, on the uint8 images;
3. the training loop gets the device tensors; its stream waits for the copy and the tail (the
   GPU waits, not the CPU), and the tensors are recorded as used by that stream, so their
   memory is not reused while the loop's kernels may still read it.

Steps 1 and 2 run where the batch is made: with DataLoader workers, in the thread that makes
the next batch while the loop has the current one (``seneca.loader._ahead``), so the copy of
batch k + 1 is under way while the GPU runs step k; without workers, when the loop asks for the
batch (the copy still overlaps the step the GPU has queued). Step 3 runs in the loop's thread.

``device="cpu"`` keeps everything on the CPU: the batch tail runs on the collated batch, as
without ``device=``, and nothing is copied.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from seneca import defaults
from seneca.loader._ahead import closing
from seneca_base.errors import ConfigError

__all__ = ["DeviceFeed", "HostBuffers", "handed_over", "pin_host", "resolve_device", "staged"]


def resolve_device(device: str | torch.device | None) -> torch.device | None:
    """``device`` as a ``torch.device`` (None: none given): ``"cpu"``, ``"cuda"``,
    ``"cuda:N"`` or a ``torch.device`` of those types; a ConfigError names anything else, and
    a CUDA device this process cannot use."""
    if device is None:
        return None
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ConfigError(
            f"device: expected 'cuda', 'cuda:N', 'cpu' or a torch.device, got {device!r}"
        ) from None
    if resolved.type == "cpu":
        return resolved
    if resolved.type != "cuda":
        raise ConfigError(f"device={device!r}: SenecaLoader feeds CUDA devices and the CPU")
    if not torch.cuda.is_available():
        raise ConfigError(f"device={device!r}: CUDA is not available to this process")
    count = torch.cuda.device_count()
    if resolved.index is not None and not 0 <= resolved.index < count:
        raise ConfigError(f"device={device!r}: this process sees {count} CUDA device(s)")
    return resolved


def pin_host(t: torch.Tensor) -> Callable[[], None]:
    """Pin the memory of ``t`` (a CPU tensor over memory of its own, such as a shared file
    mapped here) for copies to CUDA devices, once for its life (registering is slow; only
    long-lived memory pays); returns what unpins it. torch: ``torch.cuda.cudart()``'s
    ``cudaHostRegister``, as pytorch#32167 shows."""
    cudart = torch.cuda.cudart()
    pointer, size = t.data_ptr(), t.numel() * t.element_size()
    portable = 1  # cudaHostRegisterPortable: pinned for every device's context, not one
    failed = int(cudart.cudaHostRegister(pointer, size, portable))
    if failed:
        raise RuntimeError(f"cudaHostRegister of {size} bytes failed: CUDA error {failed}")
    return lambda: cudart.cudaHostUnregister(pointer)


class HostBuffers:
    """Host tensors reused as the source of copies to a device: pinned when ``pin``.

    :meth:`take` returns a buffer of a shape and dtype, :meth:`give_back` returns it with the
    event that completes the copy out of it (None: the copy is done). A buffer is taken again
    once its event has completed; while every buffer of its shape and dtype is in flight a new
    one is made, up to ``keep`` of them, and past that the oldest is waited for. The buffers
    of the ``shapes`` most recently used shapes are kept (an epoch's last, smaller batch is a
    shape of its own).
    """

    def __init__(self, pin: bool, keep: int = defaults.STAGING_BUFFERS, shapes: int = 4) -> None:
        self.pin = pin
        self.keep = keep
        self.shapes = shapes
        self._idle: OrderedDict[tuple, list[tuple[torch.Tensor, Any]]] = OrderedDict()
        #: buffers made, and buffers taken again (since :meth:`reset_counts`)
        self.made = self.reused = 0

    def reset_counts(self) -> None:
        """Count buffers made and reused from zero again."""
        self.made = self.reused = 0

    def take(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A contiguous buffer of ``shape`` and ``dtype`` that no copy reads any more."""
        key = (tuple(shape), dtype)
        idle = self._idle.get(key)
        if idle:
            self._idle.move_to_end(key)
            buffer, done = idle[0]
            if done is None or len(idle) >= self.keep or done.query():
                idle.pop(0)
                if done is not None:
                    done.synchronize()  # at once unless every buffer is still being copied
                self.reused += 1
                return buffer
        self.made += 1
        return torch.empty(shape, dtype=dtype, pin_memory=self.pin)

    def give_back(self, buffer: torch.Tensor, done: Any) -> None:
        """``buffer`` may be taken again once ``done`` (an event; None: now) has completed."""
        key = (tuple(buffer.shape), buffer.dtype)
        idle = self._idle.setdefault(key, [])
        self._idle.move_to_end(key)
        idle.append((buffer, done))
        del idle[: -self.keep]
        while len(self._idle) > self.shapes:
            self._idle.popitem(last=False)


@dataclass
class Staged:
    """A batch whose copies and tail were started on the feed's stream; ``done`` is the event
    that completes them (None: nothing to wait for)."""

    batch: Any
    done: Any = None


class DeviceFeed:
    """Moves batches to ``device`` (a CUDA device with its index, or the CPU) and runs
    ``tail`` (a batch tail, or None) on their images there. One feed per loader: its stream and
    buffers are kept between epochs."""

    def __init__(self, device: torch.device, tail: Callable[[Any], Any] | None) -> None:
        self.device = device
        self.tail = tail
        self.cuda = device.type == "cuda"
        self.buffers = HostBuffers(pin=self.cuda)
        self._stream: Any = None
        #: batches staged
        self.batches = 0

    def reset_stats(self) -> None:
        """Count :meth:`stats` from zero again."""
        self.batches = 0
        self.buffers.reset_counts()

    def stats(self) -> dict[str, Any]:
        """``device``, ``batches`` staged, and host ``buffers_made`` (pinned, with CUDA) and
        ``buffers_reused`` for them."""
        return {
            "device": str(self.device),
            "batches": self.batches,
            "buffers_made": self.buffers.made,
            "buffers_reused": self.buffers.reused,
        }

    def stage(self, batch: Any) -> Staged:
        """Start ``batch`` on its way: its tensors copied to the device and the tail run on its
        images there, on the feed's stream (the thread making batches calls this)."""
        self.batches += 1
        if not self.cuda:
            return Staged(self._tail(batch))
        if self._stream is None:
            self._stream = torch.cuda.Stream(self.device)
        with torch.cuda.stream(self._stream):
            lent: list[torch.Tensor] = []
            moved = _mapped(batch, lambda t: self._to_device(t, lent))
            moved = self._tail(moved)
            done = torch.cuda.Event()
            done.record(self._stream)
        for buffer in lent:
            self.buffers.give_back(buffer, done)
        return Staged(moved, done)

    def hand_over(self, staged: Staged) -> Any:
        """The staged batch for the loop (its thread calls this): the loop's current stream
        waits for the copies and the tail, and the tensors are marked used by that stream."""
        if staged.done is None:
            return staged.batch
        stream = torch.cuda.current_stream(self.device)
        stream.wait_event(staged.done)
        _mapped(staged.batch, lambda t: _used_by(t, stream))
        return staged.batch

    def _tail(self, batch: Any) -> Any:
        """``batch`` with the tail run on its images (a default-collated ``[images, ...]``)."""
        images = batch[0] if isinstance(batch, list) and batch else None
        if self.tail is not None and isinstance(images, torch.Tensor):
            batch[0] = self.tail(images)
        return batch

    def _to_device(self, t: torch.Tensor, lent: list[torch.Tensor]) -> torch.Tensor:
        """``t`` on the device: a CPU tensor through a reused pinned buffer (added to
        ``lent``), asynchronously on the current (the feed's) stream."""
        if t.device == self.device:
            return t
        if t.device.type != "cpu":
            return t.to(self.device, non_blocking=True)
        if t.is_pinned():
            host = t
        else:
            host = self.buffers.take(tuple(t.shape), t.dtype)
            host.copy_(t)
            lent.append(host)
        out = torch.empty(host.shape, dtype=host.dtype, device=self.device)
        out.copy_(host, non_blocking=True)
        return out


def _used_by(t: torch.Tensor, stream: Any) -> torch.Tensor:
    if t.is_cuda:
        t.record_stream(stream)
    return t


def _mapped(batch: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``batch`` with ``fn`` applied to every tensor in it (lists, tuples, named tuples and
    mappings are walked; a list stays the same list object, as DataLoader's pinning keeps its
    structure)."""
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, list):
        batch[:] = [_mapped(x, fn) for x in batch]
        return batch
    if isinstance(batch, tuple):
        items = [_mapped(x, fn) for x in batch]
        return type(batch)(*items) if hasattr(batch, "_fields") else type(batch)(items)
    if isinstance(batch, dict):
        items = [(k, _mapped(v, fn)) for k, v in batch.items()]
        try:
            return type(batch)(items)
        except TypeError:  # a mapping type that is not made from its items (defaultdict)
            return dict(items)
    return batch


def staged(it: Iterator[Any], feed: DeviceFeed) -> Iterator[Staged]:
    """The batches of ``it``, each started on its way by ``feed``."""
    for batch in it:
        yield feed.stage(batch)


def handed_over(it: Iterator[Staged], feed: DeviceFeed) -> Iterator[Any]:
    """The staged batches of ``it``, handed over to the loop's stream by ``feed``."""
    with closing(it):  # a loop cut short stops the thread making the next batch at once
        for item in it:
            yield feed.hand_over(item)
