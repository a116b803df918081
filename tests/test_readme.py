"""The README's first example runs as it stands: copied into a file next to the dataset it
names, made as the README says."""

import re
import sys
from pathlib import Path

import pytest
from helpers import warm

from seneca._bench.synthetic import make_dataset

README = Path(__file__).parents[1] / "README.md"


@pytest.mark.slow
def test_the_readme_snippet_runs_as_written(tmp_path):
    text = README.read_text()
    section = text[text.index("## The one-line change") :]
    for part in ("train", "val"):  # what the reader is told to run first
        assert f"seneca make-dataset data/example/{part}" in section
        root = tmp_path / "data" / "example" / part
        make_dataset(root, 40, 2, size=(96, 72), progress=False, workers=2)
    snippet = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    (tmp_path / "train.py").write_text(snippet)
    done = warm.run(
        [sys.executable, "train.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "epoch 1:" in done.stdout
    assert "job " in done.stderr and "storage reads" in done.stderr  # the INFO lines show
