"""The package declares version ranges (it installs into existing training environments); the
development environment pins every one of them in constraints.txt, and is built with it."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin"
            pins[name.lower()] = version
    return pins


def test_dependencies_are_ranges() -> None:
    project = _project()
    reqs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        reqs += extra
    pinned = [r for r in reqs if "==" in r or "===" in r]
    assert not pinned, f"exact pins belong in constraints.txt, not pyproject.toml: {pinned}"
    assert all(re.search(r"[<>~]=?", r) for r in project["dependencies"]), (
        "every runtime dependency states the oldest version it works with"
    )


def test_constraints_pin_every_dependency_and_match_the_environment() -> None:
    project = _project()
    pins = _constraints()
    names = {_name(r) for r in project["dependencies"] + project["optional-dependencies"]["dev"]}
    assert names <= set(pins), f"not pinned in constraints.txt: {sorted(names - set(pins))}"
    for name, version in pins.items():
        assert metadata.version(name) == version, f"{name}: installed != constraints.txt"
