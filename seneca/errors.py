"""Seneca's exceptions (defined in ``seneca_base.errors``, shared with ``mdp`` and ``ods``).

Everything Seneca raises on purpose derives from :class:`SenecaError`.
"""

from seneca_base.errors import (
    CacheError,
    CacheUnavailableError,
    CodecError,
    ConfigError,
    DatasetError,
    SenecaError,
    SpecError,
)

__all__ = [
    "CacheError",
    "CacheUnavailableError",
    "CodecError",
    "ConfigError",
    "DatasetError",
    "SenecaError",
    "SpecError",
]
