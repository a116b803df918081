"""A real run's decode ceiling: the jobs' timelines merged into the run's calls, the cache's
capacity in copies that save a decode, and ods.ceiling applied to them."""

import json

import pytest

from ods.ceiling import ceiling
from ods.schedule import Step
from seneca._bench.ceiling import capacity, decode_ceiling, run_steps, value_bytes


def _job(path, epochs):
    """A job's timeline file: per epoch, the times its batches were decided (and the sampler's
    last ask, which decides nothing)."""
    lines = []
    for times in epochs:
        batches = [{"asked": t - 0.1, "decided": t} for t in times] + [{"asked": 99.0}]
        lines.append(json.dumps({"job": path.stem, "pid": 1, "batches": batches}) + "\n")
    path.write_text("".join(lines))


def test_the_jobs_calls_in_the_order_they_were_decided(tmp_path):
    _job(tmp_path / "a-1.jsonl", [[1.0, 2.0, 3.0], [7.0, 8.0, 9.0]])
    _job(tmp_path / "b-2.jsonl", [[1.5, 2.5, 3.5], [4.0, 5.0, 6.0]])
    steps = run_steps(tmp_path, samples=10, batch=4)  # batches of 4, 4 and the last 2
    assert steps == [
        Step(0, 0, 4), Step(1, 0, 4), Step(0, 0, 4), Step(1, 0, 4), Step(0, 0, 2),
        Step(1, 0, 2), Step(1, 1, 4), Step(1, 1, 4), Step(1, 1, 2), Step(0, 1, 4),
        Step(0, 1, 4), Step(0, 1, 2),
    ]  # fmt: skip
    for copies in (0, 4, 10):
        got = decode_ceiling(tmp_path, 10, 4, 2, copies)
        assert got["decodes_per_sample_epoch"] == ceiling(steps, copies).loads / 20
        assert got["jobs"] == 2 and got["calls"] == 12 and got["copies"] == copies
    assert decode_ceiling(tmp_path / "none", 10, 4, 2, 4) is None


def test_with_crops_only_the_busiest_job_decodes_what_it_is_served(tmp_path):
    """A crop serves a job once and never its maker: however large the cache, the run decodes
    at least what one job is served (here 2 epochs of 10: 1.0 per sample-epoch)."""
    _job(tmp_path / "a-1.jsonl", [[1.0, 2.0, 3.0], [7.0, 8.0, 9.0]])
    _job(tmp_path / "b-2.jsonl", [[1.5, 2.5, 3.5], [4.0, 5.0, 6.0]])
    steps = run_steps(tmp_path, samples=10, batch=4)
    assert ceiling(steps, 10).loads / 20 < 1  # any copy for any job: below one decode
    got = decode_ceiling(tmp_path, 10, 4, 2, 10, crops_only=True)
    assert got["decodes_per_sample_epoch"] == 1.0 and got["crops_only"]
    few = decode_ceiling(tmp_path, 10, 4, 2, 0, crops_only=True)  # no room: the larger bound
    assert few["decodes_per_sample_epoch"] == ceiling(steps, 0).loads / 20 > 1.0


def test_the_copies_that_save_a_decode(tiny_dataset):
    sizes = value_bytes(str(tiny_dataset), 16)
    assert sizes == {"decoded": 64 * 48 * 3, "augmented": 16 * 16 * 3}
    split = {"encoded": 0.5, "decoded": 0.25, "augmented": 0.25}
    assert capacity(1_000_000, split, sizes) == int(250_000 / 9216 + 250_000 / 768)
    assert capacity(1_000_000, {"encoded": 1.0}, sizes) == 0  # encoded copies still decode


@pytest.mark.parametrize("copies", [0, 100])
def test_a_run_with_no_batch_has_no_ceiling(tmp_path, copies):
    (tmp_path / "a-1.jsonl").write_text(json.dumps({"batches": [{"asked": 1.0}]}) + "\n")
    assert decode_ceiling(tmp_path, 10, 4, 1, copies) is None
