"""MDP: the model-driven partitioner of the Seneca paper (§5.1). Pure math: numpy, no Redis or
torch.

Given a cluster spec (:mod:`mdp.spec`), the performance model of the data storage and
ingestion (DSI) pipeline (:mod:`mdp.model`, Eq. 1-9, plus a shared-resource variant) predicts
the training input throughput for a split of the cache between encoded, decoded and augmented
samples, and the planner (:mod:`mdp.planner`) picks the best of the 5,151 splits on the 1%
grid::

    from mdp import load_spec, plan
    best = plan(load_spec("inhouse-x2"))
    best.split_text(), best.throughput   # "100-0-0", 4264.0

A plan written by ``mdp plan SPEC --out plan.json`` is read back by :func:`load_plan`
(:mod:`mdp.planfile`), as the loader's ``plan=`` does.

Command line: ``mdp plan | predict | sweep | profile | bench | examples``.
"""

from mdp.model import BOUND_LABELS, TIERS, Params
from mdp.planfile import PlanChoice, load_plan
from mdp.planner import MODELS, Prediction, TierResult, parse_split, plan, predict, sweep
from mdp.spec import FIELDS, Spec, example_names, load_spec, parse_spec, spec_toml

__all__ = [
    "BOUND_LABELS",
    "FIELDS",
    "MODELS",
    "TIERS",
    "Params",
    "PlanChoice",
    "Prediction",
    "Spec",
    "TierResult",
    "example_names",
    "load_plan",
    "load_spec",
    "parse_spec",
    "parse_split",
    "plan",
    "predict",
    "spec_toml",
    "sweep",
]
