"""The vocabulary that ``mdp``, ``ods`` and ``seneca`` share: ``errors`` (the exception tree),
``tiers`` (the cache tiers' names, letters and orders) and ``units`` (byte sizes, durations);
also ``split`` (a cache split) and ``backoff`` (a job's back-off of a failing cache, and how
often a loader looks at what it shares with other jobs).

It sits below the three packages and imports none of them, so ``mdp`` (pure numpy) and ``ods``
(redis-py only) use the same errors and tier names as the loader without importing ``seneca``.
Users import the errors from ``seneca`` (``seneca.SenecaError``, ``seneca.errors``).
"""

__all__ = ["errors", "tiers", "units"]
