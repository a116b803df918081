"""Seneca: a PyTorch data loader that caches the input pipeline in Redis and shares it across
concurrent training jobs.

Change one line::

    loader = SenecaLoader(ImageFolder(root, transform=t), batch_size=256, shuffle=True,
                          num_workers=8, cache="redis://cache-node:6379")

The public API is what README documents: the names below (imported on first use, so
``seneca.errors`` and ``seneca.defaults`` load without torch or redis), ``seneca.defaults``,
``seneca.pipeline`` (storage, transforms, the value codec) and the ``seneca``, ``mdp`` and
``ods`` commands (also ``python -m seneca``). Internal parts start with an underscore:
``_cache`` (Redis plumbing), ``_autoplan`` (``split="auto"``), ``_bench`` (the measurements
behind ``seneca bench`` and its kin), ``_cli`` (the commands) and the modules of ``loader``
behind SenecaLoader.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from seneca.errors import (
        CacheError,
        CacheUnavailableError,
        CodecError,
        ConfigError,
        DatasetError,
        SenecaError,
        SpecError,
        WorkerError,
    )
    from seneca.loader import SenecaLoader
    from seneca.loader.source import CacheableDataset
    from seneca.pipeline.codec import decode, encode
    from seneca.pipeline.storage import Storage
    from seneca.pipeline.transforms import CacheBoundary, ColumnTransform

_HOMES = {
    "CacheableDataset": "seneca.loader.source",
    "CacheBoundary": "seneca.pipeline.transforms",
    "ColumnTransform": "seneca.pipeline.transforms",
    "CacheError": "seneca.errors",
    "CacheUnavailableError": "seneca.errors",
    "CodecError": "seneca.errors",
    "ConfigError": "seneca.errors",
    "DatasetError": "seneca.errors",
    "SenecaError": "seneca.errors",
    "SenecaLoader": "seneca.loader",
    "SpecError": "seneca.errors",
    "Storage": "seneca.pipeline.storage",
    "WorkerError": "seneca.errors",
    "decode": "seneca.pipeline.codec",
    "encode": "seneca.pipeline.codec",
}

__all__ = [
    "CacheBoundary",
    "CacheError",
    "CacheUnavailableError",
    "CacheableDataset",
    "CodecError",
    "ColumnTransform",
    "ConfigError",
    "DatasetError",
    "SenecaError",
    "SenecaLoader",
    "SpecError",
    "Storage",
    "WorkerError",
    "decode",
    "encode",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'seneca' has no attribute {name!r}")
    from seneca.lazy import attribute

    value = attribute(home, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
