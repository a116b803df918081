"""make demo: both loaders, interleaved rounds, the ratio with its spread."""

import pytest

from seneca._bench.demo import _run, order_of, run_demo
from seneca_base.errors import ConfigError, SenecaError


@pytest.mark.slow
def test_demo_reports_counted_rows_and_the_ratio(tiny_dataset, capfd):
    ratios = run_demo(str(tiny_dataset), iterations=2, rounds=1)
    out, err = capfd.readouterr()  # (the jobs' processes write to the same descriptors)
    assert "Warning" not in err  # the demo's own settings warn about nothing
    assert len(ratios) == 1 and ratios[0] > 0
    done = [line.split(":")[0] for line in out.splitlines() if line.startswith("round 1, ")]
    assert done == ["round 1, pytorch-tuned", "round 1, seneca"]
    rows = [line.split() for line in out.splitlines() if line.split()[:1] == ["1"]]
    assert len(rows) == 4  # 2 loaders x 2 jobs, each with its counted decodes
    decodes = {(r[1], r[2]): float(r[-1]) for r in rows}
    # DataLoader decodes every sample it serves; Seneca's jobs share decodes (a job may even be
    # served only copies the other made), so only their sum must be more than none
    assert decodes[("pytorch-tuned", "0")] >= 1.0 and decodes[("pytorch-tuned", "1")] >= 1.0
    assert decodes[("seneca", "0")] + decodes[("seneca", "1")] > 0
    assert f"median {ratios[0]:.2f}x, range {ratios[0]:.2f}-{ratios[0]:.2f}x" in out


def test_rounds_alternate_which_loader_goes_first():
    assert order_of(1) == ("pytorch-tuned", "seneca")
    assert order_of(2) == ("seneca", "pytorch-tuned")
    assert order_of(3) == order_of(1)


def test_demo_options_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="--rounds"):
        run_demo(str(tmp_path), rounds=0)


def test_a_job_that_fails_ends_the_demo_with_its_error(tmp_path):
    """A job that cannot train (here: no image decodes) ends the demo with its error; the
    other job stops waiting for it."""
    (tmp_path / "cls").mkdir()
    for k in range(4):
        (tmp_path / "cls" / f"{k}.jpg").write_bytes(b"not a JPEG")
    with pytest.raises(SenecaError, match="demo pytorch-tuned failed in a process"):
        _run("pytorch-tuned", str(tmp_path), 2, "")
