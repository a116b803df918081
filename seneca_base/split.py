"""A cache split: how a cache is divided between the tiers (``seneca_base.tiers``).

One value, three forms: fractions per tier (what the loader's ``split=`` takes), whole
percentages ``E-D-A`` (:data:`~seneca_base.tiers.NOTATION`: what ``mdp plan`` prints and the
shared plan stores), and bytes per tier for a cache of a given size (a store's budgets,
``ods.store.OdsStore.apply_split``). Every form follows the tiers' declaration: one number per
tier, in :data:`~seneca_base.tiers.SPLIT_ORDER`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from seneca_base.errors import ConfigError
from seneca_base.tiers import NOTATION, SPLIT_ORDER, TIERS

__all__ = ["Split"]

_PERCENT = re.compile(r"\s*" + r"\s*-\s*".join([r"(\d+)"] * len(SPLIT_ORDER)) + r"\s*")


class Split:
    """Fractions of a cache per tier, each 0-1, summing to 1: ``Split(e, d, a)`` in
    :data:`~seneca_base.tiers.SPLIT_ORDER`, or :meth:`of`, :meth:`parse`,
    :meth:`from_percent`. Each tier's fraction is also an attribute (``split.decoded``)."""

    __slots__ = ("values",)

    def __init__(self, *fractions: float) -> None:
        if len(fractions) != len(SPLIT_ORDER):
            raise ConfigError(
                f"split: expected {len(SPLIT_ORDER)} fractions ({', '.join(SPLIT_ORDER)}), "
                f"got {fractions!r}"
            )
        #: the fractions, in SPLIT_ORDER
        self.values: tuple[float, ...]
        object.__setattr__(self, "values", tuple(float(f) for f in fractions))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a Split is immutable: cannot set {name!r}")

    def __getattr__(self, name: str) -> float:
        if name in SPLIT_ORDER:
            return self.values[SPLIT_ORDER.index(name)]
        raise AttributeError(name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Split) and other.values == self.values

    def __hash__(self) -> int:
        return hash(self.values)

    def __repr__(self) -> str:
        return "Split(" + ", ".join(f"{t}={v:g}" for t, v in self.fractions.items()) + ")"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Split, self.values)

    @classmethod
    def of(cls, value: Mapping[str, Any] | Sequence[Any], what: str = "split") -> Split:
        """``value`` as a split: a mapping of tier names to fractions (a missing tier is 0), or
        a sequence of one fraction per tier in SPLIT_ORDER. Errors name ``what``."""
        if isinstance(value, Mapping):
            unknown = set(value) - set(TIERS)
            if unknown:
                raise ConfigError(
                    f"{what}: unknown tier {sorted(unknown)[0]!r}; tiers are "
                    f"{', '.join(SPLIT_ORDER)}"
                )
            values = {t: value.get(t, 0.0) for t in SPLIT_ORDER}
        elif (
            isinstance(value, Sequence)
            and not isinstance(value, str)
            and len(value) == len(SPLIT_ORDER)
        ):
            values = dict(zip(SPLIT_ORDER, value, strict=True))
        else:
            named = ", ".join(f"{t!r}: {_LETTERS[t]}" for t in SPLIT_ORDER)
            raise ConfigError(
                f"{what}: expected {{{named}}} or ({', '.join(_LETTERS.values())}), got {value!r}"
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
        """Whole percentages (one per tier, SPLIT_ORDER) summing to 100 (not checked: see
        :meth:`parse`)."""
        return cls(*(v / 100 for v in percent))

    @classmethod
    def parse(cls, text: str, what: str = "--split") -> Split:
        """``"E-D-A"``: whole percentages summing to 100. Errors name ``what``."""
        m = _PERCENT.fullmatch(str(text))
        if not m:
            raise ConfigError(
                f"{what}: expected {NOTATION} in whole percent such as {_EXAMPLE}, got {text!r}"
            )
        percent = tuple(int(v) for v in m.groups())
        if sum(percent) != 100:
            raise ConfigError(f"{what}: percentages must sum to 100, got {text!r} ({sum(percent)})")
        return cls.from_percent(percent)

    @property
    def fractions(self) -> dict[str, float]:
        """Fractions per tier, in SPLIT_ORDER."""
        return dict(zip(SPLIT_ORDER, self.values, strict=True))

    @property
    def percent(self) -> tuple[int, ...]:
        """Whole percentages (SPLIT_ORDER) summing to 100 (the rounding goes to the first)."""
        pct = [round(100 * v) for v in self.values]
        pct[0] += 100 - sum(pct)
        return tuple(pct)

    def text(self) -> str:
        """``E-D-A`` in whole percent, as the paper and ``mdp plan`` write splits."""
        return "-".join(str(v) for v in self.percent)

    def budgets(self, size: int) -> dict[str, int]:
        """Bytes (or other units) per tier of a cache of ``size``, in lookup order."""
        return {t: int(getattr(self, t) * size) for t in TIERS}


#: the tiers' letters, upper case, in SPLIT_ORDER (what error messages name)
_LETTERS = dict(zip(SPLIT_ORDER, NOTATION.split("-"), strict=True))
#: a split written out, for error messages (40-59-1 with three tiers)
_EXAMPLE = "-".join(str(v) for v in (40, 59, 1, *([0] * len(SPLIT_ORDER)))[: len(SPLIT_ORDER)])
