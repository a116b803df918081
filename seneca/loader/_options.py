"""Validation of SenecaLoader's own options; errors name the option."""

from __future__ import annotations

import itertools
import os
import socket
from collections.abc import Mapping, Sequence
from typing import Any

from seneca import defaults
from seneca_base.errors import ConfigError
from seneca_base.split import Split

_counter = itertools.count()


def parse_split(split: Mapping[str, float] | Sequence[float] | None) -> Split:
    """``split`` (a mapping of tiers to fractions, missing tiers 0, or an (e, d, a) sequence)
    as a :class:`Split`; None: ``defaults.SPLIT``."""
    return Split.of(defaults.SPLIT if split is None else split)


def resolve_job(job: str | None) -> str:
    """The job name: given, or unique per loader (host, pid, counter). Under an initialised
    torch.distributed group every rank gets rank 0's name (ranks of one job share it)."""
    if job is None:
        return _shared_name(f"{socket.gethostname()}:{os.getpid()}:{next(_counter)}")
    if not isinstance(job, str) or not job or len(job) > 200:
        raise ConfigError(f"job: expected a non-empty name of at most 200 characters, got {job!r}")
    return job


def resolve_dataset_version(version: str | None) -> str | None:
    """``dataset_version`` as given (None: the files' modification times name the dataset)."""
    if version is not None and (not isinstance(version, str) or not version):
        raise ConfigError(f"dataset_version: expected a non-empty string, got {version!r}")
    return version


def resolve_strict(strict: bool | None) -> bool:
    """Whether any cache failure is an error: ``strict``, or when None the environment
    variable ``defaults.STRICT_ENV``."""
    if strict is None:
        return os.environ.get(defaults.STRICT_ENV, "").strip().lower() in ("1", "true", "yes")
    if not isinstance(strict, bool):
        raise ConfigError(f"strict: expected True, False or None, got {strict!r}")
    return strict


def resolve_progress(progress: bool | float) -> float | None:
    """Seconds between progress lines (None: none) from the ``progress`` option."""
    if progress is False or progress is None:
        return None
    if progress is True:
        return defaults.PROGRESS_EVERY
    if isinstance(progress, int | float) and not isinstance(progress, bool) and progress > 0:
        return float(progress)
    raise ConfigError(f"progress: expected True, False or seconds > 0, got {progress!r}")


def resolve_ods(
    ods: bool | None, shuffle: Any, sampler: Any, batch_sampler: Any, batch_size: Any
) -> bool:
    """Whether batches come from ODS: by default when the loader shuffles with its own sampler
    and batches (``shuffle=True``, no ``sampler``/``batch_sampler``, a ``batch_size``)."""
    plain = bool(shuffle) and sampler is None and batch_sampler is None and batch_size is not None
    return _switch(
        "ods",
        ods,
        plain,
        "shuffle=True, a batch_size and no sampler or batch_sampler "
        "(ODS decides the order and the batches)",
    )


def _switch(name: str, value: bool | None, possible: bool, needs: str) -> bool:
    """A True/False/None option: None means ``possible``; True where it is not possible is a
    ConfigError saying what the option ``needs``."""
    if value is None:
        return possible
    if not isinstance(value, bool):
        raise ConfigError(f"{name}: expected True, False or None, got {value!r}")
    if value and not possible:
        raise ConfigError(f"{name}=True needs {needs}")
    return value


def resolve_batch_tail(
    batch_tail: bool | None, collate_fn: Any, batch_size: Any, batch_sampler: Any
) -> bool:
    """Whether samples end after ``transform.sample_tail`` and the batch tail runs on collated
    batches: by default when the loader batches with the default ``collate_fn``, which stacks
    (copies) the samples, so cached bytes can be handed to it as tensor views."""
    batching = collate_fn is None and (batch_size is not None or batch_sampler is not None)
    return _switch(
        "batch_tail",
        batch_tail,
        batching,
        "the default collate_fn and a batch_size or batch_sampler (the tail runs on the "
        "stacked images)",
    )


def collective_device(backend: str, cuda_index: int | None) -> str:
    """The device of the tensors a collective of a process group with ``backend`` takes:
    NCCL's are on this process's CUDA device (``cuda_index``), gloo's and MPI's on the CPU."""
    if str(backend).lower() == "nccl":
        return "cuda" if cuda_index is None else f"cuda:{cuda_index}"
    return "cpu"


def group_device() -> str:
    """:func:`collective_device` of the initialised default process group."""
    import torch
    import torch.distributed as dist

    index = torch.cuda.current_device() if torch.cuda.is_available() else None
    return collective_device(dist.get_backend(), index)


def _shared_name(local: str) -> str:
    """``local`` on rank 0; on the other ranks, rank 0's name (broadcast as a tensor, no
    pickle). Without torch.distributed, ``local``."""
    import sys

    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return local
    if dist.get_world_size() == 1:
        return local
    import torch

    raw = torch.zeros(256, dtype=torch.uint8)
    data = local.encode()[:256]
    raw[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    raw = raw.to(group_device())
    dist.broadcast(raw, src=0)
    return "ddp:" + bytes(raw.cpu().tolist()).rstrip(b"\0").decode(errors="replace")
