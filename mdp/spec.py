"""Cluster specs: the TOML file that describes a training cluster, its cache and its dataset.

SI units throughout: GB = 1e9 bytes, MB = 1e6, KB = 1e3, Gbit = 1e9 bits. Example::

    [cluster]
    nodes = 1
    gpus_per_node = 2
    intra_node_nvlink = false     # optional, default false
    inter_node_nvlink = false     # optional, default false
    jobs = 1                      # optional, default 1: concurrent jobs sharing the cache

    [node]
    gpu_samples_per_s = 4550          # T_GPU
    decode_augment_samples_per_s = 2132   # T_D+A
    augment_samples_per_s = 4050      # T_A
    nic_gbit_per_s = 10               # B_NIC
    pcie_gbyte_per_s = 32             # B_PCIe
    cpu_cores = 1                     # optional, default 1: cores T_D+A and T_A were measured on
    pipelined = true                  # optional, default true: false for one sample in flight

    [cache]
    size_gb = 64                      # S_cache
    bandwidth_gbit_per_s = 10         # B_cache
    colocated = false                 # optional, default false: cache server on the node's CPUs

    [storage]
    bandwidth_mbyte_per_s = 500       # B_storage

    [dataset]
    samples = 1281167                 # N_total
    sample_kb = 114                   # S_data (encoded)
    inflation = 5.12                  # M
    augmented_ratio = 1.0             # optional, default 1: augmented / decoded bytes

    [model]
    size_mb = 102.2                   # gradient bytes synchronised per step
    batch_size = 256                  # per GPU

Every key is required except the ones marked optional. ``jobs``, ``cpu_cores``, ``pipelined``,
``colocated`` and ``augmented_ratio`` are not in the paper (see :mod:`mdp.model`). Unknown or
missing keys, wrong types and non-positive numbers raise :class:`~seneca_base.errors.SpecError`
naming the file and the key.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from seneca_base.errors import SpecError

__all__ = [
    "FIELDS",
    "Field",
    "Spec",
    "example_names",
    "example_text",
    "load_spec",
    "parse_spec",
    "spec_toml",
]


@dataclass(frozen=True)
class Field:
    """One key of a spec: where it lives in the TOML file and what it holds."""

    section: str
    key: str
    attr: str
    kind: type  # int, float or bool
    symbol: str
    help: str
    default: Any = None

    @property
    def name(self) -> str:
        """``section.key``, as ``mdp sweep --param`` spells it."""
        return f"{self.section}.{self.key}"


FIELDS: tuple[Field, ...] = (
    Field("cluster", "nodes", "nodes", int, "n", "training nodes"),
    Field("cluster", "gpus_per_node", "gpus_per_node", int, "g", "GPUs per node"),
    Field("cluster", "intra_node_nvlink", "intra_node_nvlink", bool, "", "NVLink in a node", False),
    Field("cluster", "inter_node_nvlink", "inter_node_nvlink", bool, "", "NVLink across", False),
    Field("cluster", "jobs", "jobs", int, "K", "concurrent jobs sharing the cache", 1),
    Field("node", "gpu_samples_per_s", "gpu_samples_per_s", float, "T_GPU", "GPU ingestion"),
    Field(
        "node",
        "decode_augment_samples_per_s",
        "decode_augment_samples_per_s",
        float,
        "T_D+A",
        "CPU decode + augment",
    ),
    Field("node", "augment_samples_per_s", "augment_samples_per_s", float, "T_A", "CPU augment"),
    Field("node", "nic_gbit_per_s", "nic_gbit_per_s", float, "B_NIC", "network per node"),
    Field("node", "pcie_gbyte_per_s", "pcie_gbyte_per_s", float, "B_PCIe", "PCIe per node"),
    Field("node", "cpu_cores", "cpu_cores", int, "", "cores behind T_D+A and T_A", 1),
    Field("node", "pipelined", "pipelined", bool, "", "loaders overlap their work", True),
    Field("cache", "size_gb", "cache_gb", float, "S_cache", "cache size"),
    Field("cache", "bandwidth_gbit_per_s", "cache_gbit_per_s", float, "B_cache", "cache link"),
    Field("cache", "colocated", "cache_colocated", bool, "", "cache on the node's CPUs", False),
    Field("storage", "bandwidth_mbyte_per_s", "storage_mbyte_per_s", float, "B_storage", "storage"),
    Field("dataset", "samples", "samples", int, "N_total", "samples in the dataset"),
    Field("dataset", "sample_kb", "sample_kb", float, "S_data", "encoded sample size"),
    Field("dataset", "inflation", "inflation", float, "M", "decoded / encoded size"),
    Field(
        "dataset", "augmented_ratio", "augmented_ratio", float, "", "augmented / decoded size", 1.0
    ),
    Field("model", "size_mb", "model_mb", float, "", "gradient bytes per step"),
    Field("model", "batch_size", "batch_size", int, "", "per-GPU batch size"),
)
_BY_NAME = {f.name: f for f in FIELDS}
_SECTIONS = tuple(dict.fromkeys(f.section for f in FIELDS))


@dataclass(frozen=True)
class Spec:
    """A validated cluster spec, in the units of the TOML file (see the module docstring)."""

    nodes: int
    gpus_per_node: int
    intra_node_nvlink: bool
    inter_node_nvlink: bool
    jobs: int
    gpu_samples_per_s: float
    decode_augment_samples_per_s: float
    augment_samples_per_s: float
    nic_gbit_per_s: float
    pcie_gbyte_per_s: float
    cpu_cores: int
    pipelined: bool
    cache_gb: float
    cache_gbit_per_s: float
    cache_colocated: bool
    storage_mbyte_per_s: float
    samples: int
    sample_kb: float
    inflation: float
    augmented_ratio: float
    model_mb: float
    batch_size: int
    source: str = "<spec>"

    def get(self, name: str) -> Any:
        """The value of ``section.key``."""
        return getattr(self, _field(name, self.source).attr)

    def replace(self, name: str, value: Any) -> Spec:
        """A copy with ``section.key`` set to ``value`` (a number, bool or its text), validated."""
        field = _field(name, "--param")
        if isinstance(value, str):
            value = _from_text(field, value)
        checked = _check(field, value, "--param")
        return dataclasses.replace(self, **{field.attr: checked})

    def as_toml_dict(self) -> dict[str, dict[str, Any]]:
        """The spec as ``{section: {key: value}}``."""
        out: dict[str, dict[str, Any]] = {s: {} for s in _SECTIONS}
        for f in FIELDS:
            out[f.section][f.key] = getattr(self, f.attr)
        return out


def _field(name: str, source: str) -> Field:
    field = _BY_NAME.get(name)
    if field is None:
        known = ", ".join(_BY_NAME)
        raise SpecError(f"{source}: unknown key {name!r}; keys are {known}")
    return field


def _from_text(field: Field, text: str) -> Any:
    text = text.strip()
    try:
        if field.kind is bool:
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            return text.lower() == "true"
        return field.kind(text)
    except ValueError:
        kind = {bool: "true or false", int: "an integer", float: "a number"}[field.kind]
        raise SpecError(f"--param {field.name}: expected {kind}, got {text!r}") from None


def _check(field: Field, value: Any, source: str) -> Any:
    where = f"{source}: [{field.section}] {field.key}"
    if field.kind is bool:
        if not isinstance(value, bool):
            raise SpecError(f"{where}: expected true or false, got {value!r}")
        return value
    if field.kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"{where}: expected an integer, got {value!r}")
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise SpecError(f"{where}: expected a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise SpecError(f"{where}: must be positive and finite, got {value!r}")
    return field.kind(value)


def parse_spec(data: dict[str, Any], source: str = "<spec>") -> Spec:
    """Validate a parsed TOML document and return the :class:`Spec`."""
    for section, body in data.items():
        if section not in _SECTIONS:
            raise SpecError(
                f"{source}: unknown section [{section}]; sections are "
                + ", ".join(f"[{s}]" for s in _SECTIONS)
            )
        if not isinstance(body, dict):
            raise SpecError(f"{source}: [{section}] must be a table, got {body!r}")
        for key in body:
            if f"{section}.{key}" not in _BY_NAME:
                keys = ", ".join(f.key for f in FIELDS if f.section == section)
                raise SpecError(f"{source}: [{section}] {key}: unknown key; [{section}] has {keys}")
    values: dict[str, Any] = {}
    for f in FIELDS:
        body = data.get(f.section, {})
        if f.key not in body:
            if f.default is None:
                raise SpecError(f"{source}: [{f.section}] {f.key}: missing ({f.help})")
            values[f.attr] = f.default
            continue
        values[f.attr] = _check(f, body[f.key], source)
    return Spec(**values, source=source)


def example_names() -> list[str]:
    """Names of the example specs shipped with mdp (the paper's servers)."""
    folder = resources.files("mdp") / "specs"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def example_text(name: str) -> str:
    """The TOML text of the shipped example spec ``name``."""
    return (resources.files("mdp") / "specs" / f"{name}.toml").read_text()


def load_spec(path: str | Path) -> Spec:
    """Read and validate a TOML spec. A bare name of a shipped example (``inhouse``) also works.

    Raises:
        SpecError: unreadable file, bad TOML, or a bad key (the message names file and key).
    """
    path = Path(path)
    if not path.exists() and str(path) in example_names():
        text = example_text(str(path))
        source = f"{path} (example spec)"
    else:
        try:
            text = path.read_text()
        except FileNotFoundError:
            names = ", ".join(example_names())
            raise SpecError(
                f"{path}: no such file, and no example spec of that name (examples: {names})"
            ) from None
        except OSError as e:
            raise SpecError(f"{path}: cannot read the spec: {e.strerror or e}") from None
        except UnicodeDecodeError:
            raise SpecError(f"{path}: not a text file") from None
        source = str(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{source}: not valid TOML: {e}") from None
    return parse_spec(data, source)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)  # shortest round-trip text; valid TOML for finite floats and ints


def spec_toml(spec: Spec, notes: dict[str, str] | None = None, header: str = "") -> str:
    """The spec as TOML text; ``notes`` maps ``section.key`` to a trailing comment."""
    notes = notes or {}
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    for section in _SECTIONS:
        if lines:
            lines.append("")
        lines.append(f"[{section}]")
        for f in (f for f in FIELDS if f.section == section):
            entry = f"{f.key} = {_toml_value(getattr(spec, f.attr))}"
            comment = "  ".join(x for x in (f.symbol, notes.get(f.name, "")) if x)
            lines.append(f"{entry:<40} # {comment}" if comment else entry)
    return "\n".join(lines) + "\n"
