"""The cache plans itself: ``split="auto"`` (SenecaLoader's default) plans the split between
the encoded, decoded and augmented tiers with MDP from the rates, sizes and live jobs the loader
measures, shares one plan per dataset in the cache, and re-plans with hysteresis as they move.

* :mod:`seneca._autoplan.inputs`: what is measured, and the spec planned from;
* :mod:`seneca._autoplan.record`: the shared plan (JSON in the cache);
* :mod:`seneca._autoplan.planner`: :class:`AutoPlanner`, adopting and changing it.
"""

from seneca._autoplan.inputs import Setting, measured_inputs, spec_of
from seneca._autoplan.planner import AutoPlanner, plan_for
from seneca._autoplan.record import PlanRecord

__all__ = [
    "AutoPlanner",
    "PlanRecord",
    "Setting",
    "measured_inputs",
    "plan_for",
    "spec_of",
]
