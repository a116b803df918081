"""Cluster spec validation and the ``mdp`` command line (exit codes, JSON, files, plots)."""

import json
import subprocess
import sys
import tomllib

import pytest
from helpers.mdp_ref import REF

from mdp.spec import example_names, load_spec, parse_spec, spec_toml
from seneca._cli.mdp import main
from seneca_base.errors import SpecError


def write_spec(tmp_path, data=None, text=None, name="spec.toml"):
    path = tmp_path / name
    if text is None:
        lines = []
        for section, body in (data or REF).items():
            lines.append(f"[{section}]")
            for key, value in body.items():
                v = str(value).lower() if isinstance(value, bool) else repr(value)
                lines.append(f"{key} = {v}")
        text = "\n".join(lines) + "\n"
    path.write_text(text)
    return path


def changed(section, key, value=None, drop=False):
    data = {s: dict(v) for s, v in REF.items()}
    if drop:
        del data[section][key]
    else:
        data.setdefault(section, {})[key] = value
    return data


# -- spec validation ------------------------------------------------------------------------


def test_examples_load_with_the_paper_values():
    assert example_names() == ["aws-p3.8xlarge", "azure-nc96ads-v4", "inhouse", "inhouse-x2"]
    azure = load_spec("azure-nc96ads-v4")
    assert (azure.gpu_samples_per_s, azure.decode_augment_samples_per_s) == (14301, 9783)
    assert (azure.augment_samples_per_s, azure.nic_gbit_per_s) == (12930, 80)
    assert (azure.pcie_gbyte_per_s, azure.cache_gbit_per_s) == (64, 30)
    assert (azure.storage_mbyte_per_s, azure.cache_gb, azure.sample_kb) == (250, 64, 114)
    assert azure.inflation == 5.12 and azure.gpus_per_node == 4
    assert load_spec("inhouse-x2").nodes == 2
    assert load_spec("aws-p3.8xlarge").intra_node_nvlink is True


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (changed("dataset", "samples", drop=True), r"\[dataset\] samples: missing"),
        (changed("node", "gpu_samples_per_s", drop=True), r"\[node\] gpu_samples_per_s: missing"),
        (changed("cache", "size", 1), r"\[cache\] size: unknown key"),
        (changed("gpu", "count", 1), r"unknown section \[gpu\]"),
        (changed("cluster", "nodes", 1.5), r"\[cluster\] nodes: expected an integer"),
        (changed("cluster", "nodes", True), r"\[cluster\] nodes: expected an integer"),
        (changed("node", "nic_gbit_per_s", "10"), r"\[node\] nic_gbit_per_s: expected a number"),
        (changed("cluster", "intra_node_nvlink", 1), r"intra_node_nvlink: expected true or false"),
        (changed("cache", "size_gb", 0), r"\[cache\] size_gb: must be positive"),
        (changed("dataset", "inflation", -5.12), r"\[dataset\] inflation: must be positive"),
        (changed("model", "batch_size", 0), r"\[model\] batch_size: must be positive"),
        (
            changed("cache", "size_gb", float("inf")),
            r"size_gb: must be positive and finite, got inf",
        ),
    ],
)
def test_bad_specs_name_the_file_and_key(tmp_path, data, message):
    path = write_spec(tmp_path, data)
    with pytest.raises(SpecError, match=message) as err:
        load_spec(path)
    assert str(path) in str(err.value)


def test_nvlink_flags_are_optional():
    spec = parse_spec(REF, "ref")
    assert spec.intra_node_nvlink is False and spec.inter_node_nvlink is False


def test_bad_files(tmp_path):
    with pytest.raises(SpecError, match="no such file"):
        load_spec(tmp_path / "missing.toml")
    with pytest.raises(SpecError, match="not valid TOML"):
        load_spec(write_spec(tmp_path, text="[cluster\nnodes = 1\n"))


def test_spec_toml_round_trips_with_notes():
    spec = parse_spec(REF, "ref")
    text = spec_toml(spec, {"node.gpu_samples_per_s": "default"}, header="made by a test")
    assert text.startswith("# made by a test\n")
    assert "gpu_samples_per_s = 5000.0" in text and "# T_GPU  default" in text
    again = parse_spec(tomllib.loads(text), "again")
    assert again.as_toml_dict() == spec.as_toml_dict()


# -- the command line ---------------------------------------------------------------------


def test_plan_table(capsys):
    assert main(["plan", "inhouse-x2", "--model", "paper"]) == 0
    out = capsys.readouterr().out
    assert "split E-D-A      100-0-0" in out
    assert "cache bandwidth" in out and "CPU decode+augment" in out
    for tier in ("augmented", "decoded", "encoded", "storage"):
        assert f"\n{tier} " in out


def test_plan_json_and_out_file(tmp_path, capsys):
    out_file = tmp_path / "plan.json"
    assert main(["plan", "aws-p3.8xlarge", "--json", "--out", str(out_file)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert json.loads(out_file.read_text()) == printed
    assert set(printed) >= {"split", "throughput", "tiers"}
    assert sum(printed["split"].values()) == 100
    assert set(printed["tiers"]["storage"]) == {"dsi", "samples", "bytes", "bound"}


def test_plan_shared_model_names_the_bound(capsys):
    assert main(["plan", "inhouse", "--model", "shared", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"] == "shared" and data["bound"] in (
        "cache",
        "nic",
        "pcie",
        "gpu",
        "cpu",
        "storage",
    )


def test_predict(capsys):
    assert main(["predict", "inhouse", "--split", "58-42-0", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["split"] == {"encoded": 58, "decoded": 42, "augmented": 0}


def test_sweep_table_and_plot(tmp_path, capsys):
    png = tmp_path / "sweep.png"
    argv = ["sweep", "azure-nc96ads-v4", "--param", "cache.size_gb", "--values", "16,64,400"]
    assert main([*argv, "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line[:3] in ("16 ", "64 ", "400")]
    assert len(rows) == 3
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["value"] for d in data] == [16.0, 64.0, 400.0]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["plan", "no-such-spec.toml"], "no such file, and no example spec"),
        (["predict", "inhouse", "--split", "50-50"], "--split: expected E-D-A"),
        (["predict", "inhouse", "--split", "50-30-30"], "sum to 100"),
        (["sweep", "inhouse", "--param", "node.cpus", "--values", "1"], "unknown key"),
        (["sweep", "inhouse", "--param", "cluster.nodes", "--values", "1,,2"], "--values"),
        (["sweep", "inhouse", "--param", "cluster.nodes", "--values", "0"], "must be positive"),
        (["plan", "inhouse", "--tolerance", "2"], "--tolerance"),
        (["plan", "inhouse", "--out", "/nonexistent-dir/plan.json"], "--out"),
    ],
)
def test_errors_exit_2_with_a_message(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"mdp {argv[0]}: error:") and message in err


def test_bad_spec_file_exits_2_naming_file_and_key(tmp_path, capsys):
    path = write_spec(tmp_path, changed("dataset", "sample_kb", -1))
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "[dataset] sample_kb: must be positive" in err


def test_console_entry_point_exit_status(tmp_path):
    bad = write_spec(tmp_path, changed("cluster", "gpus", 2))
    proc = subprocess.run(
        [sys.executable, "-m", "seneca._cli.mdp", "plan", str(bad)], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "[cluster] gpus: unknown key" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "seneca._cli.mdp", "plan"], capture_output=True)
    assert proc.returncode == 2  # argparse usage error


def test_examples_command(capsys):
    assert main(["examples"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in example_names())


def test_mdp_imports_no_torch_or_redis():
    code = (
        "import sys, mdp, seneca._cli.mdp, mdp.model, mdp.planner, mdp.report, mdp.spec\n"
        "bad = [m for m in ('torch', 'redis', 'PIL') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_bench_prints_timings_against_the_goal(capsys):
    assert main(["bench", "inhouse", "--repeat", "2"]) == 0
    out = capsys.readouterr().out
    assert "inhouse" in out and "paper" in out and "shared" in out
    assert "x the 1 s goal" in out
    assert main(["bench", "--repeat", "0"]) == 2
