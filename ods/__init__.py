"""ODS: the opportunistic data sampler (paper §5.2) and its Redis metadata (no torch).

The sampler and ``ods simulate`` arrive with issue #4; this package is importable now so the
layout and console script exist.
"""

__all__: list[str] = []
