"""Seneca: a PyTorch data loader that caches the input pipeline in Redis and shares it across
concurrent training jobs.

Change one line::

    loader = SenecaLoader(ImageFolder(root, transform=t), batch_size=256, shuffle=True,
                          num_workers=8, cache="redis://cache-node:6379")
"""

from seneca.codec import decode, encode
from seneca.errors import (
    CacheError,
    CacheUnavailableError,
    CodecError,
    ConfigError,
    DatasetError,
    SenecaError,
)
from seneca.loader import SenecaLoader
from seneca.storage import Storage
from seneca.transforms import CacheBoundary

__all__ = [
    "CacheBoundary",
    "CacheError",
    "CacheUnavailableError",
    "CodecError",
    "ConfigError",
    "DatasetError",
    "SenecaError",
    "SenecaLoader",
    "Storage",
    "decode",
    "encode",
]
__version__ = "0.1.0"
