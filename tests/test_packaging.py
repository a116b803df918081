"""The package declares version ranges (it installs into existing training environments); the
development environment pins every one of them in constraints.txt, and is built with it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

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


#: the extras of the frameworks Seneca is tested with (`make test-ecosystem`), not in .venv
FRAMEWORKS = ("lightning", "hf", "timm")


def test_constraints_pin_every_dependency_and_match_the_environment() -> None:
    """Every pin installed here is at its version; the pins of what the frameworks' extras
    bring are not installed here (tests/ecosystem/test_packages.py checks them there)."""
    project = _project()
    extras = project["optional-dependencies"]
    pins = _constraints()
    names = {_name(r) for r in project["dependencies"] + extras["dev"]}
    names |= {_name(r) for extra in FRAMEWORKS for r in extras[extra]}
    assert names <= set(pins), f"not pinned in constraints.txt: {sorted(names - set(pins))}"
    for extra in FRAMEWORKS:  # the core environment stays free of them
        for name in map(_name, extras[extra]):
            with pytest.raises(metadata.PackageNotFoundError):
                metadata.version(name)
    for name, version in pins.items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        assert installed == version, f"{name}: installed {installed} != constraints.txt {version}"


@pytest.mark.slow
def test_the_wheel_installs_beside_the_torch_already_there(tmp_path):
    """A wheel built here ships its data files and, installed into this environment, changes
    neither torch nor torchvision (pip's dry run: what it would install)."""
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    [wheel] = tmp_path.glob("seneca_loader-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for package in ("seneca", "seneca_base", "ods", "mdp"):
        assert f"{package}/py.typed" in names
    assert "ods/functions/decide.lua" in names and any(n.startswith("mdp/specs/") for n in names)
    report = tmp_path / "report.json"
    subprocess.run(
        [*pip, "install", "--dry-run", "--report", str(report), str(wheel)],
        check=True,
        capture_output=True,
    )
    installs = {i["metadata"]["name"].lower() for i in json.loads(report.read_text())["install"]}
    assert "seneca-loader" in installs and not installs & {"torch", "torchvision", "redis"}


@pytest.mark.parametrize("command", ["seneca", "mdp", "ods"])
def test_every_command_tells_its_version(command):
    done = subprocess.run(
        [str(Path(sys.executable).parent / command), "--version"], capture_output=True, text=True
    )
    assert (
        done.returncode == 0
        and done.stdout.strip() == f"{command} {metadata.version('seneca-loader')}"
    )


def test_errors_show_the_names_users_import():
    import pickle
    import traceback

    import seneca
    from seneca_base.errors import ConfigError, UnknownJobError

    try:
        raise ConfigError("cache_size: bad")
    except ConfigError as err:
        assert traceback.format_exception_only(err)[0] == "seneca.ConfigError: cache_size: bad\n"
    assert seneca.ConfigError is ConfigError
    assert type(pickle.loads(pickle.dumps(UnknownJobError("x")))) is UnknownJobError
