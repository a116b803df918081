"""seneca bench-timeline: a job joins at an epoch of the first, the first leaves; the plans each
job used and the throughput over time are recorded and plotted; on a real redis-server."""

import json

import pytest

from seneca._bench.join_leave import throughput_bins
from seneca._cli.main import main


def test_throughput_is_binned_per_job_and_in_all():
    events = [("batch", "a", 10.2, 8), ("batch", "a", 10.9, 8), ("batch", "b", 11.5, 4),
              ("epoch", "b", 11.0, 0), ("batch", "a", 12.1, 8)]  # fmt: skip
    bins = throughput_bins(events, start=10.0)
    assert bins["t"] == [0.5, 1.5, 2.5]
    assert bins["a"] == [16.0, 0.0, 8.0] and bins["b"] == [0.0, 4.0, 0.0]
    assert bins["all"] == [16.0, 4.0, 8.0]


def test_option_errors_name_the_option(tiny_dataset, tmp_path, capsys):
    base = ["bench-timeline", "--data", str(tiny_dataset), "--out", str(tmp_path)]
    assert main([*base, "--epochs", "3", "--join-at", "3"]) == 2
    assert "--join-at: out of range" in capsys.readouterr().err


@pytest.mark.slow
def test_a_job_joins_and_the_first_leaves(tiny_dataset, redis_url, tmp_path, capsys):
    out = tmp_path / "timeline"
    argv = ["bench-timeline", "--data", str(tiny_dataset), "--epochs", "3", "--join-at", "1"]
    argv += ["--batch-size", "8", "--cache", redis_url, "--out", str(out)]
    assert main(argv) == 0
    result = json.loads((out / "timeline.json").read_text())
    events = result["events"]
    starts = {(e[1], e[3]): e[2] for e in events if e[0] == "epoch"}
    done = {e[1]: e[2] for e in events if e[0] == "done"}
    assert sorted(starts) == [(j, k) for j in "ab" for k in range(3)]
    assert starts[("b", 0)] >= starts[("a", 1)]  # b joined when a started epoch 1
    assert done["a"] < done["b"]  # a left first: b trained on alone
    for job in "ab":  # every epoch of every job, every sample
        assert sum(e[3] for e in events if e[:2] == ["batch", job]) == 3 * 48
        plans = [e for e in events if e[:2] == ["plan", job]]
        assert plans and all(len(e[3].split("-")) == 3 for e in plans)
    assert next(e[6] for e in events if e[:2] == ["plan", "a"]) == 1  # a began alone
    assert sum(result["throughput"]["all"]) == pytest.approx(6 * 48)  # 1 s bins
    assert (out / "timeline.png").read_bytes()[:4] == b"\x89PNG"
    assert "job a: split" in capsys.readouterr().out
