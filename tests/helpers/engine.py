"""What the ODS engine tests read back from a real Redis, and how their property tests run."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

from ods.bitmaps import test_bit


def members(bitmap: bytes) -> set[int]:
    """The samples set in ``bitmap`` (Redis' bit order)."""
    return {i for i in range(8 * len(bitmap)) if test_bit(bitmap, i)}


def pending(redis_proc, store) -> set[int]:
    """The samples marked pending, over every bucket's key."""
    out: set[int] = set()
    for key in redis_proc.client.keys(store.keys.meta + "pend:*"):
        out |= members(redis_proc.client.get(key) or b"")
    return out


def on_a_server(examples: int):
    """Hypothesis settings for a property test that drives a real Redis (a fixture per test
    function, slow examples): ``examples`` of them, no deadline."""
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
