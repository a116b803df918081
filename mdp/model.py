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

The ``shared`` model also follows how SenecaLoader fills the tiers, where Eq. 2-8 do not: a
sample read from storage keeps one *base* copy, decoded while that tier has room, else encoded,
and, while another job can use it, an augmented copy besides (:func:`loader_counts`). A job never
gets its own augmented copy back (the paper's ODS rule: no augmented sample is reused across
epochs), and a copy is dropped once every other job used it. In a steady state the tier stays
full: each copy waits on average ``(K - 1) / K`` epoch for the other K - 1 jobs, so the tier
serves ``K x N_A`` hits per epoch out of ``K x N`` requests, and a hit fraction of
``min(N_A / N, (K - 1) / K)`` (copies can only be made by requests that miss them). The other
requests read the base copies; every ``K - 1`` hits cost one cache write of a new copy.

Spec fields that are not in the paper (their defaults give the paper's equations):

* ``dataset.augmented_ratio``: an augmented sample's bytes over a decoded one's (a crop is
  smaller than the image it comes from). Augmented samples in the cache and on PCIe are
  ``M x ratio x S_data`` bytes; with 1.0 this is the paper's ``M x S_data``.
* ``cluster.jobs`` (``shared`` only): K, the concurrent jobs sharing the cache. One job gets no
  augmented hits.
* ``cache.colocated`` (``shared`` only): the cache server runs on the training node and uses its
  CPUs, so cache transfers and CPU work add up instead of overlapping (a single-node set-up such
  as ``mdp profile`` with its embedded cache measures).
* ``node.pipelined`` and ``node.cpu_cores`` (``shared`` only): with ``pipelined = false`` each
  job has one sample in flight (a loader without workers), so a job's storage read, cache read
  and decode do not overlap; the throughput is then that of a closed queueing network with K
  samples in flight and ``cpu_cores`` cores (:mod:`mdp.queueing`), not 1 / the largest demand.

Two readings of the paper that the code follows literally (Eq. 7 "as written"): DSI_S is
``min(DSI_E, B_storage / S_data)``, so storage reads are also capped by the cache-bandwidth term
of DSI_E; and the PCIe term of DSI_E and DSI_S uses the decoded size ``M x S_data``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mdp.queueing import mva_throughput
from mdp.spec import Spec
from seneca_base.tiers import SPLIT_ORDER
from seneca_base.tiers import TIERS as CACHE_TIERS

__all__ = [
    "BOUNDS",
    "BOUND_LABELS",
    "SHARED_RESOURCES",
    "TIERS",
    "TIER_MODELS",
    "Params",
    "TierModel",
    "counts",
    "dsi",
    "dsi_augmented",
    "dsi_decoded",
    "dsi_encoded",
    "dsi_storage",
    "loader_counts",
    "overall_paper",
    "overall_shared",
    "served",
    "shared_demands",
    "tier_dsi",
]

#: The four places a sample can come from, in the order Eq. 2, 4, 6, 8 fill them.
TIERS = (*CACHE_TIERS, "storage")

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

    ``m_a`` is the augmented inflation, ``M x dataset.augmented_ratio``.
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
    m_a: float
    jobs: int = 1
    colocated: bool = False
    pipelined: bool = True
    cores: int = 1

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
            m_a=spec.inflation * spec.augmented_ratio,
            jobs=spec.jobs,
            colocated=spec.cache_colocated,
            pipelined=spec.pipelined,
            cores=spec.cpu_cores,
        )

    @property
    def augmented_bytes(self) -> float:
        """Bytes of one augmented sample, ``m_a x S_data``."""
        return self.m_a * self.s_data

    def sample_bytes(self, tier: str) -> float:
        """Bytes one sample occupies in ``tier`` (:data:`TIER_MODELS`), or read from storage."""
        return TIER_MODELS[tier].size(self)


@dataclass(frozen=True)
class TierModel:
    """What the model needs to know of a place a sample comes from: ``size``, the bytes of
    one sample there (read over the cache link and the NIC); ``cpu``, the CPU work left for a
    sample read from it (``"t_a"``: augment, ``"t_da"``: decode + augment, None: none), a rate
    of :class:`Params`; ``once``: a copy serves a job once (the augmented tier: copies made by
    one job for the others, never its own), so the tier holds copies besides a sample's base
    copy in the other tiers; ``bound``: the component that reads it from where it lives (the
    storage term of Eq. 7), if any besides the cache."""

    size: Callable[[Params], float]
    cpu: str | None
    once: bool = False
    bound: Callable[[Params], tuple[str, float]] | None = None


#: The CPU bound named by each rate of :attr:`TierModel.cpu`.
_CPU_BOUNDS = {"t_a": "cpu_augment", "t_da": "cpu_decode_augment"}

#: Each cache tier (``seneca_base.tiers.TIERS``) and storage, as the model sees it.
TIER_MODELS: dict[str, TierModel] = {
    "augmented": TierModel(lambda p: p.augmented_bytes, None, once=True),
    "decoded": TierModel(lambda p: p.m * p.s_data, "t_a"),
    "encoded": TierModel(lambda p: p.s_data, "t_da"),
    "storage": TierModel(
        lambda p: p.s_data, "t_da", bound=lambda p: ("storage", p.b_storage / p.s_data)
    ),
}


def _bounded(terms: dict[str, float]) -> tuple[float, str]:
    """The smallest term and its name; ties go to the first name in :data:`BOUNDS`."""
    name = min(terms, key=lambda k: (terms[k], BOUNDS.index(k)))
    return terms[name], name


def dsi(p: Params, tier: str) -> tuple[float, str]:
    """Eq. 1, 3, 5, 7: samples/s when every sample comes from ``tier``, and its bound: its
    bytes over the cache link and the NICs, an augmented sample over PCIe, the GPUs, the CPU
    work left (:attr:`TierModel.cpu`) and the tier's own bound."""
    model = TIER_MODELS[tier]
    size = model.size(p)
    terms = {
        "cache": p.b_cache / size,
        "nic": p.n * p.b_nic / (size + p.c_nw),
        "pcie": p.n * p.b_pcie / (p.augmented_bytes + p.c_pcie),
        "gpu": p.n * p.t_gpu,
    }
    if model.cpu is not None:
        terms[_CPU_BOUNDS[model.cpu]] = p.n * getattr(p, model.cpu)
    if model.bound is not None:
        name, value = model.bound(p)
        terms[name] = value
    return _bounded(terms)


def dsi_augmented(p: Params) -> tuple[float, str]:
    """Eq. 1: samples/s when every sample is augmented in the cache, and its bound."""
    return dsi(p, "augmented")


def dsi_decoded(p: Params) -> tuple[float, str]:
    """Eq. 3: Eq. 1 plus the CPU augmenting (n x T_A)."""
    return dsi(p, "decoded")


def dsi_encoded(p: Params) -> tuple[float, str]:
    """Eq. 5: encoded bytes over the cache link and NIC, decode + augment on the CPU."""
    return dsi(p, "encoded")


def dsi_storage(p: Params) -> tuple[float, str]:
    """Eq. 7: ``min(DSI_E, B_storage / S_data)``."""
    return dsi(p, "storage")


def tier_dsi(p: Params) -> dict[str, tuple[float, str]]:
    """DSI and bound of each of :data:`TIERS` (they do not depend on the split)."""
    return {t: dsi(p, t) for t in TIERS}


def _fractions(x: Sequence[Any]) -> dict[str, np.ndarray]:
    """Cache fractions, one per tier in ``SPLIT_ORDER``, by tier."""
    if len(x) != len(SPLIT_ORDER):
        raise TypeError(f"expected {len(SPLIT_ORDER)} fractions ({', '.join(SPLIT_ORDER)})")
    return {t: np.asarray(v, dtype=np.float64) for t, v in zip(SPLIT_ORDER, x, strict=True)}


def _room(p: Params, tier: str, x: np.ndarray) -> np.ndarray:
    """Samples a share ``x`` of the cache holds in ``tier``."""
    return x * p.s_cache / p.sample_bytes(tier)


def counts(p: Params, *x: Any) -> dict[str, np.ndarray]:
    """Eq. 2, 4, 6, 8: samples held per tier for cache fractions ``x`` (one per tier, in
    ``SPLIT_ORDER``: ``x_e, x_d, x_a``).

    The tiers are filled in lookup order, augmented first, then decoded, then encoded (the
    small-dataset branches: a tier never holds more than the samples the earlier tiers left
    over)."""
    fractions = _fractions(x)
    out: dict[str, np.ndarray] = {}
    filled: Any = 0.0
    for t in CACHE_TIERS:
        out[t] = np.minimum(p.n_total - filled, _room(p, t, fractions[t]))
        filled = filled + out[t]
    out["storage"] = p.n_total - filled
    return out


def loader_counts(p: Params, *x: Any) -> dict[str, np.ndarray]:
    """SenecaLoader's tiers for cache fractions ``x`` (one per tier, in ``SPLIT_ORDER``):
    base copies in the decoded tier, then the encoded one (the rest on storage), and copies
    besides in tiers used once per job (``augmented`` counts copies, which overlap the base
    tiers; the others add up to N)."""
    fractions = _fractions(x)
    out: dict[str, np.ndarray] = {}
    filled: Any = 0.0
    for t in CACHE_TIERS:
        if TIER_MODELS[t].once:
            out[t] = np.minimum(p.n_total, _room(p, t, fractions[t]))
        else:
            out[t] = np.minimum(p.n_total - filled, _room(p, t, fractions[t]))
            filled = filled + out[t]
    out["storage"] = p.n_total - filled
    return out


def overall_paper(p: Params, n: dict[str, np.ndarray]) -> np.ndarray:
    """Eq. 9: the per-tier DSIs weighted by the fraction of samples each tier holds."""
    dsis = tier_dsi(p)
    return sum(n[t] / p.n_total * dsis[t][0] for t in TIERS)


def _once_hits(p: Params, n: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per tier used once per job, the fraction of requests its copies serve: each copy
    serves the other K - 1 jobs, so at most ``(K - 1) / K`` (none for one job)."""
    out = {}
    for t in CACHE_TIERS:
        if TIER_MODELS[t].once:
            held = np.asarray(n[t], dtype=np.float64)
            jobs = p.jobs
            out[t] = np.minimum(held / p.n_total, (jobs - 1) / jobs) if jobs > 1 else held * 0
    return out


def _written(p: Params, once: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per tier used once per job, the copies written per request: one per ``K - 1`` hits."""
    return {t: h / (p.jobs - 1) if p.jobs > 1 else h * 0 for t, h in once.items()}


def served(p: Params, n: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per :func:`loader_counts` mix ``n``: the fraction of requests served from each form, and
    ``written``, the copies (of tiers used once per job) written per request (see the module
    docstring)."""
    once = _once_hits(p, n)
    zero = np.zeros_like(np.asarray(n["storage"], dtype=np.float64))
    rest = 1.0 - sum(once.values(), zero)
    out = {t: rest * np.asarray(n[t], dtype=np.float64) / p.n_total for t in TIERS if t not in once}
    return {**once, **out, "written": sum(_written(p, once).values(), zero)}


def shared_demands(p: Params, n: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Seconds of each shared resource that one average sample uses, per tier mix ``n`` (from
    :func:`loader_counts`); with ``colocated`` the cache's seconds are added to the CPU's."""
    f = served(p, n)
    ones = np.ones_like(f["storage"])
    moved = {t: f[t] * p.sample_bytes(t) for t in TIERS}  # bytes read per request
    copies = _written(p, _once_hits(p, n)).items()
    written = sum((w * p.sample_bytes(t) for t, w in copies), ones * 0)  # bytes written
    cache = (sum(moved[t] for t in CACHE_TIERS) + written) / p.b_cache
    cpu = sum(f[t] / getattr(p, TIER_MODELS[t].cpu) for t in TIERS if TIER_MODELS[t].cpu) / p.n
    return {
        "cache": cache,
        "nic": (sum(moved.values()) + p.c_nw) / (p.n * p.b_nic),
        "pcie": ones * (p.augmented_bytes + p.c_pcie) / (p.n * p.b_pcie),
        "gpu": ones / (p.n * p.t_gpu),
        "cpu": cpu + cache if p.colocated else cpu,
        "storage": f["storage"] * p.s_data / p.b_storage,
    }


def overall_shared(p: Params, n: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The ``shared`` model: throughput = 1 / max demand (or, not ``pipelined``, the closed
    network's throughput with ``jobs`` samples in flight); also the index into the names of
    :func:`shared_demands` of the resource with the largest demand (ties: first in that order).
    """
    demands = shared_demands(p, n)
    stacked = np.stack([np.asarray(v, dtype=np.float64) for v in demands.values()])
    worst = np.argmax(stacked, axis=0)
    if p.pipelined:
        return 1.0 / np.max(stacked, axis=0), worst
    if p.colocated:  # the cache's seconds are already in the CPU's
        demands = {k: v for k, v in demands.items() if k != "cache"}
    return mva_throughput(demands, p.jobs, "cpu", p.cores), worst


#: Resource names in the order :func:`shared_demands` returns them.
SHARED_RESOURCES = ("cache", "nic", "pcie", "gpu", "cpu", "storage")
