"""The split value: fractions, percent and bytes are one value, and one owner (the store)
applies it to the budgets."""

import ast
from pathlib import Path

import pytest

from seneca_base.errors import ConfigError
from seneca_base.split import Split

ROOT = Path(__file__).resolve().parents[1]


def test_the_three_forms_of_one_split():
    s = Split.parse("50-30-20")
    assert s == Split(0.5, 0.3, 0.2) == Split.of({"encoded": 0.5, "decoded": 0.3, "augmented": 0.2})
    assert s.percent == (50, 30, 20) and s.text() == "50-30-20"
    assert s.fractions == {"encoded": 0.5, "decoded": 0.3, "augmented": 0.2}
    assert s.budgets(1000) == {"augmented": 200, "decoded": 300, "encoded": 500}
    assert Split.from_percent(s.percent) == s


def test_percent_rounding_sums_to_100():
    s = Split.of((1 / 3, 1 / 3, 1 / 3))
    assert sum(s.percent) == 100 and s.percent == (34, 33, 33)


@pytest.mark.parametrize(
    ("text", "message"), [("50-30", "expected E-D-A"), ("50-30-30", "sum to 100"), ("a-b-c", "")]
)
def test_bad_percent_text_names_the_option(text, message):
    with pytest.raises(ConfigError, match=f"--split: .*{message}"):
        Split.parse(text)


def _capacity_writes(path: Path) -> list[int]:
    tree = ast.parse(path.read_text())
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign | ast.AugAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute)
        and target.attr == "capacity"
        and not (isinstance(target.value, ast.Name) and target.value.id == "self")
    ]


def test_only_the_store_sets_its_budgets():
    """Budgets change through ``OdsStore.apply_split`` / ``adopt_budgets``: no module assigns
    another object's ``capacity``."""
    found = {
        str(p.relative_to(ROOT)): lines
        for package in ("seneca", "ods", "mdp", "seneca_base")
        for p in (ROOT / package).rglob("*.py")
        if (lines := _capacity_writes(p))
    }
    assert found == {}
