import io
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from seneca._bench.synthetic import make_dataset, render_image
from seneca_base.errors import DatasetError


def test_deterministic_per_seed():
    a = np.asarray(render_image(3, 1, 4, (80, 60), seed=7))
    b = np.asarray(render_image(3, 1, 4, (80, 60), seed=7))
    c = np.asarray(render_image(3, 1, 4, (80, 60), seed=8))
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_photo_like_sizes_at_defaults():
    sizes = []
    for i in range(12):
        buf = io.BytesIO()
        render_image(i, i % 4, 4, (500, 375), seed=0).save(buf, "JPEG", quality=90)
        sizes.append(buf.tell())
    mean_kb = sum(sizes) / len(sizes) / 1000
    assert 95 <= mean_kb <= 125, mean_kb  # ImageNet's average is about 110 KB


def test_not_uniform_noise():
    img = np.asarray(render_image(0, 0, 2, (200, 150), seed=0), dtype=np.float32)
    # neighbouring pixels are strongly correlated, unlike uniform noise
    corr = np.corrcoef(img[:, :-1, 0].ravel(), img[:, 1:, 0].ravel())[0, 1]
    assert corr > 0.5


def test_layout_and_refusal(tmp_path):
    root = tmp_path / "ds"
    r = make_dataset(root, 10, 3, size=(32, 24), progress=False, workers=1)
    assert r["images"] == 10
    assert sorted(p.name for p in root.iterdir()) == ["class_000", "class_001", "class_002"]
    files = sorted(root.rglob("*.jpg"))
    assert len(files) == 10
    assert Image.open(files[0]).size == (32, 24)
    with pytest.raises(DatasetError, match="non-empty"):
        make_dataset(root, 4, 2, size=(32, 24), progress=False)
    make_dataset(root, 4, 2, size=(32, 24), progress=False, force=True, workers=1)
    assert len(list(root.rglob("*.jpg"))) == 4


def test_cli_errors_exit_2(tmp_path):
    (tmp_path / "x").write_text("")
    cmd = [sys.executable, "-m", "seneca._cli.main", "make-dataset", str(tmp_path)]
    r = subprocess.run([*cmd, "--images", "4", "--classes", "2"], capture_output=True, text=True)
    assert r.returncode == 2 and "non-empty" in r.stderr and str(tmp_path) in r.stderr
    r = subprocess.run(
        [*cmd, "--images", "4", "--classes", "9", "--force"], capture_output=True, text=True
    )
    assert r.returncode == 2 and "--classes" in r.stderr
