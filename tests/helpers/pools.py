"""The connections checked out of a redis-py connection pool, for the tests that check that no
connection is lost. redis-py has no public figure for them: it keeps them in
``ConnectionPool._in_use_connections`` (5.0-8.1, the versions ``ods.redis_internals.CHECKED``
names), read here only."""

from __future__ import annotations

from typing import Any


def checked_out(pool: Any) -> set[Any]:
    """The connections of ``pool`` checked out now (in use, or kept by ``ods.routing``)."""
    return set(pool._in_use_connections)
