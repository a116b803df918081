"""The key contract is declared once (``ods.keys.Keys.layout``): the Lua side's names, order
and types are generated from it, and the functions read no key by any other name."""

import re
from importlib import resources

import pytest

from ods import functions
from ods.keys import DECLARED_JOB_KEYS, JOB_KEYS, Keys

LAYOUT = Keys("ds", view="crop").layout("job|crop", 7)


def _lua_sources() -> dict[str, str]:
    root = resources.files("ods.functions")
    files = [p for p in root.iterdir() if p.name.endswith(".lua")]
    files += [p for p in root.joinpath("policies").iterdir() if p.name.endswith(".lua")]
    return {p.name: p.read_text() for p in files}


def _fields() -> set[str]:
    return {name for names, _, _ in LAYOUT for name in names.split()}


def test_the_functions_read_keys_only_by_their_declared_names():
    declared = _fields()
    tops = {name.partition(".")[0] for name in declared}
    used: set[str] = set()
    for name, text in _lua_sources().items():
        assert not re.search(r"\bkeys\[\d", text), f"{name} reads a key by its number"
        for top, sub in re.findall(r"\bK\.(\w+)(?:\.(\w+))?", text):
            assert top in tops, f"{name}: K.{top} is not in ods.keys.Keys.layout"
            if sub:
                assert f"{top}.{sub}" in declared, f"{name}: K.{top}.{sub} is not declared"
            used.add(top)
    assert used == tops  # every declared key is read somewhere


_PROBE = """
local _, bad = begin(KEYS, ARGV)
local out = {bad or ''}
for top, v in pairs(K) do
  if type(v) == 'table' then
    for sub, key in pairs(v) do table.insert(out, top .. '.' .. sub .. '=' .. key) end
  else table.insert(out, top .. '=' .. v) end
end
for _, d in ipairs(DECLARED) do
  for _, f in ipairs(JOB_KEYS) do
    if d[f] then table.insert(out, d.name .. '.' .. f .. '=' .. d[f]) end
  end
end
return out
"""

KEYS = Keys("ds", view="crop")
JOBS = ["job|crop", "other|crop"]
DECLARED = KEYS.declared("job|crop", 7, JOBS)


def _begin(client) -> tuple[str, dict[str, str]]:
    """lib.lua's ``begin`` run on the keys Python declares (the library's code, evaluated):
    the first key of a foreign type ("" for none), and each name's key."""
    body = "\n".join(
        line
        for line in functions.SOURCE.splitlines()[1:]
        if not line.startswith("redis.register_function")
    )
    args = [0, "job|crop", 1000, 1000, 4, 1, 1000, len(JOBS), *JOBS]
    reply = client.eval(body + _PROBE, len(DECLARED), *DECLARED, *args)
    bad, *pairs = [x.decode() for x in reply]
    return bad, dict(pair.split("=", 1) for pair in pairs)


def test_the_library_names_each_key_as_python_declares_it(redis_proc):
    bad, got = _begin(redis_proc.client)
    assert bad == ""  # an empty server: no key holds a foreign type
    want = {name: key for names, _, key in LAYOUT for name in names.split()}
    for job in JOBS:
        keys = zip(DECLARED_JOB_KEYS, KEYS.declared_job(job), strict=True)
        want |= {f"{job}.{f}": k for f, k in keys}
    assert got == want


def test_each_key_of_another_type_than_declared_is_named(redis_proc):
    """KEY_TYPES follows the layout, the declared jobs' keys included: a key holding another
    type than its declared one is the one the check names."""
    r = redis_proc.client
    types = [kind for _, kind, _ in LAYOUT]
    types += [JOB_KEYS[f] for _ in JOBS for f in DECLARED_JOB_KEYS]
    assert len(types) == len(DECLARED)
    other = {"string": ("hset", "f", "v"), "hash": ("set", "x"), "zset": ("set", "x"),
             "set": ("set", "x")}  # fmt: skip
    for key, kind in zip(DECLARED, types, strict=True):
        cmd, *rest = other[kind]
        getattr(r, cmd)(key, *rest)
        assert _begin(r)[0] == key, f"{key} should hold a {kind}"
        r.delete(key)


def test_each_tier_has_a_letter_of_its_own():
    from seneca_base.tiers import LETTER, TIERS, letters

    assert sorted(LETTER.values()) == sorted({t[0] for t in TIERS})  # one each, all distinct
    assert letters(("encoded", "decoded", "augmented", "raw"))["raw"] == "r"
    with pytest.raises(ValueError, match="'decoded' and 'downscaled' would share the letter 'd'"):
        letters(("encoded", "decoded", "downscaled"))
