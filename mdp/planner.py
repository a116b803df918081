"""The planner: evaluate the DSI model on every cache split and pick the best one.

Splits are whole percentages of the cache, one per tier in ``SPLIT_ORDER`` (``(E, D, A)`` for
the encoded, decoded and augmented tiers), summing to 100, each 0-100: 5,151 splits on the 1%
grid for three tiers, all evaluated at once.

Ties (splits whose predicted throughput is within a relative 1e-9 of the best, or within
``tolerance`` when one is given) are broken deterministically, in this order:

1. the split that caches the most samples (more of the dataset off storage);
2. the split that gives the least of the cache to an encoded tier that would stay empty (the
   decoded tier holds every sample, so no encoded value would ever be read);
3. the least augmented, then the least decoded percentage, i.e. the most encoded: the compact,
   epoch-independent form is preferred when the model sees no gain from preprocessing.

Only tiers the planned jobs can read get a share: under the ``shared`` model a lone job never
reads an augmented copy (a job never gets its own copy back), so for one job the augmented
tier gets 0%; ``tiers=`` names the readable tiers outright (a loader whose transform has no
random head, or whose dataset has no encoded form, reads fewer).

With ``min_gain``, caching must pay for filling the cache, which the model does not charge
(values encoded and written on misses): unless the best split beats the split that caches the
fewest samples by more than ``min_gain`` (relative), the plan is that split.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mdp import defaults
from mdp.model import (
    SHARED_RESOURCES,
    TIER_MODELS,
    TIERS,
    Params,
    counts,
    loader_counts,
    overall_paper,
    overall_shared,
    tier_dsi,
)
from mdp.spec import Spec
from seneca_base.errors import ConfigError
from seneca_base.split import Split
from seneca_base.tiers import SPLIT_ORDER
from seneca_base.tiers import TIERS as CACHE_TIERS

__all__ = [
    "DEFAULT_MODEL",
    "MODELS",
    "SPLIT_TIERS",
    "Prediction",
    "TierResult",
    "evaluate",
    "parse_split",
    "plan",
    "predict",
    "readable_tiers",
    "split_grid",
    "sweep",
]

#: ``paper`` is Eq. 9; ``shared`` is the shared-resource model (see :mod:`mdp.model`).
MODELS = ("paper", "shared")
#: The default model (``mdp.defaults.MODEL``).
DEFAULT_MODEL = defaults.MODEL
#: Order of the numbers in a split ``E-D-A``.
SPLIT_TIERS = SPLIT_ORDER
TIE_TOLERANCE = defaults.TIE_TOLERANCE


@dataclass(frozen=True)
class TierResult:
    """One tier of a prediction: its DSI (samples/s), the component that bounds that DSI, and
    the samples and bytes it holds."""

    dsi: float
    samples: int
    bytes: int
    bound: str


@dataclass(frozen=True)
class Prediction:
    """The model's output for one split.

    ``bound`` is the overall bottleneck under the ``shared`` model (None under ``paper``, whose
    throughput mixes four separately bounded paths).
    """

    model: str
    split: Split
    throughput: float
    tiers: dict[str, TierResult]
    bound: str | None
    cache_bytes: int

    def split_text(self) -> str:
        """``E-D-A``, as the paper writes splits."""
        return self.split.text()

    def as_split(self) -> Split:
        """The split planned, as fractions per tier."""
        return self.split

    def to_json(self) -> dict[str, Any]:
        """The plan as JSON data (what ``mdp plan --json`` prints and the loader reads)."""
        return {
            "split": dict(zip(SPLIT_TIERS, self.split.percent, strict=True)),
            "throughput": self.throughput,
            "tiers": {
                t: {"dsi": r.dsi, "samples": r.samples, "bytes": r.bytes, "bound": r.bound}
                for t, r in self.tiers.items()
            },
            "model": self.model,
            "bound": self.bound,
            "cache_bytes": self.cache_bytes,
        }


def split_grid(step: int = 1) -> np.ndarray:
    """All splits in percent on a ``step``% grid, one column per tier in ``SPLIT_ORDER``
    (``(E, D, A)``), int.

    Ordered by the last tier's share ascending, then the one before it (A, then D: so E
    descending): the tie-break order.
    """
    if step <= 0 or 100 % step:
        raise ConfigError(f"step: must divide 100, got {step!r}")
    axis = np.arange(0, 101, step, dtype=np.int64)
    later = len(SPLIT_TIERS) - 1  # the tiers after the first, last one outermost
    rest = np.stack(np.meshgrid(*[axis] * later, indexing="ij"), -1).reshape(-1, later)
    rest = rest[rest.sum(axis=1) <= 100]
    return np.column_stack([100 - rest.sum(axis=1), rest[:, ::-1]])


def _check_model(model: str) -> None:
    if model not in MODELS:
        raise ConfigError(f"model: expected one of {', '.join(MODELS)}, got {model!r}")


def evaluate(
    p: Params, splits: np.ndarray, model: str = DEFAULT_MODEL
) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray | None]:
    """Throughput of each split (rows of ``(E, D, A)`` percent), the samples per tier (Eq. 2-8
    under ``paper``, :func:`mdp.model.loader_counts` under ``shared``), and under the ``shared``
    model the index into :data:`SHARED_RESOURCES` of each split's bound."""
    _check_model(model)
    x = (np.asarray(splits, dtype=np.float64) / 100.0).T
    if model == "paper":
        n = counts(p, *x)
        return np.asarray(overall_paper(p, n), dtype=np.float64), n, None
    n = loader_counts(p, *x)
    thr, worst = overall_shared(p, n)
    return thr, n, worst


def _pick(p: Params, model: str, splits: np.ndarray, i: int) -> Prediction:
    """The :class:`Prediction` for row ``i`` of ``splits``."""
    split = splits[i]
    thr, n, worst = evaluate(p, splits[i : i + 1], model)
    n = {t: v[0] for t, v in n.items()}
    dsi = tier_dsi(p)
    tiers = {
        t: TierResult(
            dsi=float(dsi[t][0]),
            samples=round(float(n[t])),
            bytes=round(float(n[t]) * p.sample_bytes(t)),
            bound=dsi[t][1],
        )
        for t in TIERS
    }
    bound = None if worst is None else SHARED_RESOURCES[int(worst[0])]
    return Prediction(
        model=model,
        split=Split.from_percent([int(v) for v in split]),
        throughput=float(thr[0]),
        tiers=tiers,
        bound=bound,
        cache_bytes=round(p.s_cache),
    )


def parse_split(text: str) -> tuple[int, ...]:
    """``"E-D-A"`` (whole percentages summing to 100) as a tuple."""
    return Split.parse(text).percent


def predict(
    spec: Spec, split: Sequence[int] | str | Split, model: str = DEFAULT_MODEL
) -> Prediction:
    """The model's prediction for one split ``(E, D, A)`` in percent (or ``"E-D-A"``, or a
    :class:`Split`, whose fractions are rounded to whole percent)."""
    if isinstance(split, str):
        split = parse_split(split)
    elif isinstance(split, Split):
        split = split.percent
    p = Params.from_spec(spec)
    return _pick(p, model, np.array([split], dtype=np.int64), 0)


def _empty_budget(p: Params, grid: np.ndarray, n: dict[str, np.ndarray]) -> np.ndarray:
    """Per split, the percent of the cache given to tiers that would stay empty: tiers looked
    up before them hold every sample, as base copies that serve every job every epoch (the
    decoded tier before the encoded one), so none of their values is ever read. (Tiers used
    once per job, as the augmented one, hold copies that are replaced, so a tier under them
    still serves.)"""
    out = np.zeros(len(grid), dtype=np.int64)
    before: Any = 0.0  # samples the base tiers looked up earlier hold
    for t in CACHE_TIERS:
        if TIER_MODELS[t].once:
            continue
        held = np.asarray(n[t])
        empty = (held < 0.5) & (np.asarray(before) >= p.n_total - 0.5)
        out += np.where(empty, grid[:, SPLIT_TIERS.index(t)], 0)
        before = before + held
    return out


def _best_index(
    thr: np.ndarray, cached: np.ndarray, tolerance: float, empty: np.ndarray | None = None
) -> int:
    best = thr.max()
    candidates = thr >= best * (1 - max(tolerance, TIE_TOLERANCE))
    most = cached[candidates].max()
    candidates &= cached >= most * (1 - TIE_TOLERANCE)
    if empty is not None:  # no budget for a tier that would stay empty, when a tie allows it
        candidates &= empty <= empty[candidates].min()
    return int(np.flatnonzero(candidates)[0])  # grid order: least augmented, least decoded


def _least_cached(cached: np.ndarray) -> int:
    """The split that caches the fewest samples (first in grid order among equals)."""
    return int(np.flatnonzero(cached <= cached.min() * (1 + TIE_TOLERANCE) + 1e-9)[0])


def readable_tiers(p: Params, model: str, tiers: Iterable[str] | None = None) -> tuple[str, ...]:
    """The tiers a plan may give a share: ``tiers`` (default: all), less the augmented tier
    for a lone job under the ``shared`` model (it never reads a copy it made)."""
    names = tuple(SPLIT_TIERS if tiers is None else tiers)
    unknown = [t for t in names if t not in SPLIT_TIERS]
    if unknown or not names:
        raise ConfigError(f"tiers: expected some of {', '.join(SPLIT_TIERS)}, got {names!r}")
    if model == "shared" and p.jobs <= 1:
        base = [t for t in CACHE_TIERS if not TIER_MODELS[t].once]
        names = tuple(t for t in names if not TIER_MODELS[t].once) or (base[0],)
    return tuple(t for t in SPLIT_TIERS if t in names)


def plan(
    spec: Spec,
    model: str = DEFAULT_MODEL,
    step: int = 1,
    tolerance: float = 0.0,
    min_gain: float = 0.0,
    tiers: Iterable[str] | None = None,
) -> Prediction:
    """The best split on the ``step``% grid among those that give a share only to
    :func:`readable_tiers` (``tiers``: the tiers the jobs can read; default all).

    Splits whose throughput is within the relative ``tolerance`` of the best (default: only
    float-equal ones) are ties, broken as the module docstring says. ``min_gain``: the split
    that caches the fewest samples, unless the best beats it by more than this (relative).
    """
    if not 0 <= tolerance < 1:
        raise ConfigError(f"--tolerance: expected a fraction in [0, 1), got {tolerance!r}")
    if not 0 <= min_gain < 1:
        raise ConfigError(f"--min-gain: expected a fraction in [0, 1), got {min_gain!r}")
    p = Params.from_spec(spec)
    grid = split_grid(step)
    readable = readable_tiers(p, model, tiers)
    shut = [k for k, t in enumerate(SPLIT_TIERS) if t not in readable]
    if shut:
        grid = grid[(grid[:, shut] == 0).all(axis=1)]
    thr, n, _ = evaluate(p, grid, model)
    cached = p.n_total - n["storage"]
    best = _best_index(thr, cached, tolerance, _empty_budget(p, grid, n))
    least = _least_cached(cached)
    if min_gain > 0 and thr[best] <= thr[least] * (1 + min_gain):
        best = least
    return _pick(p, model, grid, best)


def sweep(
    spec: Spec,
    param: str,
    values: Iterable[Any],
    model: str = DEFAULT_MODEL,
    tolerance: float = 0.0,
) -> list[tuple[Any, Prediction]]:
    """The best split and its prediction for each value of ``param`` (``section.key``)."""
    out = []
    for value in values:
        varied = spec.replace(param, value)
        out.append((varied.get(param), plan(varied, model, tolerance=tolerance)))
    if not out:
        raise ConfigError("--values: give at least one value")
    return out
