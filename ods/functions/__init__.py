"""The engine's server-side code: a Redis Functions library (``FUNCTION LOAD`` / ``FCALL``,
Redis >= 7.0), one Lua file per command plus ``bits.lua`` (bitmap helpers), the key layout
(generated: :func:`ods.keys.lua_layout`), ``lib.lua`` (the shared helpers), ``pending.lua``
(misses being made from storage), ``substitute.lua`` (decide's substitution), ``evict.lua``
(admission's helpers) and one file per cache policy in ``policies/`` (:data:`POLICIES`),
assembled here when loaded.

A policy is a Lua table with the same entries (see ``lib.lua``'s ``POLICY``): whether an
admission over budget evicts, and what it does when hits are served, samples admitted and hits
released. The calls that take a policy (``decide``, ``lookup``, ``admit``, ``release``) take its
name; ``ods.store.OdsStore(policy=...)`` checks it against :data:`POLICIES`.

The library's name carries a hash of its source (``seneca_<hash>``), so loaders of different
versions never call each other's functions. Error replies start with a code that
:func:`error_of` maps to an exception under ``SenecaError``.
"""

from __future__ import annotations

import hashlib
from importlib import resources

from ods.keys import lua_layout
from seneca_base.errors import (
    ForeignDataError,
    FunctionsMissingError,
    ServerFunctionError,
    StaleJobsError,
    UnknownJobError,
)
from seneca_base.tiers import with_lua_tiers

__all__ = ["COMMANDS", "FUNCTIONS", "NAME", "POLICIES", "SOURCE", "error_of"]

#: The commands, one Lua file each.
COMMANDS = (
    "join",
    "leave",
    "epoch",
    "restore",
    "decide",
    "lookup",
    "release",
    "claim",
    "swap",
    "admit",
    "forget",
    "shrink",
    "state",
    "budgets",
)

#: The cache policies, one Lua file each in ``policies/`` (``ods.defaults.POLICY`` names the
#: default).
POLICIES = ("seneca", "paper")

#: Error codes the functions reply with, and the exception each becomes.
_ERRORS: dict[str, type[ServerFunctionError]] = {
    "SENECA_NOJOB": UnknownJobError,
    "SENECA_JOBS": StaleJobsError,
    "SENECA_WRONGTYPE": ForeignDataError,
}


def _read(name: str) -> str:
    return (resources.files("ods.functions").joinpath(f"{name}.lua")).read_text()


def _functions(library: str) -> dict[str, str]:
    """The name each command's function has in ``library`` (what FCALL takes)."""
    return {cmd: f"{library}_{cmd}" for cmd in COMMANDS}


def _assemble() -> tuple[str, str]:
    parts = [
        _read("bits"),
        lua_layout(),
        _read("lib"),
        _read("pending"),
        _read("substitute"),
        _read("evict"),
    ]
    parts += [_read(f"policies/{policy}") for policy in POLICIES]
    for cmd in COMMANDS:
        body = "\n".join("  " + line if line else line for line in _read(cmd).splitlines())
        parts.append(
            f"local function run_{cmd}(keys, args)\n  local a, bad = begin(keys, args)\n"
            f"  if bad then return fail('SENECA_WRONGTYPE', bad) end\n{body}\nend\n"
        )
    body = with_lua_tiers("\n".join(parts))
    name = "seneca_" + hashlib.sha1(body.encode()).hexdigest()[:12]
    register = "".join(
        f"redis.register_function{{function_name='{function}', callback=run_{cmd}, "
        "flags={'allow-oom'}}\n"
        for cmd, function in _functions(name).items()
    )
    return name, f"#!lua name={name}\n{body}\n{register}"


#: The library's name and its whole source, as FUNCTION LOAD takes it.
NAME, SOURCE = _assemble()


#: The name FCALL takes for each command.
FUNCTIONS = _functions(NAME)


def error_of(err: Exception) -> Exception:
    """The typed exception of a function's error reply (``err``, a redis-py ResponseError):
    an engine code (``SENECA_NOJOB ...``) or a missing library; other errors as they are."""
    text = str(err)
    code = text.split(" ", 1)[0]
    if code in _ERRORS:
        return _ERRORS[code](text)
    if "function not found" in text.lower():
        return FunctionsMissingError(text)
    return err
