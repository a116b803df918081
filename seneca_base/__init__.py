"""The vocabulary that ``mdp``, ``ods`` and ``seneca`` share: the exception tree, the cache
tiers and byte sizes.

It sits below the three packages and imports none of them, so ``mdp`` (pure numpy) and ``ods``
(redis-py only) use the same errors and tier names as the loader without importing ``seneca``.
Users import these names from ``seneca`` (``seneca.SenecaError``, ``seneca.errors``).
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
from seneca_base.tiers import LETTER, SPLIT_ORDER, TIERS, tier_of_letter

__all__ = [
    "LETTER",
    "SPLIT_ORDER",
    "TIERS",
    "CacheError",
    "CacheUnavailableError",
    "CodecError",
    "ConfigError",
    "DatasetError",
    "SenecaError",
    "SpecError",
    "tier_of_letter",
]
