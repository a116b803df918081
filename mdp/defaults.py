"""Every default the MDP planner uses, in one place."""

from __future__ import annotations

#: The model ``mdp plan`` uses: ``shared`` fits measured throughput (``seneca validate-model``,
#: docs/benchmarks.md) far better than the paper's Eq. 9.
MODEL = "shared"
#: Relative tolerance under which two predicted throughputs count as a tie.
TIE_TOLERANCE = 1e-9
#: Seconds ``mdp plan`` may take on any spec (``mdp bench`` reports against it).
PLAN_GOAL_S = 1.0
