"""CONTRIBUTING's "Add a tier" recipe works: scripts/fourth_tier.py applies it to a scratch copy
(five code files), and the copy plans, keys and serves four tiers, the new one with a size and
a budget of its own."""

import sys
from pathlib import Path

from helpers import warm

ROOT = Path(__file__).resolve().parents[1]


def test_a_fourth_tier_by_the_recipe_is_served():
    out = warm.run(
        [sys.executable, str(ROOT / "scripts" / "fourth_tier.py")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "the recipe's code edits touch 5 files" in out.stdout
    assert "written E-D-R-A" in out.stdout
    assert "the second epoch read every sample from the new tier" in out.stdout
    assert "whose values hold 3202 bytes each (a decoded image: 9216)" in out.stdout
    assert "another transform's resized values are its own: {(3, 24, 24)}" in out.stdout
    assert "with ODS: [40, 40] samples per epoch" in out.stdout
