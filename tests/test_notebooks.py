"""The notebooks execute at their small size (what `make notebooks` runs at full size)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NAMES = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))


def test_every_figure_has_a_notebook_with_saved_outputs():
    assert NAMES == [
        "fig13_hit_rate.ipynb",
        "fig4b_redundant_preprocessing.ipynb",
        "fig8_model_validation.ipynb",
        "headline_throughput.ipynb",
        "table6_planner.ipynb",
    ]
    for name in NAMES:
        cells = json.loads((ROOT / "notebooks" / name).read_text())["cells"]
        code = [c for c in cells if c["cell_type"] == "code"]
        assert all(c["outputs"] for c in code[-1:]), f"{name} was saved without outputs"
        errors = [o for c in code for o in c["outputs"] if o["output_type"] == "error"]
        assert not errors, f"{name} was saved with an error"


@pytest.mark.bench
@pytest.mark.parametrize("name", NAMES)
def test_the_notebooks_execute_at_small_size(tmp_path, name):
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "run_notebooks.py"), "--size", "small",
         "--out", str(tmp_path), name],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    cells = json.loads((tmp_path / name).read_text())["cells"]
    outputs = [o for c in cells if c["cell_type"] == "code" for o in c["outputs"]]
    kinds = {kind for o in outputs for kind in o.get("data", {})}
    shown = "image/png" if name.startswith("fig") else "text/markdown"  # a plot, or a table
    assert shown in kinds, f"{name}: no {shown} output"
