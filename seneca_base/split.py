"""A cache split: how a cache is divided between the encoded, decoded and augmented tiers.

One value, three forms: fractions per tier (what the loader's ``split=`` takes), whole
percentages ``E-D-A`` (what ``mdp plan`` prints and the shared plan stores), and bytes per tier
for a cache of a given size (a store's budgets, ``ods.store.OdsStore.apply_split``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from seneca_base.errors import ConfigError
from seneca_base.tiers import SPLIT_ORDER, TIERS

__all__ = ["Split"]


@dataclass(frozen=True)
class Split:
    """Fractions of a cache per tier, each 0-1, summing to 1."""

    encoded: float
    decoded: float
    augmented: float

    @classmethod
    def of(cls, value: Mapping[str, Any] | Sequence[Any], what: str = "split") -> Split:
        """``value`` as a split: a mapping of tier names to fractions (a missing tier is 0), or
        a 3-sequence in E, D, A order. Errors name ``what``."""
        if isinstance(value, Mapping):
            unknown = set(value) - set(TIERS)
            if unknown:
                raise ConfigError(
                    f"{what}: unknown tier {sorted(unknown)[0]!r}; tiers are "
                    f"{', '.join(SPLIT_ORDER)}"
                )
            values = {t: value.get(t, 0.0) for t in SPLIT_ORDER}
        elif isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 3:
            values = dict(zip(SPLIT_ORDER, value, strict=True))
        else:
            raise ConfigError(
                f"{what}: expected {{'encoded': e, 'decoded': d, 'augmented': a}} or (e, d, a), "
                f"got {value!r}"
            )
        for tier, v in values.items():
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise ConfigError(f"{what}: {tier} must be a number, got {v!r}")
            if v < 0 or v > 1:
                raise ConfigError(f"{what}: {tier} must be between 0 and 1, got {v!r}")
        total = sum(values.values())
        if not math.isclose(total, 1.0, abs_tol=1e-6):
            raise ConfigError(f"{what}: fractions must sum to 1, got {total:g} ({values})")
        return cls(*(float(values[t]) for t in SPLIT_ORDER))

    @classmethod
    def from_percent(cls, percent: Sequence[int]) -> Split:
        """Whole percentages (E, D, A) summing to 100 (not checked: see :meth:`parse`)."""
        e, d, a = percent
        return cls(e / 100, d / 100, a / 100)

    @classmethod
    def parse(cls, text: str, what: str = "--split") -> Split:
        """``"E-D-A"``: whole percentages summing to 100. Errors name ``what``."""
        m = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*-\s*(\d+)\s*", str(text))
        if not m:
            raise ConfigError(
                f"{what}: expected E-D-A in whole percent such as 40-59-1, got {text!r}"
            )
        percent = (int(m[1]), int(m[2]), int(m[3]))
        if sum(percent) != 100:
            raise ConfigError(f"{what}: percentages must sum to 100, got {text!r} ({sum(percent)})")
        return cls.from_percent(percent)

    @property
    def fractions(self) -> dict[str, float]:
        """Fractions per tier, in E, D, A order."""
        return {t: getattr(self, t) for t in SPLIT_ORDER}

    @property
    def percent(self) -> tuple[int, int, int]:
        """Whole percentages (E, D, A) summing to 100 (the rounding goes to encoded)."""
        pct = [round(100 * getattr(self, t)) for t in SPLIT_ORDER]
        pct[0] += 100 - sum(pct)
        return (pct[0], pct[1], pct[2])

    def text(self) -> str:
        """``E-D-A`` in whole percent, as the paper and ``mdp plan`` write splits."""
        return "-".join(str(v) for v in self.percent)

    def budgets(self, size: int) -> dict[str, int]:
        """Bytes (or other units) per tier of a cache of ``size``, in lookup order."""
        return {t: int(getattr(self, t) * size) for t in TIERS}
