"""Exact mean value analysis (MVA) of a closed queueing network, vectorised over cache splits.

The ``shared`` model's bound, 1 / the largest demand, assumes every resource works while the
others do (a pipeline with enough samples in flight). A loader with one sample in flight per
job (``num_workers=0``) does not overlap a job's own storage read with its decode, so its
throughput is lower wherever two resources are nearly balanced. MVA gives the throughput of
``customers`` samples cycling through the resources, each a single-server queue, except the
CPU pool: ``servers`` cores, each taking ``servers x`` the pool's per-sample seconds.

Reference: Reiser and Lavenberg, "Mean-value analysis of closed multichain queuing networks"
(JACM 1980); the load-dependent recursion for the multi-server station.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["mva_throughput"]


def mva_throughput(
    demands: Mapping[str, np.ndarray], customers: int, multi: str = "cpu", servers: int = 1
) -> np.ndarray:
    """Throughput (samples/s) of ``customers`` samples in flight.

    ``demands`` are each resource's seconds per sample (as :func:`mdp.model.shared_demands`
    gives them: a pool's seconds, i.e. per-server seconds / servers); ``multi`` names the one
    resource with ``servers`` servers.
    """
    if customers < 1 or servers < 1:
        raise ValueError("customers and servers must be >= 1")
    queues = {k: np.asarray(v, dtype=np.float64) for k, v in demands.items() if k != multi}
    shape = np.broadcast(*demands.values()).shape
    per_server = np.broadcast_to(np.asarray(demands[multi], dtype=np.float64), shape) * servers
    length = {k: np.zeros(shape) for k in queues}
    # p[j]: probability that j samples are at the multi-server station (given c - 1 in flight)
    p = [np.ones(shape)]
    throughput = np.zeros(shape)
    for c in range(1, customers + 1):
        residence = sum(d * (1 + length[k]) for k, d in queues.items()) + np.zeros(shape)
        multi_time = sum(j / min(j, servers) * per_server * p[j - 1] for j in range(1, c + 1))
        throughput = c / (residence + multi_time)
        length = {k: throughput * d * (1 + length[k]) for k, d in queues.items()}
        new = [np.zeros(shape)] + [
            throughput * per_server / min(j, servers) * p[j - 1] for j in range(1, c + 1)
        ]
        new[0] = np.clip(1 - sum(new[1:]), 0.0, 1.0)
        p = new
    return throughput
