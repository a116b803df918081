"""Seneca's exception hierarchy: everything mdp, ods and seneca raise on purpose derives from
SenecaError."""

from __future__ import annotations

__all__ = [
    "CacheError",
    "CacheUnavailableError",
    "CodecError",
    "ConfigError",
    "DatasetError",
    "SenecaError",
    "SpecError",
]


class SenecaError(Exception):
    """Base class of every error Seneca raises on purpose."""


class ConfigError(SenecaError, ValueError):
    """A bad option value; the message names the option."""


class SpecError(ConfigError):
    """A bad cluster spec for ``mdp`` (TOML); the message names the file and the key."""


class DatasetError(SenecaError):
    """A dataset problem (missing directory, empty class folder, unreadable or non-image file).

    The message names the path.
    """


class CodecError(SenecaError, ValueError):
    """A cached value that is truncated, foreign, of another format version, or mismatched."""


class CacheError(SenecaError):
    """A cache problem (bad URL, server that cannot be started, unexpected reply)."""


class CacheUnavailableError(CacheError, ConnectionError):
    """The cache cannot be reached; the message names the URL with any password redacted."""
