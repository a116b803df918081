"""docs/guide.md's snippets for the frameworks run as written, in a fresh interpreter, next to
the datasets they name."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from seneca._bench.synthetic import make_dataset

pytestmark = pytest.mark.ecosystem

GUIDE = Path(__file__).parents[2] / "docs" / "guide.md"


def snippet(title: str) -> str:
    text = GUIDE.read_text()
    section = text[text.index(f"### {title}\n") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture
def example(tmp_path):
    """The README's example datasets, small, in ``tmp_path``."""
    for part in ("train", "val"):
        make_dataset(tmp_path / "data" / "example" / part, 24, 2, size=(80, 60), progress=False)
    return tmp_path


def run(cwd: Path, code: str) -> subprocess.CompletedProcess:
    (cwd / "train.py").write_text(code)
    done = subprocess.run(
        [sys.executable, "train.py"], cwd=cwd, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_with_timm(example):
    done = run(example, snippet("With timm"))
    assert re.findall(r"epoch (\d): val accuracy", done.stdout) == ["0", "1"]


def test_with_lightning(example):
    done = run(example, snippet("With Lightning"))
    assert re.search(r"val_loss \d+\.\d{3}", done.stdout), done.stdout[-2000:]


def test_with_hugging_face_datasets(example, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_CACHE", str(example / "hf"))  # the table's cache
    done = run(example, snippet("With Hugging Face datasets"))
    hits = [int(n) for n in re.findall(r"epoch \d: (\d+) decoded hits", done.stdout)]
    assert len(hits) == 2 and hits[0] == 0 and hits[1] == 24, done.stdout
