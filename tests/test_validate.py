"""``seneca validate-model`` on a tiny dataset: six splits per size, both models compared."""

import json
import math

import pytest

from mdp.spec import example_text
from seneca.cli import main
from seneca.validate import SPLITS, pearson


def test_pearson():
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(pearson([1, 1, 1], [1, 2, 3]))


def test_validate_model_writes_points(tiny_dataset, tmp_path, capsys):
    spec = tmp_path / "spec.toml"
    spec.write_text(example_text("inhouse"))
    out = tmp_path / "val"
    argv = ["validate-model", "--data", str(tiny_dataset), "--spec", str(spec), "--sizes", "1"]
    argv += ["--jobs", "1", "--epochs", "2", "--crop", "16", "--workers", "0", "--out", str(out)]
    assert main(argv) == 0
    result = json.loads((out / "points.json").read_text())
    assert [p["split"] for p in result["points"]] == ["-".join(map(str, s)) for s in SPLITS]
    assert all(p["measured"] > 0 and p["paper"] > 0 and p["shared"] > 0 for p in result["points"])
    assert {"pearson_r", "mape"} <= set(result["paper"]) and result["shared"]["mape"] >= 0
    assert (out / "validation.png").read_bytes()[:4] == b"\x89PNG"
    assert "Pearson r" in capsys.readouterr().out
    assert main([*argv[:-2], "--out", str(out), "--sizes", "0"]) == 2
