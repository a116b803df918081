"""seneca hit-path: the loader's cache-hit path and raw MGET measured side by side."""

from collections import Counter

import pytest
import redis
import torch

from seneca._bench.hitpath import _dataset, _fill, _loader, format_hit_path, run_hit_path
from seneca._cli.main import main
from seneca.pipeline.codec import decode
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
    turns = zip(r["rounds"]["loader"], r["rounds"]["socket MGET"], strict=True)
    ratios = sorted(x / y for x, y in turns)
    assert r["median_turn_loader_vs_socket"] == pytest.approx((ratios[1] + ratios[2]) / 2)
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


def test_the_loader_reads_exactly_the_cached_bytes(tiny_dataset, redis_url):
    """Every batch row of a hits-only epoch is the cached value of its sample, with its label."""
    ds = _dataset(str(tiny_dataset), 24, 16)
    size = 24 * (3 * 16 * 16 + 4096)
    store = _fill(ds, redis_url, 0, 8, size)
    client = redis.Redis.from_url(redis_url)
    values = client.mget([store.value_key("augmented", i) for i in range(24)])
    client.close()
    cached = Counter()
    for i, v in enumerate(values):
        image = torch.as_tensor(decode(v, image_tensor=True)).contiguous()
        cached[(ds.targets[i], image.numpy().tobytes())] += 1
    assert len(cached) == 24  # 24 different crops
    store.join("hit-b0")
    loader = _loader(ds, redis_url, "hit-check", 8, size)
    read = Counter()
    for x, y in loader:
        for row, label in zip(x, y, strict=True):
            read[(int(label), row.contiguous().numpy().tobytes())] += 1
    assert loader.stats()["augmented"]["hits"] == 24
    assert read == cached
