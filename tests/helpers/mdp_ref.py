"""A reference cluster spec with round numbers, shared by the mdp tests (values: see
test_mdp_model.py)."""

from mdp.spec import parse_spec

REF = {
    "cluster": {"nodes": 2, "gpus_per_node": 4},
    "node": {
        "gpu_samples_per_s": 5000,
        "decode_augment_samples_per_s": 1000,
        "augment_samples_per_s": 3000,
        "nic_gbit_per_s": 8,
        "pcie_gbyte_per_s": 2,
    },
    "cache": {"size_gb": 1, "bandwidth_gbit_per_s": 8},
    "storage": {"bandwidth_mbyte_per_s": 100},
    "dataset": {"samples": 10_000, "sample_kb": 100, "inflation": 4},
    "model": {"size_mb": 6.4, "batch_size": 32},
}


def ref_spec(**changes):
    data = {s: dict(v) for s, v in REF.items()}
    for name, value in changes.items():
        section, key = name.split("__")
        data[section][key] = value
    return parse_spec(data, "ref")
