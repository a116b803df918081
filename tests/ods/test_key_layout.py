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


def test_the_functions_name_tiers_only_through_the_generated_letters(redis_proc):
    """A tier's letter is written nowhere in the Lua sources but in the prelude generated from
    seneca_base.tiers (``TIERS``, ``TIER.<name>``): renaming a tier's letter renames it
    everywhere."""
    from seneca_base.tiers import LETTER, TIERS

    quoted = "|".join(LETTER.values())
    for name, text in _lua_sources().items():
        code = "\n".join(line.split("--", 1)[0] for line in text.splitlines())
        found = re.findall(rf"'(?:{quoted})(?::[^']*)?'|\bK\.\w+\.(?:{quoted})\b|\bF\.\w\b", code)
        assert not found, f"{name} names a tier by its letter: {found}"
    body = functions.SOURCE.split("\n", 1)[1].split("\nredis.register_function", 1)[0]
    names = ", ".join(f"TIER.{t}" for t in TIERS)
    got = redis_proc.client.eval(f"{body}\nreturn {{{names}}}", 0)
    assert [x.decode() for x in got] == [LETTER[t] for t in TIERS]


def test_keys_name_back_the_job_view_value_and_dataset_of_a_key():
    keys = Keys("d{s}:1", prefix="p", view="crop")
    for key in keys.job("job|crop"):
        assert keys.job_of(key) == "job|crop"
    assert keys.job_of(keys.tier("decoded")) is None
    assert keys.job_of(keys.used) is None
    assert keys.view_of_tier(keys.tier("augmented")) == "crop"
    assert keys.view_of_tier(keys.tier("decoded")) is None
    assert Keys.view_of_form(keys.form("augmented")) == "crop"
    assert Keys.view_of_form(keys.form("encoded")) is None
    assert keys.value_of(keys.value("decoded", 12)) == (keys.form("decoded"), 12)
    assert keys.value_of(keys.value("augmented", 3)) == (keys.form("augmented"), 3)
    assert keys.value_of(keys.staged("decoded", 12, "tok")) is None
    assert keys.bitmap(keys.form("augmented")) == keys.tier("augmented")
    for key in (keys.used, keys.jobs, keys.info):
        assert Keys.dataset_of(key, "p") == "d{s}:1"
    assert Keys.dataset_of(keys.pace, "p") is None
    assert Keys.dataset_of(keys.used, "q") is None


def test_the_scan_patterns_find_exactly_their_keys(redis_proc):
    """Every pattern, on a real server, matches the keys it names and no other dataset's, glob
    characters in the names included."""
    from ods.shardmap import shard_names

    r = redis_proc.client
    keys = Keys("d*s[1]", prefix="p", view="crop")
    other = Keys("d*s[1]x", prefix="p", view="crop")
    shards = [Keys(name, prefix="p", view="crop") for name in shard_names(keys.dataset, 2)]

    def fill(k: Keys) -> set[str]:
        made = [k.used, k.jobs, k.info, k.tier("augmented"), k.tier("decoded"), *k.job("j|crop")]
        made += [k.value("decoded", 1), k.value("augmented", 2)]
        for key in made:
            r.set(key, 1)
        return set(made)

    mine, theirs = fill(keys), fill(other)
    parts = set().union(*(fill(s) for s in shards))

    def scan(*patterns: str) -> set[str]:
        return {k.decode() for p in patterns for k in r.scan_iter(match=p, count=1000)}

    assert scan(*keys.patterns()) == mine
    assert scan(*keys.shard_patterns()) == parts
    assert scan(*keys.job_patterns()) == set(keys.job("j|crop"))
    assert scan(keys.view_tiers()) == {keys.tier("augmented")}
    found = {Keys.dataset_of(k, "p") for k in scan(*Keys.dataset_patterns("p"))}
    assert found == {keys.dataset, other.dataset, *(s.dataset for s in shards)}
    assert scan(Keys.everything("p")) == mine | theirs | parts
