"""The DSI (data storage and ingestion) performance model of the Seneca paper, §5.1, Eq. 1-9.

All functions are pure numpy and vectorised over cache splits: ``x_e``, ``x_d``, ``x_a`` may be
scalars or arrays of fractions of the cache (``0 <= x <= 1``). Units are SI: bytes, bytes/s and
samples/s (see :class:`Params`).

Two overall models:

* ``paper`` (Eq. 9): the per-form throughputs DSI_A, DSI_D, DSI_E, DSI_S, each bounded by its
  own slowest component, averaged with the probability of each form.
* ``shared``: all forms run at once and share the resources (one CPU pool, one cache link, one
  storage link, the NICs, PCIe and GPUs). The throughput is 1 / the largest per-sample demand
  on any resource, and that resource is the bound.

Two readings of the paper that the code follows literally (Eq. 7 "as written"): DSI_S is
``min(DSI_E, B_storage / S_data)``, so storage reads are also capped by the cache-bandwidth term
of DSI_E; and the PCIe term of DSI_E and DSI_S uses the decoded size ``M x S_data``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mdp.spec import Spec

__all__ = [
    "BOUNDS",
    "BOUND_LABELS",
    "SHARED_RESOURCES",
    "TIERS",
    "Params",
    "counts",
    "dsi_augmented",
    "dsi_decoded",
    "dsi_encoded",
    "dsi_storage",
    "overall_paper",
    "overall_shared",
    "shared_demands",
    "tier_dsi",
]

#: The four places a sample can come from, in the order Eq. 2, 4, 6, 8 fill them.
TIERS = ("augmented", "decoded", "encoded", "storage")

#: Components that can bound a throughput; when two terms are equal the first one named here is
#: reported.
BOUNDS = ("cache", "nic", "pcie", "gpu", "cpu_augment", "cpu_decode_augment", "cpu", "storage")
BOUND_LABELS = {
    "cache": "cache bandwidth",
    "nic": "NIC",
    "pcie": "PCIe",
    "gpu": "GPU",
    "cpu_augment": "CPU augment",
    "cpu_decode_augment": "CPU decode+augment",
    "cpu": "CPU (decode+augment and augment)",
    "storage": "storage",
}


@dataclass(frozen=True)
class Params:
    """Model parameters in SI units (Table 3 of the paper), derived from a :class:`Spec`.

    ``c_nw`` and ``c_pcie`` are gradient bytes per *sample*: the per-batch ring all-reduce
    volume ``2 (k - 1) / k x model bytes`` (k = nodes for the network, GPUs per node for PCIe)
    divided by the per-GPU batch size; NVLink inside a node zeroes ``c_pcie``, NVLink across
    nodes zeroes both.
    """

    n: int
    t_gpu: float
    t_da: float
    t_a: float
    b_nic: float
    b_pcie: float
    b_cache: float
    b_storage: float
    s_cache: float
    s_data: float
    m: float
    n_total: int
    c_nw: float
    c_pcie: float

    @classmethod
    def from_spec(cls, spec: Spec) -> Params:
        """Convert a spec's TOML units (Gbit/s, GB/s, MB/s, GB, KB, MB) to SI."""
        model_bytes = spec.model_mb * 1e6
        g, n = spec.gpus_per_node, spec.nodes
        c_pcie = 2 * (g - 1) / g * model_bytes / spec.batch_size
        c_nw = 2 * (n - 1) / n * model_bytes / spec.batch_size
        if spec.intra_node_nvlink or spec.inter_node_nvlink:
            c_pcie = 0.0
        if spec.inter_node_nvlink:
            c_nw = 0.0
        return cls(
            n=n,
            t_gpu=spec.gpu_samples_per_s,
            t_da=spec.decode_augment_samples_per_s,
            t_a=spec.augment_samples_per_s,
            b_nic=spec.nic_gbit_per_s * 1e9 / 8,
            b_pcie=spec.pcie_gbyte_per_s * 1e9,
            b_cache=spec.cache_gbit_per_s * 1e9 / 8,
            b_storage=spec.storage_mbyte_per_s * 1e6,
            s_cache=spec.cache_gb * 1e9,
            s_data=spec.sample_kb * 1e3,
            m=spec.inflation,
            n_total=spec.samples,
            c_nw=c_nw,
            c_pcie=c_pcie,
        )

    def sample_bytes(self, tier: str) -> float:
        """Bytes one sample occupies in ``tier`` (encoded and storage: S_data; else M x S_data)."""
        return self.s_data if tier in ("encoded", "storage") else self.m * self.s_data


def _bounded(terms: dict[str, float]) -> tuple[float, str]:
    """The smallest term and its name; ties go to the first name in :data:`BOUNDS`."""
    name = min(terms, key=lambda k: (terms[k], BOUNDS.index(k)))
    return terms[name], name


def _preprocessed_terms(p: Params) -> dict[str, float]:
    """Terms shared by Eq. 1 and Eq. 3 (a cached tensor of M x S_data bytes)."""
    tensor = p.m * p.s_data
    return {
        "cache": p.b_cache / tensor,
        "nic": p.n * p.b_nic / (tensor + p.c_nw),
        "pcie": p.n * p.b_pcie / (tensor + p.c_pcie),
        "gpu": p.n * p.t_gpu,
    }


def dsi_augmented(p: Params) -> tuple[float, str]:
    """Eq. 1: samples/s when every sample is augmented in the cache, and its bound."""
    return _bounded(_preprocessed_terms(p))


def dsi_decoded(p: Params) -> tuple[float, str]:
    """Eq. 3: Eq. 1 plus the CPU augmenting (n x T_A)."""
    return _bounded({**_preprocessed_terms(p), "cpu_augment": p.n * p.t_a})


def _encoded_terms(p: Params) -> dict[str, float]:
    return {
        "cache": p.b_cache / p.s_data,
        "nic": p.n * p.b_nic / (p.s_data + p.c_nw),
        "pcie": p.n * p.b_pcie / (p.m * p.s_data + p.c_pcie),
        "gpu": p.n * p.t_gpu,
        "cpu_decode_augment": p.n * p.t_da,
    }


def dsi_encoded(p: Params) -> tuple[float, str]:
    """Eq. 5: encoded bytes over the cache link and NIC, decode + augment on the CPU."""
    return _bounded(_encoded_terms(p))


def dsi_storage(p: Params) -> tuple[float, str]:
    """Eq. 7: ``min(DSI_E, B_storage / S_data)``."""
    return _bounded({**_encoded_terms(p), "storage": p.b_storage / p.s_data})


def tier_dsi(p: Params) -> dict[str, tuple[float, str]]:
    """DSI and bound of each of :data:`TIERS` (they do not depend on the split)."""
    return {
        "augmented": dsi_augmented(p),
        "decoded": dsi_decoded(p),
        "encoded": dsi_encoded(p),
        "storage": dsi_storage(p),
    }


def counts(p: Params, x_e: Any, x_d: Any, x_a: Any) -> dict[str, np.ndarray]:
    """Eq. 2, 4, 6, 8: samples held per tier for cache fractions ``x_e``, ``x_d``, ``x_a``.

    The augmented tier is filled first, then decoded, then encoded (the small-dataset branches:
    a tier never holds more than the samples the earlier tiers left over).
    """
    tensor = p.m * p.s_data
    x_e, x_d, x_a = (np.asarray(x, dtype=np.float64) for x in (x_e, x_d, x_a))
    n_a = np.minimum(p.n_total, x_a * p.s_cache / tensor)
    n_d = np.minimum(p.n_total - n_a, x_d * p.s_cache / tensor)
    n_e = np.minimum(p.n_total - (n_a + n_d), x_e * p.s_cache / p.s_data)
    n_s = p.n_total - n_a - n_d - n_e
    return {"augmented": n_a, "decoded": n_d, "encoded": n_e, "storage": n_s}


def overall_paper(p: Params, n: dict[str, np.ndarray]) -> np.ndarray:
    """Eq. 9: the per-tier DSIs weighted by the fraction of samples each tier holds."""
    dsi = tier_dsi(p)
    return sum(n[t] / p.n_total * dsi[t][0] for t in TIERS)


def shared_demands(p: Params, n: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Seconds of each shared resource that one average sample uses, per tier mix ``n``."""
    f = {t: np.asarray(n[t], dtype=np.float64) / p.n_total for t in TIERS}
    tensor = p.m * p.s_data
    ones = np.ones_like(f["storage"])
    read = (f["augmented"] + f["decoded"]) * tensor
    return {
        "cache": (read + f["encoded"] * p.s_data) / p.b_cache,
        "nic": (read + (f["encoded"] + f["storage"]) * p.s_data + p.c_nw) / (p.n * p.b_nic),
        "pcie": ones * (tensor + p.c_pcie) / (p.n * p.b_pcie),
        "gpu": ones / (p.n * p.t_gpu),
        "cpu": (f["decoded"] / p.t_a + (f["encoded"] + f["storage"]) / p.t_da) / p.n,
        "storage": f["storage"] * p.s_data / p.b_storage,
    }


def overall_shared(p: Params, n: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The ``shared`` model: throughput = 1 / max demand; also the index into the names of
    :func:`shared_demands` of the resource that bounds each split (ties: first in that order).
    """
    demands = shared_demands(p, n)
    stacked = np.stack([np.asarray(v, dtype=np.float64) for v in demands.values()])
    worst = np.argmax(stacked, axis=0)
    return 1.0 / np.max(stacked, axis=0), worst


#: Resource names in the order :func:`shared_demands` returns them.
SHARED_RESOURCES = ("cache", "nic", "pcie", "gpu", "cpu", "storage")
