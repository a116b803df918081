"""``seneca validate-model`` on a tiny dataset: six splits per size, both models compared."""

import json
import math

import pytest

from mdp.spec import example_text
from seneca._bench.validate import SPLITS, pearson, summarise
from seneca._cli.main import main


def test_pearson():
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(pearson([1, 1, 1], [1, 2, 3]))


def _point(size, split, measured, paper, shared, planned=False):
    return {
        "size_ratio": size,
        "split": split,
        "measured": measured,
        "paper": paper,
        "shared": shared,
        "planned": planned,
    }


def test_summarise_per_split_lines_and_planned_split():
    points = []
    for size, scale in ((1, 3.0), (2, 2.0), (4, 1.0)):
        for k, split in enumerate(SPLITS):
            text = "-".join(map(str, split))
            measured = 100 * scale + k
            # paper tracks every line; shared is flat for 100-0-0 and reversed for 0-100-0
            shared = {0: 500.0, 1: 400 - measured}.get(k, measured * 1.1)
            points.append(
                _point(size, text, measured, measured * 2, shared, planned=k == 0 and size != 4)
            )
    points.append(_point(4, "70-0-30", 50.0, 60.0, 60.0, planned=True))
    out = summarise(points)
    assert out["paper"]["pearson_r_per_split"] == pytest.approx(
        dict.fromkeys(("-".join(map(str, s)) for s in SPLITS), 1.0)
    )
    shared = out["shared"]["pearson_r_per_split"]
    assert math.isnan(shared["100-0-0"]) and shared["0-100-0"] == pytest.approx(-1.0)
    assert out["paper"]["mape"] == pytest.approx(100.0)  # the extra planned split is left out
    # size 1: 100-0-0 is planned, 300 of the best 305; size 4: 70-0-30 is planned (a 7th point)
    assert out["planned_vs_best"]["1"] == pytest.approx(300 / 305)
    assert out["planned_vs_best"]["4"] == pytest.approx(50 / 105)


@pytest.mark.bench
def test_validate_model_writes_points(tiny_dataset, tmp_path, capsys):
    spec = tmp_path / "spec.toml"
    spec.write_text(example_text("inhouse"))
    out = tmp_path / "val"
    argv = ["validate-model", "--data", str(tiny_dataset), "--spec", str(spec), "--sizes", "1"]
    argv += ["--jobs", "1", "--epochs", "2", "--crop", "16", "--workers", "0", "--out", str(out)]
    argv[-2:-2] = ["--storage-mbps", "50", "--splits", "100-0-0,0-50-50"]  # two of the six
    assert main(argv) == 0
    result = json.loads((out / "points.json").read_text())
    two = ["100-0-0", "0-50-50"]
    assert [p["split"] for p in result["points"]][:2] == two
    planned = [p for p in result["points"] if p["planned"]]
    assert result["storage_mbps"] == 50 and result["loader"] == "mdp"
    assert len(planned) == 1 and result["planned_vs_best"]["1.0"] > 0
    assert len(result["points"]) == 2 + (planned[0]["split"] not in two)
    six = {"-".join(map(str, s)) for s in SPLITS}  # the planned split counts where it is one
    lines = set(two) | ({planned[0]["split"]} & six)
    assert set(result["shared"]["pearson_r_per_split"]) == lines
    assert all(p["measured"] > 0 and p["paper"] > 0 and p["shared"] > 0 for p in result["points"])
    assert {"pearson_r", "mape"} <= set(result["paper"]) and result["shared"]["mape"] >= 0
    assert (out / "validation.png").read_bytes()[:4] == b"\x89PNG"
    assert "Pearson r" in capsys.readouterr().out
    assert main([*argv[:-2], "--out", str(out), "--sizes", "0"]) == 2
    assert main([*argv, "--loader", "pytorch"]) == 2
    assert "--loader" in capsys.readouterr().err
    assert main([*argv, "--splits", "100-0-0,50-50"]) == 2
    assert "--splits: expected E-D-A" in capsys.readouterr().err


def test_each_size_measures_the_six_splits_and_the_planned_one():
    from mdp.planner import DEFAULT_MODEL, plan
    from mdp.spec import load_spec
    from seneca._bench.validate import _runs

    base = load_spec("inhouse")
    runs = _runs(base, (0.5, 2.0), 10**9, SPLITS)
    for ratio in (0.5, 2.0):
        here = [r for r in runs if r[0] == ratio]
        assert [r[2] for r in here][:6] == list(SPLITS)
        planned = plan(here[0][1], DEFAULT_MODEL).split.percent
        assert [r[2] for r in here if r[3]] == [planned]  # marked once, added if not a six
        assert len(here) == 6 + (planned not in SPLITS)
        assert here[0][1].cache_gb == pytest.approx(1 / ratio)
