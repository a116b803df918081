"""Seneca's exception hierarchy: everything mdp, ods and seneca raise on purpose derives from
SenecaError."""

from __future__ import annotations

__all__ = [
    "CacheError",
    "CacheUnavailableError",
    "CodecError",
    "ConfigError",
    "DatasetError",
    "ForeignDataError",
    "FunctionsMissingError",
    "JobInUseError",
    "SenecaError",
    "ServerFunctionError",
    "SpecError",
    "StaleJobsError",
    "UnknownJobError",
    "WorkerError",
]


class SenecaError(Exception):
    """Base class of every error Seneca raises on purpose."""


class ConfigError(SenecaError, ValueError):
    """A bad option value; the message names the option."""


class JobInUseError(ConfigError):
    """A loader's ``job`` name is the name of a run of the same dataset still going in another
    process: a name is one run's at a time."""


class SpecError(ConfigError):
    """A bad cluster spec for ``mdp`` (TOML); the message names the file and the key."""


class DatasetError(SenecaError, OSError):
    """A dataset that cannot be read as a folder dataset (missing directory, no class folders,
    an empty class folder, a file that is not an image); an ``OSError``, as torchvision's
    folder datasets raise for these. The message names the path.

    A sample that cannot be read or decoded while training raises what DataLoader would raise
    for it (``FileNotFoundError``, PIL's ``UnidentifiedImageError``), with a note naming the
    sample (PEP 678). A ``ConcatDataset`` whose parts were set within an epoch to make their
    samples otherwise than each other raises this too: its samples cannot be served as one
    dataset's.
    """


class CodecError(SenecaError, ValueError):
    """A cached value that is truncated, foreign, of another format version, or mismatched."""


class CacheError(SenecaError):
    """A cache problem (bad URL, server that cannot be started, unexpected reply)."""


class CacheUnavailableError(CacheError, ConnectionError):
    """The cache cannot be reached; the message names the URL with any password redacted."""


class ServerFunctionError(CacheError):
    """An error reply of the cache engine's Redis functions (``ods.functions``)."""


class UnknownJobError(ServerFunctionError):
    """The job is not registered with the dataset (never joined, left, or its state was lost)."""


class StaleJobsError(ServerFunctionError):
    """The call named other live jobs than the dataset has now (the caller refreshes them and
    calls again)."""


class FunctionsMissingError(ServerFunctionError):
    """The server does not have this version of the engine's functions loaded (it restarted,
    or they were flushed): the caller loads them and calls again."""


class ForeignDataError(ServerFunctionError):
    """A metadata key holds another type of value than the engine keeps there (foreign or
    corrupt data under Seneca's prefix): the engine deleted nothing; the caller deletes the key
    (:attr:`key`) and calls again."""

    @property
    def key(self) -> str:
        """The key, as the error reply names it."""
        return str(self).split(" ", 1)[1] if " " in str(self) else ""


class WorkerError(SenecaError, RuntimeError):
    """A DataLoader worker lost while it handed over a batch (killed, or out of memory)."""


# Users meet these as ``seneca.ConfigError`` (tracebacks and reprs show the name they import);
# the engine's own errors as ``seneca.errors.*``. Both names resolve, so they pickle.
_PUBLIC = (
    SenecaError, ConfigError, SpecError, DatasetError, CodecError, CacheError,
    CacheUnavailableError, WorkerError,
)  # fmt: skip
for _error in _PUBLIC:
    _error.__module__ = "seneca"
_ENGINE = (
    ServerFunctionError, UnknownJobError, StaleJobsError, FunctionsMissingError, ForeignDataError,
)  # fmt: skip
for _error in _ENGINE:
    _error.__module__ = "seneca.errors"
