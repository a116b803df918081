"""What the loader's plan is made from: the model's inputs measured where they happen (the
loader's own counters, ``seneca.loader._stats``), and documented defaults for the rest.

Measured (per-sample wall times in the loader process and its workers, summed over them):

* ``node.decode_augment_samples_per_s`` and ``node.augment_samples_per_s``: the time a decode
  and a transform (its cached head, and the step to the cached tensor) take, per sample; the
  node's rate is the processes doing that work (every live job's, taken to be like this
  one) over the wall time per sample, so processes sharing cores count once;
* ``cache.bandwidth_gbit_per_s``: bytes read from the cache over the time of those reads (its
  hits);
* ``storage.bandwidth_mbyte_per_s``: bytes read from storage over the time of those reads;
* ``dataset.sample_kb``, ``dataset.inflation`` and ``dataset.augmented_ratio``: the sizes of
  the encoded samples decoded, of the decoded images and of the augmented tensors made;
* ``cluster.jobs``: the live jobs of this view (ODS's), and ``node.pipelined``: the loader has
  workers.

Everything else (GPU rate, NIC, PCIe, cluster shape, model size) comes from a spec the user
gives or from :data:`seneca.defaults.PROFILE_DEFAULTS`; a rate not measured yet from
:data:`seneca.defaults.AUTO_DEFAULTS`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mdp.spec import FIELDS, Spec, parse_spec
from seneca import defaults
from seneca_base.tiers import TIERS

__all__ = ["KEY_INPUTS", "Setting", "evidence", "measured_inputs", "source_of", "spec_of"]

#: The rates of :data:`seneca.defaults.AUTO_DEFAULTS` given per process (core).
_PER_PROCESS = ("node.decode_augment_samples_per_s", "node.augment_samples_per_s")


#: The inputs a plan is "measured" by: the CPU rates, which move the best split most. A plan
#: whose rates are still the defaults is a plan "from defaults", whatever else was measured.
KEY_INPUTS = ("node.decode_augment_samples_per_s", "node.augment_samples_per_s")


@dataclass(frozen=True)
class Setting:
    """What the loader knows of its set-up without measuring: ``samples`` in the dataset,
    ``cache_bytes``, its ``workers`` (0: the loader process), whether the cache is
    ``colocated`` (on this machine), ``base``: spec values given by the user (``section.key``
    -> value) for what cannot be measured, and ``tiers``: the tiers its jobs can read (no
    augmented tier for a transform with no random head to cache, no encoded tier for a dataset
    whose files are not what it decodes)."""

    samples: int
    cache_bytes: int
    workers: int
    colocated: bool
    base: Mapping[str, Any]
    tiers: tuple[str, ...] = TIERS

    @property
    def head(self) -> bool:
        """Whether the transform has a random head (what the augmented tier keeps)."""
        return "augmented" in self.tiers


def source_of(measured: Mapping[str, float]) -> str:
    """``"measured"`` when ``measured`` has every one of :data:`KEY_INPUTS`, else
    ``"defaults"``."""
    return "measured" if all(k in measured for k in KEY_INPUTS) else "defaults"


def evidence(c: Mapping[str, int]) -> int:
    """How much measuring is behind the inputs of a counters snapshot ``c``: the samples the
    loader made (every input is measured over the same run, so a run twice as long has about
    twice as many of each behind it)."""
    return int(c.get("samples", 0))


def _mean(total: int, count: int) -> float | None:
    return total / count if count > 0 and total > 0 else None


def measured_inputs(
    c: Mapping[str, int], jobs: int, workers: int, head: bool = True
) -> dict[str, float]:
    """The spec values (``section.key``) a counters snapshot ``c`` measures, for ``jobs`` live
    jobs with ``workers`` workers each; a value with fewer than
    :data:`seneca.defaults.AUTO_WARMUP_SAMPLES` samples behind it is left out. Without a random
    ``head`` a transform costs nothing before the cache boundary: the rates are the decode's,
    and a decoded hit is ready (``defaults.AUTO_NO_HEAD_RATE``)."""
    enough = defaults.AUTO_WARMUP_SAMPLES
    procs = max(1, jobs) * max(1, workers)  # processes doing the CPU work at once
    out: dict[str, float] = {}
    decodes, transforms = c.get("decodes", 0), c.get("transforms", 0)
    t_decode = _mean(c.get("ns_decode", 0), decodes)
    t_transform = _mean(c.get("ns_transform", 0), transforms)
    if not head and t_decode and decodes >= enough:
        out["node.decode_augment_samples_per_s"] = procs * 1e9 / t_decode
        out["node.augment_samples_per_s"] = procs * defaults.AUTO_NO_HEAD_RATE
    elif t_decode and t_transform and decodes >= enough and transforms >= enough:
        out["node.decode_augment_samples_per_s"] = procs * 1e9 / (t_decode + t_transform)
        out["node.augment_samples_per_s"] = procs * 1e9 / t_transform
    if c.get("storage_reads", 0) >= enough and c.get("ns_storage", 0) > 0:
        rate = c["bytes_storage"] / c["ns_storage"] * 1e9  # bytes/s of one reader
        out["storage.bandwidth_mbyte_per_s"] = procs * rate / 1e6
    reads = sum(c.get(f"hits_{tier}", 0) for tier in TIERS)  # values read from the cache
    if c.get("bytes_cache", 0) > 0 and c.get("ns_cache", 0) > 0 and reads >= enough:
        out["cache.bandwidth_gbit_per_s"] = procs * c["bytes_cache"] * 8 / c["ns_cache"]
    encoded, decoded = _mean(c.get("bytes_encoded", 0), decodes), None
    if encoded and decodes >= enough:
        out["dataset.sample_kb"] = encoded / 1e3
        decoded = _mean(c.get("bytes_decoded", 0), decodes)
        if decoded:
            out["dataset.inflation"] = decoded / encoded
    augmented = _mean(c.get("bytes_augmented", 0), c.get("augmented_made", 0))
    if augmented and decoded and c.get("augmented_made", 0) >= enough:
        out["dataset.augmented_ratio"] = augmented / decoded
    return out


def spec_of(setting: Setting, measured: Mapping[str, float], jobs: int) -> Spec:
    """The cluster spec to plan with: ``measured`` values, then the user's ``base``, then
    :data:`seneca.defaults.AUTO_DEFAULTS` and :data:`seneca.defaults.PROFILE_DEFAULTS`."""
    values: dict[str, Any] = {**defaults.PROFILE_DEFAULTS, **defaults.AUTO_DEFAULTS}
    if not setting.head:
        values["node.augment_samples_per_s"] = defaults.AUTO_NO_HEAD_RATE
    procs = min(max(1, jobs) * max(1, setting.workers), os.cpu_count() or 1)
    for name in _PER_PROCESS:  # the defaults are one process's rates
        values[name] = procs * values[name]
    values.update(setting.base)
    values.update(
        {
            "cluster.jobs": max(1, jobs),
            "node.cpu_cores": max(1, setting.workers),
            "node.pipelined": setting.workers > 0,
            "cache.size_gb": max(setting.cache_bytes, 1) / 1e9,
            "cache.colocated": setting.colocated,
            "dataset.samples": setting.samples,
        }
    )
    values.update(measured)
    toml: dict[str, dict[str, Any]] = {}
    for f in FIELDS:
        if f.name in values:
            toml.setdefault(f.section, {})[f.key] = values[f.name]
    return parse_spec(toml, "the loader's plan")
