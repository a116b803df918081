"""CONTRIBUTING's map is true: every module it names exists under the package it names it in,
and every module of the packages is named there."""

import re
from pathlib import Path

from ods.functions import COMMANDS, POLICIES

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("seneca_base", "mdp", "ods", "seneca")


def _sections() -> dict[str, str]:
    """The map's text under each top-level folder it describes (``ods/``: its lines)."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    block = text.split("## The map", 1)[1].split("```", 2)[1]
    out: dict[str, list[str]] = {}
    top = None
    for line in block.splitlines():
        head = re.match(r"^(\S+)/", line)
        if head:
            top = head.group(1)
        if top:
            out.setdefault(top, []).append(line)
    return {top: "\n".join(lines) for top, lines in out.items()}


def _named(text: str) -> set[str]:
    return set(re.findall(r"\b[\w]+\.(?:py|lua|sh)\b", text))


def test_every_module_the_map_names_exists_where_it_says():
    sections = _sections()
    assert set(PACKAGES) <= set(sections)
    for top, text in sections.items():
        for name in _named(text):
            assert list((ROOT / top).rglob(name)), f"CONTRIBUTING names {top}/…/{name}: absent"


def test_every_module_of_the_packages_is_on_the_map():
    sections = _sections()
    assert (
        "one .lua per command" in sections["ods"]
        and "one .lua per cache policy" in (sections["ods"])
    )
    left_out = []
    for package in PACKAGES:
        named = _named(sections[package])
        for path in sorted((ROOT / package).rglob("*")):
            if path.suffix not in (".py", ".lua") or path.name.startswith("__"):
                continue
            if path.parent.name == "functions" and path.stem in COMMANDS:
                continue  # "one .lua per command" (ods.functions.COMMANDS)
            if path.parent.name == "policies" and path.stem in POLICIES:
                continue  # "one .lua per cache policy" (ods.functions.POLICIES)
            if path.name not in named:
                left_out.append(str(path.relative_to(ROOT)))
    assert not left_out, f"not on CONTRIBUTING's map: {left_out}"
