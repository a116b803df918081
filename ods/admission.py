"""Admissions: values written next to their own keys, accounted by one call of the engine.

Round trip 1 SETs each value under an expiring staging key in its own slot and calls ``admit``,
which decides and accounts in the metadata's slot (an admission of more than
``defaults.ADMIT_CHUNK`` values is made in several such calls, one round trip each, so no call
holds the server for long). Round trip 2 renames the admitted values into place and makes them
permanent, deletes the refused ones' staging keys and the values of entries the admission
evicted (or orphans it collected), and forgets an admitted entry whose value Redis refused to
store (at maxmemory): its result is :data:`REFUSED`, so the caller counts it as an error, not
as a full tier; so is a value whose staging Redis refused, whatever the admission decided (a
refusal is never only a full tier's). An ``admit`` call the server refuses for want of memory
admits nothing (every result :data:`REFUSED`) and deletes the staged values at once.

A value the caller expects a full tier to refuse (``later``: its tier had no room when the
caller last looked) is not staged: round trip 1 only accounts it, and round trip 2 writes it
in place if it was admitted (waited for, so a value the server refused to store is forgotten
and reported as for a staged one). An offer to a full tier is then an eviction decision that
costs no bytes when it is refused.

An offer of an encoded or decoded value already cached at that size replaces the cached value,
so an entry whose value went missing (deleted by a racing eviction's late UNLINK) heals at its
next miss. Until round trip 2 runs, a reader decided to read an admitted value finds it
missing: a counted miss, never a wrong value; a staged value nobody renames expires.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence

import redis

from ods import defaults, routing
from ods.engine import Engine
from ods.functions import error_of
from seneca_base.tiers import LETTER, TIERS, tier_of_letter

__all__ = ["REFUSED", "admit", "admit_args"]

#: An admission's result for a value the policy admitted and the server refused to store.
REFUSED = -1


def _stage(
    store: Engine,
    items: Sequence[tuple[int, str, int, bytes]],
    token: str,
    later: Collection[int],
) -> list:
    """The SETs of round trip 1: (item number, staged key, command) per stored value not
    written ``later``."""
    out = []
    for k, (index, tier, _, value) in enumerate(items):
        if value and store.values and k not in later:
            key = store.keys.staged(tier, index, f"{token}.{k}")
            out.append((k, key, ("SET", key, value, "PX", defaults.STAGED_VALUE_TTL_MS)))
    return out


def admit_args(
    store: Engine, items: Sequence[tuple[int, str, int, bytes]], made: Sequence[int] = ()
) -> list[object]:
    """The arguments of the ``admit`` function for ``items`` and the samples ``made`` from
    storage but not offered (see ``admit.lua``)."""
    flat: list[object] = []
    for index, tier, size, _ in items:
        flat += [int(index), LETTER[tier], int(size)]
    args = [store.policy, *(store.capacity[t] for t in TIERS), store.admission_seed()]
    extra = [defaults.EVICTION_CANDIDATES, defaults.DEMAND_JOBS, defaults.EVICTION_POOL]
    return [*args, *extra, len(made), *map(int, made), *flat]


def _account(
    store: Engine, job: str, items: Sequence, staging: list, made: Sequence[int]
) -> tuple[list, list]:
    """Round trip 1: the SETs and the ``admit`` call; returns each SET's reply and the call's."""
    args = admit_args(store, items, made)
    commands = [command for _, _, command in staging]
    replies = routing.run(store.client, [*commands, store.command("admit", job, *args, jobs=True)])
    out = replies[-1]
    if isinstance(out, Exception):  # the staged values are still there: call again
        if not store.recover(out):
            raise error_of(out)
        out = store.call("admit", job, *args, jobs=True)
    return replies[:-1], out


def admit(
    store: Engine,
    job: str,
    items: Sequence[tuple[int, str, int, bytes]],
    wait: bool = True,
    made: Sequence[int] = (),
    later: Collection[int] = (),
) -> list[int]:
    """``OdsStore.admit``: see the module docstring; ``wait=False`` posts round trip 2 to the
    store's outbox instead of waiting for it. ``made``: samples the caller made from storage
    and does not offer, no longer pending (``pending.lua``); with no items, that call is
    sent through the outbox, its reply read later. ``later``: the positions in ``items`` of
    values written only once admitted."""
    if not items:
        if made:
            _made_later(store, job, made)
        return []
    step = defaults.ADMIT_CHUNK
    results: list[int] = []
    for first in range(0, len(items), step):
        chunk = items[first : first + step]
        own = {k - first for k in later if first <= k < first + step}
        results += _admit(store, job, chunk, wait, () if first else made, own)
    return results


def _out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is the server's refusal at ``maxmemory`` (as redis-py's parser or
    ``seneca._cache.resp`` gives it)."""
    return isinstance(err, redis.exceptions.OutOfMemoryError) or str(err).startswith("OOM ")


def _made_later(store: Engine, job: str, made: Sequence[int]) -> None:
    """An ``admit`` call of no values that only ends ``made``'s pending, sent at once through
    the outbox; its reply is read later (the orphans it collects are deleted then)."""

    def done(reply: object) -> None:
        if isinstance(reply, Exception):
            if not store.recover(reply):
                raise error_of(reply)
            reply = store.call("admit", job, *admit_args(store, [], made), jobs=True)
        store.unlink_values(reply[1], now=False)  # type: ignore[index]

    command = store.command("admit", job, *admit_args(store, [], made), jobs=True)
    store.outbox.post(command, hold=False, on_reply=done)


def _admit(
    store: Engine,
    job: str,
    items: Sequence[tuple[int, str, int, bytes]],
    wait: bool,
    made: Sequence[int],
    later: Collection[int],
) -> list[int]:
    """One ``admit`` call's admission (round trips 1 and 2) of at most ADMIT_CHUNK items."""
    token = os.urandom(8).hex()
    staging = _stage(store, items, token, later)
    try:
        set_replies, (results, evicted) = _account(store, job, items, staging, made)
    except redis.ResponseError as err:
        if not _out_of_memory(err):
            raise
        # the server's memory is full: nothing was admitted; the staged values go at once
        if staging:
            routing.run(store.client, [("UNLINK", *(key for _, key, _ in staging))])
        return [REFUSED] * len(items)
    results = [int(r) for r in results]
    finish: list[tuple] = []
    forget: list[object] = []
    for (k, key, _), reply in zip(staging, set_replies, strict=True):
        index, tier = items[k][0], items[k][1]
        stored = not isinstance(reply, redis.RedisError)
        if results[k] in (1, 3) and stored:
            final = store.keys.value(tier, index)
            finish += [("RENAME", key, final), ("PERSIST", final)]
        elif results[k] == 1:
            forget += [LETTER[tier], int(index)]
            results[k] = REFUSED
        elif stored:
            finish.append(("UNLINK", key))
        else:  # refused by the server (its memory is full), whatever the admission decided
            results[k] = REFUSED
    # values written only once admitted: waited for, each refused one forgotten as above
    writes = [k for k in later if results[k] in (1, 3) and items[k][3] and store.values]
    if forget:  # admitted, but Redis refused the value
        evicted = [*evicted, *store.call("forget", job, *forget)]
    pairs = zip(evicted[::2], evicted[1::2], strict=True)
    gone = [store.keys.value(tier_of_letter(t), int(i)) for t, i in pairs]
    if gone and store.values:  # before the renames: a value put back by this call stays
        finish.insert(0, ("UNLINK", *gone))
    sets = [("SET", store.keys.value(items[k][1], items[k][0]), items[k][3]) for k in writes]
    if sets:
        replies = routing.run(store.client, [*finish, *sets])[len(finish) :]
        refused = [k for k, r in zip(writes, replies, strict=True) if isinstance(r, Exception)]
        if refused:  # admitted, but Redis refused the value (what it evicts was deleted above)
            back = [x for k in refused for x in (LETTER[items[k][1]], int(items[k][0]))]
            store.unlink_values(store.call("forget", job, *back))
            for k in refused:
                results[k] = REFUSED
    elif finish and wait:
        routing.run(store.client, finish)
    elif finish:
        store.outbox.send(finish)
    return [2 if r == 3 else r for r in results]
