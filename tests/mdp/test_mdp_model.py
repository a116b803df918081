"""Eq. 1-9 and the shared model against hand-computed cases.

The reference spec uses round numbers (SI units):
  n = 2 nodes, g = 4 GPUs, T_GPU = 5000, T_D+A = 1000, T_A = 3000 samples/s,
  B_NIC = 8 Gbit/s = 1e9 B/s, B_PCIe = 2e9 B/s, B_cache = 1e9 B/s, B_storage = 1e8 B/s,
  S_cache = 1e9 B, S_data = 1e5 B, M = 4 (tensor 4e5 B), N_total = 10,000,
  model 6.4 MB at batch 32: C_nw = 2(2-1)/2 x 6.4e6 / 32 = 2e5 B per sample,
  C_PCIe = 2(4-1)/4 x 6.4e6 / 32 = 3e5 B per sample.
"""

import dataclasses

import numpy as np
import pytest
from helpers.mdp_ref import ref_spec

from mdp.model import (
    Params,
    counts,
    dsi_augmented,
    dsi_decoded,
    dsi_encoded,
    dsi_storage,
    loader_counts,
    overall_paper,
    overall_shared,
    served,
    shared_demands,
)
from mdp.queueing import mva_throughput


@pytest.fixture
def p():
    return Params.from_spec(ref_spec())


def test_units_and_gradient_overheads(p):
    assert p.b_nic == 1e9 and p.b_cache == 1e9 and p.b_pcie == 2e9 and p.b_storage == 1e8
    assert p.s_cache == 1e9 and p.s_data == 1e5 and p.m == 4
    assert p.c_nw == pytest.approx(2e5) and p.c_pcie == pytest.approx(3e5)


def test_nvlink_zeroes_gradient_overheads():
    intra = Params.from_spec(ref_spec(cluster__intra_node_nvlink=True))
    assert intra.c_pcie == 0 and intra.c_nw == pytest.approx(2e5)
    inter = Params.from_spec(ref_spec(cluster__inter_node_nvlink=True))
    assert inter.c_pcie == 0 and inter.c_nw == 0
    single = Params.from_spec(ref_spec(cluster__nodes=1, cluster__gpus_per_node=1))
    assert single.c_pcie == 0 and single.c_nw == 0


def test_eq1_augmented(p):
    # cache 1e9/4e5 = 2500; NIC 2e9/6e5 = 3333; PCIe 4e9/7e5 = 5714; GPU 10000
    assert dsi_augmented(p) == (pytest.approx(2500), "cache")
    fast_cache = dataclasses.replace(p, b_cache=1e10)
    assert dsi_augmented(fast_cache) == (pytest.approx(2e9 / 6e5), "nic")
    no_grad = dataclasses.replace(p, b_cache=1e10, b_nic=1e10, c_pcie=0.0)
    assert dsi_augmented(no_grad) == (pytest.approx(10_000), "pcie")  # tie with GPU: PCIe first


def test_eq3_decoded(p):
    assert dsi_decoded(p) == (pytest.approx(2500), "cache")
    slow_cpu = dataclasses.replace(p, t_a=1000.0)
    assert dsi_decoded(slow_cpu) == (pytest.approx(2000), "cpu_augment")


def test_eq5_encoded(p):
    # cache 1e9/1e5 = 10000; NIC 2e9/3e5 = 6667; CPU 2 x 1000; PCIe 4e9/7e5 (decoded size)
    assert dsi_encoded(p) == (pytest.approx(2000), "cpu_decode_augment")
    fast_cpu = dataclasses.replace(p, t_da=1e6)
    assert dsi_encoded(fast_cpu) == (pytest.approx(4e9 / 7e5), "pcie")


def test_eq7_storage(p):
    assert dsi_storage(p) == (pytest.approx(1000), "storage")
    fast_storage = dataclasses.replace(p, b_storage=1e12)
    assert dsi_storage(fast_storage) == (pytest.approx(2000), "cpu_decode_augment")
    # As written, Eq. 7 keeps DSI_E's cache-bandwidth term.
    slow_cache = dataclasses.replace(p, b_cache=5e7, b_storage=1e12)
    assert dsi_storage(slow_cache) == (pytest.approx(500), "cache")


def test_eq2_4_6_8_large_dataset(p):
    n = counts(p, 0.5, 0.3, 0.2)
    assert float(n["augmented"]) == pytest.approx(500)  # 0.2e9 / 4e5
    assert float(n["decoded"]) == pytest.approx(750)  # 0.3e9 / 4e5
    assert float(n["encoded"]) == pytest.approx(5000)  # 0.5e9 / 1e5
    assert float(n["storage"]) == pytest.approx(3750)


def test_eq2_small_dataset_branch():
    p = Params.from_spec(ref_spec(dataset__samples=1000))
    n = counts(p, 0.0, 0.0, 1.0)  # room for 2500 tensors, 1000 samples
    assert [float(n[t]) for t in ("augmented", "decoded", "encoded", "storage")] == [1000, 0, 0, 0]


def test_eq4_small_dataset_branch():
    p = Params.from_spec(ref_spec(dataset__samples=1000))
    n = counts(p, 0.5, 0.3, 0.2)  # N_A = 500, N_D = min(1000 - 500, 750) = 500
    assert float(n["augmented"]) == 500 and float(n["decoded"]) == 500
    assert float(n["encoded"]) == 0 and float(n["storage"]) == 0


def test_eq6_small_dataset_branch():
    p = Params.from_spec(ref_spec(dataset__samples=3000))
    n = counts(p, 0.5, 0.3, 0.2)  # N_E = min(3000 - 1250, 5000) = 1750
    assert float(n["encoded"]) == pytest.approx(1750) and float(n["storage"]) == 0


def test_eq9_overall(p):
    n = counts(p, 0.5, 0.3, 0.2)
    # (500 x 2500 + 750 x 2500 + 5000 x 2000 + 3750 x 1000) / 10000
    assert float(overall_paper(p, n)) == pytest.approx(1687.5)


def test_loader_counts_keep_augmented_copies_besides_the_base_copies(p):
    n = {k: float(v) for k, v in loader_counts(p, 0.5, 0.3, 0.2).items()}
    # copies: 0.2 GB / 4e5; base: decoded 0.3 GB / 4e5, then encoded 0.5 GB / 1e5, the rest
    assert n == {"augmented": 500, "decoded": 750, "encoded": 5000, "storage": 4250}
    small = Params.from_spec(ref_spec(dataset__samples=1000))
    n = {k: float(v) for k, v in loader_counts(small, 0.5, 0.3, 0.2).items()}
    assert n == {"augmented": 500, "decoded": 750, "encoded": 250, "storage": 0}


def test_shared_model(p):
    # One job: no augmented hits; requests read the base copies.
    n = loader_counts(p, 0.5, 0.3, 0.2)  # base fractions D .075, E .5, S .425
    d = {k: float(v) for k, v in shared_demands(p, n).items()}
    assert d["cache"] == pytest.approx((0.075 * 4e5 + 0.5 * 1e5) / 1e9)
    assert d["nic"] == pytest.approx((0.075 * 4e5 + 0.925 * 1e5 + 2e5) / 2e9)
    assert d["pcie"] == pytest.approx(7e5 / 4e9)
    assert d["gpu"] == pytest.approx(1e-4)
    assert d["cpu"] == pytest.approx((0.075 / 3000 + 0.925 / 1000) / 2)
    assert d["storage"] == pytest.approx(0.425 * 1e5 / 1e8)
    thr, worst = overall_shared(p, n)
    assert float(thr) == pytest.approx(1 / d["cpu"]) and int(worst) == 4  # cpu


def test_shared_model_jobs_share_augmented_copies():
    p = Params.from_spec(ref_spec(cluster__jobs=4))
    n = loader_counts(p, 0.5, 0.3, 0.2)
    f = {k: float(v) for k, v in served(p, n).items()}
    # 500 copies of 10,000 samples: 5% of requests hit one, one copy written per 3 hits
    assert f == pytest.approx(
        {
            "augmented": 0.05,
            "decoded": 0.95 * 0.075,
            "encoded": 0.95 * 0.5,
            "storage": 0.95 * 0.425,
            "written": 0.05 / 3,
        }
    )
    d = {k: float(v) for k, v in shared_demands(p, n).items()}
    read = 0.05 * 4e5 + 0.95 * 0.075 * 4e5
    assert d["cache"] == pytest.approx((read + 0.95 * 0.5 * 1e5 + 0.05 / 3 * 4e5) / 1e9)
    assert d["cpu"] == pytest.approx((0.95 * 0.075 / 3000 + 0.95 * 0.925 / 1000) / 2)
    assert d["storage"] == pytest.approx(0.95 * 0.425 * 1e5 / 1e8)
    # every sample has a copy: a job still makes its own copies, so 1 - 1/K of requests hit
    two = Params.from_spec(ref_spec(cluster__jobs=2, dataset__samples=1000))
    everything = served(two, loader_counts(two, 0.0, 0.0, 1.0))
    assert float(everything["augmented"]) == pytest.approx(0.5)
    assert float(everything["written"]) == pytest.approx(0.5)


def test_mva_closed_network():
    # one sample in flight: the demands add up
    assert mva_throughput({"a": 1.0, "cpu": 2.0}, 1) == pytest.approx(1 / 3)
    # two samples, two equal queues: R = 1.5 + 1.5, X = 2 / 3
    assert mva_throughput({"a": 1.0, "cpu": 1.0}, 2) == pytest.approx(2 / 3)
    # as many samples as cores: no queueing at the CPU pool
    assert mva_throughput({"a": 0.0, "cpu": 1e-3}, 2, servers=2) == pytest.approx(1000)
    # a single sample runs on one of the 2 cores: half the pool's rate
    assert mva_throughput({"a": 0.0, "cpu": 1e-3}, 1, servers=2) == pytest.approx(500)
    # many in flight: the bound 1 / the largest demand
    many = mva_throughput({"a": 1e-3, "cpu": np.array([1e-3, 5e-4])}, 200, servers=2)
    assert many == pytest.approx([1000, 1000], rel=0.02)
    with pytest.raises(ValueError):
        mva_throughput({"cpu": 1.0}, 0)


def test_not_pipelined_is_the_closed_network_with_a_sample_per_job():
    spec = ref_spec(cluster__jobs=3, node__pipelined=False, node__cpu_cores=4)
    p = Params.from_spec(spec)
    n = loader_counts(p, 0.5, 0.3, 0.2)
    d = {k: float(v) for k, v in shared_demands(p, n).items()}
    thr, _ = overall_shared(p, n)
    assert float(thr) == pytest.approx(float(mva_throughput(d, 3, "cpu", 4)))
    assert float(thr) < 1 / max(d.values())
    piped, _ = overall_shared(Params.from_spec(ref_spec(cluster__jobs=3)), n)
    assert float(piped) == pytest.approx(1 / max(d.values()))


def test_colocated_cache_adds_to_the_cpu():
    spread = Params.from_spec(ref_spec(cluster__jobs=2))
    together = Params.from_spec(ref_spec(cluster__jobs=2, cache__colocated=True))
    n = loader_counts(spread, 0.2, 0.5, 0.3)
    a = {k: float(v) for k, v in shared_demands(spread, n).items()}
    b = {k: float(v) for k, v in shared_demands(together, n).items()}
    assert b["cpu"] == pytest.approx(a["cpu"] + a["cache"])
    assert {k: b[k] for k in b if k != "cpu"} == pytest.approx({k: a[k] for k in a if k != "cpu"})


def test_augmented_ratio_sizes_augmented_samples():
    p = Params.from_spec(ref_spec(dataset__augmented_ratio=0.25))  # 1e5 bytes, not 4e5
    assert p.augmented_bytes == pytest.approx(1e5) and p.sample_bytes("decoded") == 4e5
    n = counts(p, 0.0, 0.0, 0.1)  # 1e8 bytes of augmented samples
    assert float(n["augmented"]) == pytest.approx(1000)
    assert dsi_augmented(p)[0] == pytest.approx(min(1e9 / 1e5, 2e9 / 3e5, 4e9 / 4e5, 10_000))


def test_shared_equals_paper_when_one_form_holds_everything():
    # All samples decoded: both models reduce to Eq. 3 (cache-bound here).
    p = Params.from_spec(ref_spec(dataset__samples=1000))
    n = counts(p, 0.0, 1.0, 0.0)
    assert {k: float(v) for k, v in loader_counts(p, 0.0, 1.0, 0.0).items()} == {
        k: float(v) for k, v in n.items()
    }
    thr, _ = overall_shared(p, n)
    assert float(thr) == pytest.approx(float(overall_paper(p, n))) == pytest.approx(2500)


def test_vectorised_matches_scalar(p):
    x = np.array([[0.5, 0.3, 0.2], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    many = overall_paper(p, counts(p, x[:, 0], x[:, 1], x[:, 2]))
    one = [float(overall_paper(p, counts(p, *row))) for row in x]
    assert np.allclose(many, one)
