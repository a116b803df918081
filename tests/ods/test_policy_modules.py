"""Each cache policy is one Lua module in ods/functions/policies/ with the same entries, named
once in Python (ods.functions.POLICIES); the commands never compare policy names."""

import re
from pathlib import Path

import pytest

from ods.functions import POLICIES, SOURCE
from ods.store import OdsStore
from seneca_base.errors import ConfigError

FUNCTIONS = Path(__file__).resolve().parents[2] / "ods" / "functions"
ENTRIES = {"evicts", "spends", "served", "admitted", "released"}


def test_every_policy_file_is_registered_and_loaded():
    files = {p.stem for p in (FUNCTIONS / "policies").glob("*.lua")}
    assert files == set(POLICIES)
    for name in POLICIES:
        assert f"POLICY.{name} = {{" in SOURCE


@pytest.mark.parametrize("name", POLICIES)
def test_a_policy_has_the_same_entries(name):
    text = (FUNCTIONS / "policies" / f"{name}.lua").read_text()
    entries = set(re.findall(r"^  (\w+) = ", text, re.M))
    assert entries == ENTRIES


def test_no_command_names_a_policy():
    for path in FUNCTIONS.glob("*.lua"):
        code = "\n".join(line.split("--")[0] for line in path.read_text().splitlines())
        for name in POLICIES:
            assert f"'{name}'" not in code, (path.name, name)


def test_an_unknown_policy_is_refused(redis_proc):
    with pytest.raises(ConfigError, match="policy: expected one of seneca, paper"):
        OdsStore(redis_proc.client, "d", 10, policy="lru")
