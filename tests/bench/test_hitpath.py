"""seneca hit-path: the loader's cache-hit path and raw MGET measured side by side."""

import pytest

from seneca.bench.hitpath import format_hit_path, run_hit_path
from seneca.cli.main import main
from seneca_base.errors import ConfigError


def test_rates_side_by_side(tiny_dataset, redis_url, tmp_path):
    r = run_hit_path(
        str(tiny_dataset),
        samples=24,
        batch_size=8,
        crop=16,
        repeats=2,
        cache=redis_url,
        out=str(tmp_path),
        passes=2,
    )
    assert set(r["best_bytes_per_s"]) == {"redis-py MGET", "socket MGET", "loader"}
    assert all(len(v) == 4 and min(v) > 0 for v in r["rounds"].values())
    turns = zip(r["rounds"]["loader"], r["rounds"]["redis-py MGET"], strict=True)
    ratios = sorted(x / y for x, y in turns)
    assert r["median_turn_loader_vs_redis_py"] == pytest.approx((ratios[1] + ratios[2]) / 2)
    assert r["loader_vs_redis_py"] == pytest.approx(
        r["best_bytes_per_s"]["loader"] / r["best_bytes_per_s"]["redis-py MGET"]
    )
    assert (tmp_path / "hit_path.json").exists()
    assert "| loader |" in format_hit_path(r)


def test_cli_and_errors(tiny_dataset, redis_url, capsys):
    assert (
        main(
            [
                "hit-path",
                "--data",
                str(tiny_dataset),
                "--samples",
                "16",
                "--batch-size",
                "8",
                "--crop",
                "16",
                "--repeats",
                "1",
                "--cache",
                redis_url,
            ]
        )
        == 0
    )
    assert "socket MGET" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="--samples: 4800"):
        run_hit_path(str(tiny_dataset), samples=4800, cache=redis_url)
    assert (
        main(["hit-path", "--data", str(tiny_dataset), "--samples", "4", "--cache", redis_url]) == 2
    )
    assert "--samples must be" in capsys.readouterr().err
