"""``seneca hit-path``: the loader's cache-hit path against raw Redis MGET, side by side.

The values are augmented samples (the transform's random head applied, uint8) that job ``a``
admitted while job ``b`` was live (joined, never served); ``--repeats`` times. Each fill is
then read ``--passes`` times by the three, in turns, with the same keys in batches of
``--batch-size``:

* ``redis-py MGET``: ``redis.Redis.mget`` (hiredis) of the value keys: the bytes arrive;
* ``socket MGET``: the same through ``seneca._cache.resp`` (each value read into its own buffer);
* ``loader``: a fresh job's SenecaLoader epoch with ODS, no workers, the transform ending at
  ``PILToTensor`` so that batches are the collated uint8 images: every sample is a hit, and the
  path includes the ODS decisions, pin releases, the codec and collation.

Rates are value bytes per second of wall time; the loader's is ``stats()["bytes_cache"]`` over
its epoch. The best turn of each is reported (the machine is shared and noisy), and the medians
over the turns of the loader's rate over redis-py's and over the socket's in the same turn.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from ods.store import allocated
from seneca import defaults
from seneca._bench.provenance import provenance
from seneca_base.errors import ConfigError

__all__ = ["format_hit_path", "run_hit_path"]


def _dataset(data: str, samples: int, crop: int) -> Any:
    from torchvision.datasets import ImageFolder
    from torchvision.transforms import v2

    ds = ImageFolder(
        data,
        transform=v2.Compose(
            [
                v2.RandomResizedCrop(crop, antialias=True),
                v2.RandomHorizontalFlip(),
                v2.PILToTensor(),
            ]
        ),
    )
    if samples > len(ds):
        raise ConfigError(f"--samples: {samples} is more than the {len(ds)} images in {data}")
    ds.samples = ds.samples[:samples]
    ds.targets = ds.targets[:samples]
    ds.imgs = ds.samples
    return ds


def _loader(ds: Any, url: str, job: str, batch: int, size: int) -> Any:
    from seneca.loader import SenecaLoader

    return SenecaLoader(
        ds, batch_size=batch, shuffle=True, cache=url, cache_size=size, split=(0, 0, 1), job=job
    )


def _timed(fn: Any) -> tuple[float, int]:
    start = time.perf_counter()
    nbytes = fn()
    return time.perf_counter() - start, nbytes


def _fill(ds: Any, url: str, rnd: int, batch_size: int, size: int) -> Any:
    """Cache every sample's augmented value: job a's epoch while job b is live. Returns the
    store (b stays live while it is renewed, so that nobody drops those values)."""
    from seneca._bench.harness import clear_cache

    clear_cache(url)
    a = _loader(ds, url, f"hit-a{rnd}", batch_size, size)
    store = a.store
    store.join(f"hit-b{rnd}")  # a second live job, so a's epoch admits augmented samples
    renewed = time.monotonic()
    for _ in a:  # its lease is renewed while a's epoch runs, however slowly the batches come
        if time.monotonic() - renewed > store.lease_ms / 4000:
            store.join(f"hit-b{rnd}")
            renewed = time.monotonic()
    return store


def _turn(ds: Any, url: str, client: Any, batches: list, job: str, size: int) -> dict:
    """One turn of the three reads of the cached values: bytes per second of each."""
    from seneca._cache.resp import execute

    rates = {}
    for name, fetch in (
        ("redis-py MGET", client.mget),
        ("socket MGET", lambda b: execute(client, [("MGET", *b)])[0]),
    ):
        seconds, nbytes = _timed(
            lambda fetch=fetch: sum(len(v) for chunk in batches for v in fetch(chunk))
        )
        rates[name] = nbytes / seconds
    c = _loader(ds, url, job, len(batches[0]), size)
    seconds, _ = _timed(lambda: sum(x.numel() for x, _ in c))
    stats = c.stats()
    samples = sum(len(b) for b in batches)
    if stats["augmented"]["hits"] != samples:
        raise ConfigError(f"the loader hit {stats['augmented']['hits']} of {samples} samples")
    rates["loader"] = stats["bytes_cache"] / seconds
    return rates


def run_hit_path(
    data: str,
    samples: int = 1000,
    batch_size: int = 32,
    crop: int = 224,
    repeats: int = 3,
    cache: str | None = None,
    out: str | None = None,
    passes: int = 3,
) -> dict[str, Any]:
    """Measure the three rates (see the module docstring): ``repeats`` fills of the cache,
    each read ``passes`` times by all three in turn; returns and optionally writes them."""
    import redis

    from seneca._bench.harness import clear_cache
    from seneca._cache.embedded import acquire_embedded

    if samples < batch_size or batch_size < 1 or repeats < 1 or passes < 1:
        raise ConfigError("--samples must be >= --batch-size >= 1; --repeats, --passes >= 1")
    ds = _dataset(data, samples, crop)
    # what the cache charges each value: the allocator's size class of its bytes (header
    # included) and the entry's overhead, as the loader's store counts it
    size = samples * (allocated(3 * crop * crop + 4096) + defaults.ENTRY_OVERHEAD)
    url = cache or acquire_embedded(2 * size + 64_000_000, name="hitpath", idle=0)
    rates: dict[str, list[float]] = {"redis-py MGET": [], "socket MGET": [], "loader": []}
    for rnd in range(repeats):
        store = _fill(ds, url, rnd, batch_size, size)
        keys = [store.value_key("augmented", i) for i in range(samples)]
        client = redis.Redis.from_url(url)
        if any(v is None for v in client.mget(keys)):
            raise ConfigError("the cache did not keep every augmented sample; is it too small?")
        batches = [keys[k : k + batch_size] for k in range(0, samples, batch_size)]
        for turn in range(passes):
            store.join(f"hit-b{rnd}")
            for name, rate in _turn(ds, url, client, batches, f"hit-c{rnd}.{turn}", size).items():
                rates[name].append(rate)
        client.close()
    clear_cache(url)
    best = {name: max(v) for name, v in rates.items()}
    ratios = [x / y for x, y in zip(rates["loader"], rates["redis-py MGET"], strict=True)]
    to_socket = [x / y for x, y in zip(rates["loader"], rates["socket MGET"], strict=True)]
    result = {
        "samples": samples,
        "batch_size": batch_size,
        "value_bytes": 3 * crop * crop,
        "rounds": rates,
        "best_bytes_per_s": best,
        "loader_vs_redis_py": best["loader"] / best["redis-py MGET"],
        "loader_vs_socket": best["loader"] / best["socket MGET"],
        "median_turn_loader_vs_redis_py": statistics.median(ratios),
        "median_turn_loader_vs_socket": statistics.median(to_socket),
        "provenance": provenance(),
    }
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        Path(out, "hit_path.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def format_hit_path(result: dict[str, Any]) -> str:
    """The result as a markdown table."""
    lines = [
        f"{result['samples']} augmented values of {result['value_bytes']:,} B, "
        f"batches of {result['batch_size']} (best of {len(result['rounds']['loader'])} turns)",
        "",
        "| path | MB/s | loader / this |",
        "|---|---|---|",
    ]
    loader = result["best_bytes_per_s"]["loader"]
    for name, rate in result["best_bytes_per_s"].items():
        lines.append(f"| {name} | {rate / 1e6:,.0f} | {loader / rate:.2f} |")
    median = result["median_turn_loader_vs_redis_py"]
    socket = result["median_turn_loader_vs_socket"]
    lines += [
        "",
        "Median over the turns of the loader's rate over the other's in the same turn: "
        f"redis-py MGET {median:.2f}, socket MGET {socket:.2f}",
    ]
    return "\n".join(lines)
