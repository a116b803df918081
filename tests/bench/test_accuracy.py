"""``seneca accuracy`` on the scikit-learn digits: the data, and a short run of both loaders."""

import json

import pytest

from seneca.bench.accuracy import write_digits
from seneca.cli.main import main


def test_digits_written_as_imagefolder(tmp_path):
    counts = write_digits(tmp_path)
    assert counts["train"] + counts["test"] == 1797
    assert 0.78 < counts["train"] / 1797 < 0.82
    assert sorted(p.name for p in (tmp_path / "train").iterdir()) == [str(d) for d in range(10)]
    assert all(any((tmp_path / "test" / str(d)).iterdir()) for d in range(10))


@pytest.mark.slow
def test_short_accuracy_run(tmp_path, redis_url, capsys):
    out = tmp_path / "acc.json"
    argv = ["accuracy", "--data", str(tmp_path / "digits"), "--jobs", "2", "--epochs", "2"]
    assert main([*argv, "--cache", redis_url, "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    for kind in ("pytorch", "seneca"):
        assert len(result[kind]["accuracies"]) == 2
        assert min(result[kind]["accuracies"]) > 0.5  # far above chance (0.1) after 2 epochs
    assert "difference:" in capsys.readouterr().out
