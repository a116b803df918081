"""A plan file: what ``mdp plan SPEC --out plan.json`` writes (:meth:`Prediction.to_json
<mdp.planner.Prediction.to_json>`) and a loader's ``plan=`` reads: the split in whole percent
and, when it says, the cache size it was planned for."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from seneca_base.errors import ConfigError
from seneca_base.split import Split
from seneca_base.tiers import SPLIT_ORDER

__all__ = ["PlanChoice", "load_plan"]


@dataclass(frozen=True)
class PlanChoice:
    """What a plan (``mdp plan --out``) gives the loader: the split and the cache size it was
    planned for (None when the plan does not say)."""

    split: Split
    cache_bytes: int | None


def load_plan(plan: str | os.PathLike | Mapping[str, Any]) -> PlanChoice:
    """Read ``plan``: a JSON file written by ``mdp plan --out`` or the same data as a mapping.

    Only ``split`` (whole percentages summing to 100) is required; ``cache_bytes`` is used when
    present. Errors name the option and the file.
    """
    where = "plan"
    if isinstance(plan, str | os.PathLike):
        where = f"plan {os.fspath(plan)}"
        try:
            with open(plan, encoding="utf-8") as f:
                plan = json.load(f)
        except OSError as e:
            raise ConfigError(f"{where}: cannot read: {e.strerror or e}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"{where}: not a JSON plan from 'mdp plan --out': {e}") from None
    if not isinstance(plan, Mapping) or not isinstance(plan.get("split"), Mapping):
        raise ConfigError(
            f"{where}: expected an object with a 'split' of encoded/decoded/augmented percents"
        )
    split = plan["split"]
    if set(split) != set(SPLIT_ORDER):
        raise ConfigError(
            f"{where}: split must have exactly {', '.join(SPLIT_ORDER)}, got {dict(split)}"
        )
    for tier in SPLIT_ORDER:
        v = split[tier]
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 100:
            raise ConfigError(f"{where}: split.{tier} must be a whole percent 0-100, got {v!r}")
    if sum(split.values()) != 100:
        raise ConfigError(f"{where}: split percents must sum to 100, got {dict(split)}")
    cache_bytes = plan.get("cache_bytes")
    if cache_bytes is not None and (
        isinstance(cache_bytes, bool) or not isinstance(cache_bytes, int) or cache_bytes <= 0
    ):
        raise ConfigError(f"{where}: cache_bytes must be a positive integer, got {cache_bytes!r}")
    return PlanChoice(Split.from_percent([split[t] for t in SPLIT_ORDER]), cache_bytes)
