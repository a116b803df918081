"""``mdp profile`` on a tiny dataset against real Redis servers writes a valid spec."""

import tomllib

import pytest

from mdp.spec import FIELDS, load_spec
from seneca import defaults
from seneca._bench.profile import run_profile
from seneca._cli.mdp import main

MEASURED = {
    "node.decode_augment_samples_per_s",
    "node.augment_samples_per_s",
    "cache.bandwidth_gbit_per_s",
    "storage.bandwidth_mbyte_per_s",
    "dataset.samples",
    "dataset.sample_kb",
    "dataset.inflation",
    "dataset.augmented_ratio",
    "cache.colocated",
    "node.cpu_cores",
}


@pytest.mark.slow
def test_profile_command_with_cache_and_base(tiny_dataset, redis_proc, tmp_path, capsys):
    redis_proc.client.config_set("maxmemory", 50_000_000)
    out = tmp_path / "measured.toml"
    argv = ["profile", "--data", str(tiny_dataset), "--cache", redis_proc.url]
    argv += ["--workers", "2", "--seconds", "0.3", "--sample-count", "12"]
    argv += ["--base", "azure-nc96ads-v4", "--out", str(out)]
    assert main(argv) == 0
    spec = load_spec(out)  # the written file is a valid spec
    files = sorted(p for p in tiny_dataset.rglob("*.jpg"))
    assert spec.samples == len(files) == 48
    mean_kb = sum(p.stat().st_size for p in files) / len(files) / 1e3
    assert spec.sample_kb == pytest.approx(mean_kb, rel=1e-3)
    assert 1 < spec.inflation < 100  # 64x48 RGB = 9216 B vs a few KB of JPEG
    assert spec.augmented_ratio == pytest.approx(224 * 224 / (64 * 48), rel=1e-3)
    assert spec.cache_colocated  # the test's redis-server runs on this machine
    assert spec.cpu_cores == 2  # --workers
    assert spec.decode_augment_samples_per_s > 0 and spec.augment_samples_per_s > 0
    assert spec.cache_gbit_per_s > 0 and spec.storage_mbyte_per_s > 0
    assert spec.cache_gb == pytest.approx(0.05)  # the server's maxmemory
    # values it cannot measure come from --base, and the file says so key by key
    azure = load_spec("azure-nc96ads-v4")
    assert spec.gpu_samples_per_s == azure.gpu_samples_per_s and spec.gpus_per_node == 4
    text = out.read_text()
    lines = {line.split("=")[0].strip(): line for line in text.splitlines() if "=" in line}
    assert "measured" in lines["decode_augment_samples_per_s"]
    assert "from azure-nc96ads-v4" in lines["gpu_samples_per_s"]
    assert "maxmemory" in lines["size_gb"]
    printed = capsys.readouterr().out
    assert f"wrote {out}" in printed
    assert not redis_proc.client.keys("seneca:profile:*")  # measurement keys are removed
    tomllib.loads(text)


@pytest.mark.slow
def test_profile_defaults_and_embedded_cache(tiny_dataset):
    result = run_profile(str(tiny_dataset), workers=1, seconds=0.1, sample_count=4, progress=False)
    for f in FIELDS:
        source = result.sources[f.name]
        if f.name in MEASURED:
            assert source.startswith("measured"), f.name
            if f.name == "cache.colocated":
                assert result.spec.get(f.name) is True  # the embedded cache
        else:
            assert source.startswith("default"), f.name
            assert result.spec.get(f.name) == defaults.PROFILE_DEFAULTS[f.name]


def test_profile_errors_exit_2(tmp_path, capsys):
    out = tmp_path / "x.toml"
    assert main(["profile", "--data", str(tmp_path / "none"), "--out", str(out)]) == 2
    assert "dataset directory not found" in capsys.readouterr().err
    assert not out.exists()
    argv = ["profile", "--data", str(tmp_path), "--out", str(out), "--workers", "0"]
    assert main(argv) == 2
    assert "--workers" in capsys.readouterr().err
