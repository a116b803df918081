"""``mdp profile``: measure this machine's DSI parameters and write a cluster spec.

Measured here, each in K spawned worker processes that start together and run for a fixed time
(work set up before the clock starts; aggregate = sum of per-worker rates):

* ``node.decode_augment_samples_per_s`` (T_D+A): decode file bytes held in memory and run the
  default training transforms (:func:`seneca.pipeline.transforms.default_train_transform`);
* ``node.augment_samples_per_s`` (T_A): the same transforms on decoded images read back from
  the cache's value format (the decoded-hit path of the loader);
* ``cache.bandwidth_gbit_per_s`` (B_cache): pipelined GETs of the encoded and decoded values of
  the measured images from the cache (``--cache`` or a private embedded cache);
* ``storage.bandwidth_mbyte_per_s`` (B_storage): reads of the dataset's files, with the page
  cache of each file dropped first (``posix_fadvise``; data on tmpfs still reads from memory);
* ``dataset.samples``, ``dataset.sample_kb`` (all files), ``dataset.inflation`` (decoded
  RGB bytes / encoded bytes of the measured images) and ``dataset.augmented_ratio`` (a 224 x 224
  crop's bytes / decoded bytes);
* ``cache.colocated``: whether the cache runs on this machine (loopback, unix socket, embedded);
* ``node.cpu_cores``: the worker processes that measured T_D+A and T_A (``--workers``);
* ``cache.size_gb``: the server's ``maxmemory`` when ``--cache`` sets one.

Everything else (GPU, NIC, PCIe, cluster shape, model) comes from ``--base`` or from
:data:`seneca.defaults.PROFILE_DEFAULTS`, and the written spec says which, key by key.
"""

from __future__ import annotations

import os
import random
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mdp.spec import FIELDS, parse_spec, spec_toml
from mdp.spec import Spec as ClusterSpec
from ods import defaults as ods_defaults
from seneca import defaults
from seneca._bench.spawn import ProcessGroup
from seneca.pipeline.storage import Storage
from seneca_base.errors import CacheError, ConfigError, SenecaError

__all__ = ["ProfileResult", "profile_command", "run_profile"]

_GET_BATCH = 32


@dataclass
class ProfileResult:
    """The written spec and, per ``section.key``, where its value came from."""

    spec: ClusterSpec
    sources: dict[str, str]


# -- worker side (spawned processes; heavy imports happen here, not in the parent) ------------


def _setup(kind: str, payload: dict[str, Any]) -> tuple[Any, Any]:
    """Untimed preparation; returns (items, work) where ``work(item)`` returns bytes moved."""
    if kind == "storage":

        def read(path: str) -> int:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                size = 0
                while chunk := os.read(fd, 1 << 20):
                    size += len(chunk)
                return size
            finally:
                os.close(fd)

        return payload["paths"], read
    if kind == "cache":
        from seneca._cache.client import CacheClient

        client = CacheClient(payload["url"]).redis
        keys = payload["keys"]
        batches = [keys[i : i + _GET_BATCH] for i in range(0, len(keys), _GET_BATCH)]

        def fetch(batch: list[str]) -> int:
            pipe = client.pipeline(transaction=False)
            for k in batch:
                pipe.get(k)
            return sum(len(v) for v in pipe.execute() if v is not None)

        return batches, fetch

    import torch

    from seneca.loader.source import pil_decode
    from seneca.pipeline import codec
    from seneca.pipeline.transforms import default_train_transform

    torch.set_num_threads(1)  # as in DataLoader workers
    transform = default_train_transform(defaults.PROFILE_CROP)
    blobs = [Path(p).read_bytes() for p in payload["paths"]]
    if kind == "decode_augment":

        def decode_augment(blob: bytes) -> int:
            transform(pil_decode(blob))
            return 1

        return blobs, decode_augment

    def augment(value: bytes) -> int:
        transform(codec.decode(value))
        return 1

    return [codec.encode(pil_decode(b)) for b in blobs], augment


def _worker(kind: str, payload: dict[str, Any], seconds: float, barrier: Any, out: Any) -> None:
    try:
        items, work = _setup(kind, payload)
        work(items[0])  # warm up (lazy imports, first connection)
        barrier.wait()
        count = amount = 0
        start = time.perf_counter()
        while True:
            for item in items:
                amount += work(item)
                count += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                break
        out.put({"count": count, "amount": amount, "elapsed": elapsed})
    except BaseException as e:  # reported to the parent, which raises
        barrier.abort()
        out.put({"error": f"{type(e).__name__}: {e}"})


def _measure(kind: str, shares: list[dict[str, Any]], seconds: float) -> tuple[float, float]:
    """Aggregate (items/s, amount/s) over one spawned worker per share."""
    group = ProcessGroup(_worker, [(kind, share, seconds) for share in shares])
    try:
        results = group.reports(120 + 4 * seconds, f"profiling {kind}")
    except SenecaError as e:
        raise (CacheError(str(e)) if kind == "cache" else e) from None
    return (
        sum(r["count"] / r["elapsed"] for r in results),
        sum(r["amount"] / r["elapsed"] for r in results),
    )


# -- parent side ---------------------------------------------------------------------------------


def _split(items: list[Any], k: int) -> list[list[Any]]:
    return [items[i::k] for i in range(k) if items[i::k]]


def _base_values(base: str | None) -> tuple[dict[str, Any], str]:
    if base is None:
        return dict(defaults.PROFILE_DEFAULTS), "default (not measurable here)"
    from mdp.spec import load_spec

    spec = load_spec(base)
    return {f.name: spec.get(f.name) for f in FIELDS}, f"from {base}"


def _inflation(paths: list[str], crop: int) -> tuple[float, float]:
    """(decoded / encoded bytes, augmented / decoded bytes) of ``paths``; an augmented sample is
    a ``crop`` x ``crop`` RGB uint8 image (the default transform's output before its tail)."""
    from PIL import Image

    decoded = encoded = 0
    for path in paths:
        with Image.open(path) as img:
            w, h = img.size
        decoded += w * h * 3  # the decoded tier holds RGB uint8
        encoded += os.path.getsize(path)
    return decoded / encoded, crop * crop * 3 * len(paths) / decoded


def _cache_url(cache: str | None, need: int) -> str:
    if cache is not None:
        return cache
    from seneca._cache.embedded import acquire_embedded

    return acquire_embedded(max(4 * need, defaults.CACHE_SIZE), name="profile", idle=0)


def _cache_reads(
    chosen: list[str], cache: str | None, workers: int, seconds: float
) -> tuple[Any, float]:
    """The cache's client and its read bandwidth (bytes/s): the chosen images, encoded and
    decoded, written under keys of their own, read back by ``workers`` processes."""
    from seneca._cache.client import CacheClient
    from seneca.loader.source import pil_decode
    from seneca.pipeline import codec

    blobs = [Path(p).read_bytes() for p in chosen]
    encoded = [codec.encode(b) for b in blobs] + [codec.encode(pil_decode(b)) for b in blobs]
    url = _cache_url(cache, sum(len(v) for v in encoded))
    client = CacheClient(url)
    client.ping()
    prefix = f"{ods_defaults.KEY_PREFIX}:profile:{uuid.uuid4().hex[:12]}"
    keys = [f"{prefix}:{i}" for i in range(len(encoded))]
    try:
        pipe = client.redis.pipeline(transaction=False)
        for key, value in zip(keys, encoded, strict=True):
            pipe.set(key, value)
        pipe.execute()
        random.Random(1).shuffle(keys)
        _, rate = _measure(
            "cache", [{"url": url, "keys": s} for s in _split(keys, workers)], seconds
        )
    except Exception as e:
        if isinstance(e, CacheError):
            raise
        raise CacheError(f"cache {client.redacted}: cannot measure reads: {e}") from None
    finally:
        for i in range(0, len(keys), 500):
            client.redis.delete(*keys[i : i + 500])
    return client, rate


def _checked(
    workers: int | None, seconds: float | None, sample_count: int | None
) -> tuple[int, float, int]:
    """The options of :func:`run_profile`, defaults filled in; errors name the flag."""
    workers = workers if workers is not None else os.cpu_count() or 1
    seconds = seconds if seconds is not None else defaults.PROFILE_SECONDS
    sample_count = sample_count if sample_count is not None else defaults.PROFILE_SAMPLES
    for name, value in (("--workers", workers), ("--seconds", seconds)):
        if value <= 0:
            raise ConfigError(f"{name}: must be positive, got {value!r}")
    if sample_count <= 0:
        raise ConfigError(f"--sample-count: must be positive, got {sample_count!r}")
    return workers, seconds, sample_count


def run_profile(
    data: str,
    cache: str | None = None,
    workers: int | None = None,
    base: str | None = None,
    seconds: float | None = None,
    sample_count: int | None = None,
    progress: bool = True,
) -> ProfileResult:
    """Measure this machine; see the module docstring. Returns the spec and its sources."""
    from tqdm import tqdm

    workers, seconds, sample_count = _checked(workers, seconds, sample_count)
    storage = Storage.from_folder(data)
    paths = [storage.path(i) for i in range(len(storage))]
    chosen = random.Random(0).sample(paths, min(sample_count, len(paths)))
    values, base_source = _base_values(base)
    sources = {name: base_source for name in values}

    def measured(name: str, value: Any, how: str) -> None:
        values[name] = value
        sources[name] = f"measured: {how}"

    sizes = [os.path.getsize(p) for p in paths]
    measured("dataset.samples", len(paths), f"files in {data}")
    measured("dataset.sample_kb", round(sum(sizes) / len(sizes) / 1e3, 3), "mean file size")
    crop = defaults.PROFILE_CROP
    inflation, ratio = _inflation(chosen, crop)
    measured("dataset.inflation", round(inflation, 4), f"{len(chosen)} images")
    measured("dataset.augmented_ratio", round(ratio, 4), f"{crop}x{crop} crops of those images")
    how = f"{workers} workers x {seconds:g} s, {len(chosen)} images"
    steps = tqdm(total=4, desc="mdp profile", unit="step", disable=not progress, leave=False)

    steps.set_postfix_str("storage reads")
    _, rate = _measure("storage", [{"paths": s} for s in _split(chosen, workers)], seconds)
    measured("storage.bandwidth_mbyte_per_s", round(rate / 1e6, 3), f"{how}, page cache dropped")
    steps.update()
    for kind, name in (
        ("decode_augment", "node.decode_augment_samples_per_s"),
        ("augment", "node.augment_samples_per_s"),
    ):
        steps.set_postfix_str(kind.replace("_", " + "))
        rate, _ = _measure(kind, [{"paths": s} for s in _split(chosen, workers)], seconds)
        measured(name, round(rate, 2), how)
        steps.update()
    measured("node.cpu_cores", workers, "the workers that measured T_D+A and T_A")

    steps.set_postfix_str("cache reads")
    _profile_cache(chosen, cache, workers, seconds, how, measured)
    steps.update()
    steps.close()
    toml: dict[str, dict[str, Any]] = {f.section: {} for f in FIELDS}
    for f in FIELDS:
        toml[f.section][f.key] = values[f.name]
    return ProfileResult(parse_spec(toml, "mdp profile"), sources)


def _profile_cache(
    chosen: list[str],
    cache: str | None,
    workers: int,
    seconds: float,
    how: str,
    measured: Any,
) -> None:
    """The cache's read bandwidth, where it runs and (for a URL) its maxmemory."""
    client, rate = _cache_reads(chosen, cache, workers, seconds)
    measured("cache.bandwidth_gbit_per_s", round(rate * 8 / 1e9, 4), f"{how}, GETs in pipelines")
    measured("cache.colocated", client.local, f"cache at {client.redacted}")
    maxmemory = client.maxmemory() if cache else 0
    if maxmemory:
        measured("cache.size_gb", maxmemory / 1e9, f"maxmemory of {client.redacted}")


def profile_command(
    data: str,
    out: str,
    cache: str | None = None,
    workers: int | None = None,
    base: str | None = None,
    seconds: float | None = None,
    sample_count: int | None = None,
) -> ProfileResult:
    """``mdp profile``: measure, print a table of values and sources, write the spec to ``out``."""
    result = run_profile(data, cache, workers, base, seconds, sample_count)
    header = (
        f"Written by `mdp profile --data {data}` on {os.uname().nodename}, "
        f"{time.strftime('%Y-%m-%d %H:%M')}.\nEach value says whether it was measured here."
    )
    text = spec_toml(result.spec, result.sources, header)
    try:
        Path(out).write_text(text)
    except OSError as e:
        raise ConfigError(f"--out {out}: cannot write: {e.strerror or e}") from None
    width = max(len(f.name) for f in FIELDS)
    for f in FIELDS:
        print(f"{f.name:<{width}}  {result.spec.get(f.name)!s:>12}  {result.sources[f.name]}")
    print(f"\nwrote {out}")
    return result
