"""MDP: the model-driven partitioner (paper §5.1). Pure math: numpy/scipy, no Redis or torch.

The performance model and ``mdp plan`` arrive with issue #3; this package is importable now so
the layout and console script exist.
"""

__all__: list[str] = []
