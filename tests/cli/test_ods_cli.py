"""``ods simulate``: JSON shape, baselines, option errors."""

import json

import pytest

from ods.servertime import NOISE_NAME
from ods.simulate import SimConfig, simulate_baseline
from seneca._cli.ods import main
from seneca_base.errors import ConfigError


def test_simulate_json_with_compare(redis_url, capsys):
    argv = ["simulate", "--samples", "600", "--jobs", "3", "--cache-frac", "0.2", "--batch", "32"]
    assert main([*argv, "--cache", redis_url, "--compare", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert 0 < data["hit_rate"] <= 1
    assert data["served"] == 3 * 3 * 600  # every job, every epoch, every sample
    assert [r["loader"] for r in data["compare"]] == ["ods-paper", "random", "minio", "quiver"]
    assert data["ceiling"]["hit_rate"] >= data["hit_rate"]
    assert data["ceiling"]["storage_loads"] <= data["storage_loads"]
    assert data["decision_ms"]["p99"] >= data["decision_ms"]["p50"] > 0
    assert data["metadata_bytes"] > 0
    server = data["server_ms"]
    assert list(server)[-1] == NOISE_NAME  # the host's own spread, last
    assert server[NOISE_NAME]["calls"] == data["decision_ms"]["batches"] // 16
    assert server[NOISE_NAME]["max"] >= server[NOISE_NAME]["p50"] > 0
    # ODS shares what one job loads; a static cache serves only what it holds (~20%)
    assert data["hit_rate"] >= max(r["hit_rate"] for r in data["compare"])
    minio = next(r for r in data["compare"] if r["loader"] == "minio")
    assert minio["hit_rate"] < 0.3 < data["hit_rate"] - 0.3


def test_simulate_table_and_speeds(redis_url, capsys):
    argv = ["simulate", "--samples", "300", "--jobs", "2", "--cache-frac", "0.5"]
    argv += ["--speeds", "1,3", "--starts", "0,0.5", "--policy", "paper", "--compare"]
    assert main([*argv, "--cache", redis_url]) == 0
    out = capsys.readouterr().out
    assert "speeds 1,3, starts 0,0.5" in out
    rows: dict[str, list[str]] = {}
    for line in out.splitlines():  # the table's rows come first
        rows.setdefault(line.split()[0], line.split())
    assert {"ods-paper", "ods-seneca", "ceiling"} <= set(rows)
    # the paper policy's refills are loads: it loads more than Seneca's, which loads no less
    # than the ceiling (a row ends: loads, per sample, p50 / p99, metadata)
    loads = {k: int(rows[k][-7].replace(",", "")) for k in ("ods-paper", "ods-seneca")}
    ceiling = int(rows["ceiling"][3].replace(",", ""))
    assert loads["ods-paper"] > loads["ods-seneca"] >= ceiling
    assert "ods-paper loads:" in out and "prefetched" in out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--speeds", "1,2"], "--speeds: expected 3 values"),
        (["--starts", "0,1"], "--starts: expected 3 values"),
        (["--starts", "0,-1,0"], "--starts: must not be negative"),
        (["--cache-frac", "1.5"], "--cache-frac"),
        (["--max-batches", "0"], "--max-batches"),
    ],
)
def test_option_errors_exit_2(redis_url, capsys, extra, message):
    argv = ["simulate", "--samples", "100", "--jobs", "3", "--cache-frac", "0.2"]
    assert main([*argv, "--cache", redis_url, *extra]) == 2
    assert message in capsys.readouterr().err


def test_unreachable_cache_exits_2(capsys, tmp_path):
    argv = ["simulate", "--samples", "100", "--jobs", "1", "--cache-frac", "0.2"]
    assert main([*argv, "--cache", f"unix://{tmp_path}/none.sock"]) == 2
    assert "unreachable" in capsys.readouterr().err


def test_baselines():
    # one job, static cache of 200: epoch 1 fills it (no hits), epoch 2 hits exactly 200
    cfg = SimConfig(samples=500, jobs=1, cache_frac=0.4, batch=25, epochs=2)
    minio = simulate_baseline("minio", cfg)
    assert minio["served"] == 1000 and minio["hit_rate"] == 0.2
    assert minio["storage_loads"] == 800
    with pytest.raises(ConfigError, match="baseline"):
        simulate_baseline("dali", cfg)
