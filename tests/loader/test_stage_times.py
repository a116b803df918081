"""SENECA_TIMELINE: a loader with workers records when each batch passed each stage of its
training process, and the waits between them add up; on a real redis-server."""

import json

from helpers.indexed import indexed

from seneca import SenecaLoader
from seneca.loader.timeline import INTERVALS, STAGES, intervals, main, summary
from seneca.pipeline.transforms import default_train_transform


def test_each_batch_passes_every_stage_in_order(tiny_dataset, redis_url, tmp_path, monkeypatch):
    monkeypatch.setenv("SENECA_TIMELINE", str(tmp_path / "tl"))
    ds = indexed(tiny_dataset)
    ds.transform = default_train_transform(16)  # uint8 rows: batches made in slots
    loader = SenecaLoader(
        ds, batch_size=8, shuffle=True, num_workers=2, cache=redis_url,
        cache_size="20MB", job="timed",
    )  # fmt: skip
    for _ in range(2):
        for _ in loader:
            pass
    files = list((tmp_path / "tl").glob("timed-*.jsonl"))
    assert len(files) == 1
    lines = [json.loads(line) for line in files[0].read_text().splitlines()]
    assert len(lines) == 2 and all(line["job"] == "timed" for line in lines)  # one per epoch
    for line in lines:
        batches = line["batches"]
        assert len(batches) == 48 // 8  # a ticket per batch
        for times in batches:
            assert list(times) == list(STAGES)  # every stage, in order
            assert [times[s] for s in STAGES] == sorted(times[s] for s in STAGES)
        waits = intervals(batches)
        counts = {name: len(values) for name, values in waits.items()}
        assert counts == {name: 5 if name.startswith("loop") else 6 for name, _, _ in INTERVALS}
        assert all(w >= 0 for values in waits.values() for w in values)
    got = summary(files[0])
    assert got["merge"][2] == 2 * 5  # first batches left out
    assert set(got) == {name for name, _, _ in INTERVALS}


def test_no_file_without_the_variable(tiny_dataset, redis_url, tmp_path, monkeypatch):
    monkeypatch.delenv("SENECA_TIMELINE", raising=False)
    monkeypatch.chdir(tmp_path)
    loader = SenecaLoader(
        indexed(tiny_dataset), batch_size=8, num_workers=1, cache=redis_url, cache_size="20MB"
    )
    assert sum(len(y) for _, y in loader) == 48
    assert not list(tmp_path.rglob("*.jsonl"))


def test_the_summary_prints_each_wait(tmp_path, capsys):
    times = {stage: float(k) for k, stage in enumerate(STAGES)}
    line = {"job": "j", "pid": 1, "batches": [times, times, times]}
    (tmp_path / "j-1.jsonl").write_text(json.dumps(line) + "\n")
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "j-1.jsonl" in out and "1000.0 /   1000.0 (2)" in out  # 1 s between stages
    assert main([str(tmp_path / "none")]) == 2
