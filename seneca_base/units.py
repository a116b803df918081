"""Parsing of byte sizes given by users ("2GB", "512MiB", 1_000_000)."""

from __future__ import annotations

import re

from seneca_base.errors import ConfigError

_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(value: int | float | str, option: str) -> int:
    """Return ``value`` as a positive number of bytes (SI units: 1 GB = 1e9 bytes).

    Raises ConfigError naming ``option`` when the value is not a positive size.
    """
    if isinstance(value, bool):
        raise ConfigError(f"{option}: expected a size such as '2GB', got {value!r}")
    if isinstance(value, int | float):
        number, unit = float(value), ""
    elif isinstance(value, str) and (m := _SIZE.match(value)):
        number, unit = float(m.group(1)), m.group(2).lower()
    else:
        raise ConfigError(f"{option}: expected a size such as '2GB' or '512MiB', got {value!r}")
    if unit not in _UNITS:
        raise ConfigError(f"{option}: unknown size unit {unit!r} in {value!r}")
    size = int(number * _UNITS[unit])
    if size <= 0:
        raise ConfigError(f"{option}: must be a positive size, got {value!r}")
    return size


def format_size(n: float) -> str:
    """Human-readable SI size, e.g. 1.5 GB."""
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def format_seconds(s: float) -> str:
    """Human-readable duration: ``45 s``, ``10 min``, ``1.5 h``."""
    if s < 60:
        return f"{s:g} s"
    if s < 3600:
        return f"{s / 60:g} min"
    return f"{s / 3600:g} h"
