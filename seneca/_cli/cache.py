"""``seneca cache status|clear|gc|metrics [URL]``: what a cache holds, and its upkeep (without a
URL: this user's embedded cache on this machine); ``seneca cache stop``: let a kept embedded
cache stop."""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from typing import Any

from ods import defaults as ods_defaults
from seneca._cache.client import CacheClient
from seneca._cache.embedded import KEEP_ENV, embedded_url, stop_embedded
from seneca._cache.status import CacheStatus, DatasetStatus
from seneca_base.errors import ConfigError
from seneca_base.tiers import NOTATION
from seneca_base.units import format_size

__all__ = ["add_cache", "run_cache"]


def add_cache(sub: Any) -> None:
    """The ``cache`` command and its subcommands."""
    c = sub.add_parser("cache", help="what a cache holds: status, clear, gc, metrics, stop")
    cs = c.add_subparsers(dest="action", required=True)

    def common(p: argparse.ArgumentParser, json_out: bool = True) -> None:
        p.add_argument(
            "url",
            nargs="?",
            help="the cache, e.g. redis://host:6379 or unix:///path.sock (default: this "
            "user's embedded cache on this machine)",
        )
        p.add_argument("--dataset", action="append", help="only this dataset (repeatable)")
        p.add_argument("--prefix", default=ods_defaults.KEY_PREFIX, help="key prefix")
        if json_out:
            p.add_argument("--json", action="store_true", help="print JSON")

    common(cs.add_parser("status", help="tiers, jobs, hit rates and memory per dataset"))
    cl = cs.add_parser("clear", help="delete datasets (--dataset ID, or --all)")
    common(cl)
    cl.add_argument("--all", action="store_true", help="every dataset found")
    cl.add_argument("--force", action="store_true", help="also datasets with live jobs")
    gc = cs.add_parser("gc", help="what no job can use any more (a dry run by default)")
    common(gc)
    gc.add_argument("--apply", action="store_true", help="delete it (default: only report)")
    m = cs.add_parser("metrics", help="the status as Prometheus metrics")
    common(m)
    m.add_argument("--serve", type=int, metavar="PORT", help="serve /metrics on PORT")
    m.add_argument("--addr", default="127.0.0.1", help="address to serve on")
    cs.add_parser(
        "stop",
        help="stop this user's embedded cache now (or, while jobs use it, when the last ends), "
        f"idle or kept with {KEEP_ENV}=1",
    )


def _dataset_lines(d: DatasetStatus) -> list[str]:
    samples = "?" if d.samples is None else f"{d.samples:,}"
    shards = f" (metadata in {d.shards} shards)" if d.shards > 1 else ""
    lines = [f"dataset {d.dataset} ({d.about or 'unknown'}), {samples} samples{shards}"]
    if d.share is not None:
        asks = f"asks {format_size(d.want)}" if d.want else "asks whatever the node gives"
        lines.append(f"  share of the node: {format_size(d.share)} ({asks})")
    lines.append(f"  {'tier':<24} {'bytes':>10} {'entries':>10} {'budget':>10}")
    for t in d.tiers:
        budget = "?" if t.budget is None else format_size(t.budget)
        name = t.tier + (f" ({t.form[2:]})" if t.form.startswith("a:") else "")
        lines.append(f"  {name:<24} {format_size(t.bytes):>10} {t.entries:>10,} {budget:>10}")
    per = ", ".join(f"{k} {v / d.served:.1%}" for k, v in d.hits.items() if d.served)
    lines.append(
        f"  served {d.served:,} samples, hit rate {d.hit_rate:.1%}"
        + (f" ({per})" if per else "")
        + f", {d.substitutions:,} substitutions"
    )
    if d.plan is not None:
        lines += _plan_lines(d.plan)
    lines.append(f"  jobs: {d.live_jobs} live of {len(d.jobs)}")
    for j in d.jobs:
        state = "live" if j.live else f"lease ran out {-j.lease_left_s:,.0f} s ago"
        where = (
            f"epoch {j.epoch:>3}  {j.progress:6.1%} of {j.samples:,}"
            if j.ods
            else "without ODS (no epochs here)"
        )
        lines.append(f"    {j.name:<40} {where}  hit rate {j.hit_rate:.1%}  {state}")
    return lines


#: The plan's inputs ``seneca cache status`` shows (all are in ``--json``).
_PLAN_INPUTS = (
    ("cluster.jobs", "jobs", "{:.0f}"),
    ("node.decode_augment_samples_per_s", "decode+transform/s", "{:,.0f}"),
    ("node.augment_samples_per_s", "transform/s", "{:,.0f}"),
    ("cache.bandwidth_gbit_per_s", "cache Gbit/s", "{:,.2f}"),
    ("storage.bandwidth_mbyte_per_s", "storage MB/s", "{:,.0f}"),
    ("dataset.sample_kb", "sample KB", "{:,.1f}"),
    ("dataset.inflation", "inflation", "{:.2f}"),
    ("dataset.augmented_ratio", "augmented/decoded", "{:.2f}"),
)


def _plan_lines(p: Any) -> list[str]:
    """The shared plan and the inputs it was planned from (* measured)."""
    lines = [f"  plan ({NOTATION}): {p.describe()}; by {p.by}"]
    shown = []
    for name, label, fmt in _PLAN_INPUTS:
        if name in p.inputs:
            mark = "*" if name in p.measured else ""
            shown.append(f"{label} {fmt.format(p.inputs[name])}{mark}")
    lines.append("    from " + ", ".join(shown) + " (* measured)")
    return lines


def format_status(s: CacheStatus) -> str:
    """``seneca cache status``'s text."""
    cap = format_size(s.maxmemory) if s.maxmemory else "no limit"
    out = [
        f"cache {s.url}: {format_size(s.used_memory)} used of {cap} "
        f"(maxmemory-policy {s.maxmemory_policy}), {len(s.datasets)} dataset(s)"
    ]
    if s.tiers_total is not None:
        out.append(
            f"  the datasets' tiers share {format_size(s.tiers_total)} (budgets below: in force)"
        )
    for d in s.datasets:
        out += _dataset_lines(d)
    return "\n".join(out)


def _status_json(s: CacheStatus) -> dict[str, Any]:
    out = dataclasses.asdict(s)
    for d, raw in zip(s.datasets, out["datasets"], strict=True):
        raw["hit_rate"], raw["live_jobs"] = d.hit_rate, d.live_jobs
        raw["plan"] = None if d.plan is None else json.loads(d.plan.to_json())  # as stored
        for j, rj in zip(d.jobs, raw["jobs"], strict=True):
            rj["progress"], rj["hit_rate"], rj["ods"] = j.progress, j.hit_rate, j.ods
    return out


def _gc(client: CacheClient, args: argparse.Namespace) -> None:
    from seneca._cache.maintenance import collect_garbage

    r = collect_garbage(client.redis, args.apply, args.dataset, args.prefix)
    if args.json:
        print(json.dumps(dataclasses.asdict(r), indent=2))
        return
    verb = "removed" if r.applied else "would remove (dry run; --apply deletes)"
    print(f"gc of {client.redacted}: {verb}:")
    print(f"  {len(r.expired_jobs)} job(s) whose lease ran out, {r.job_keys} job key(s)")
    for d, name in r.expired_jobs:
        print(f"    {d}: {name}")
    for d, view, n, size in r.views:
        print(
            f"  augmented tier of view {view!r} of {d} (no live job): "
            f"{n:,} entries, {format_size(size)}"
        )
    print(f"  {r.orphan_values:,} value(s) no entry refers to, {format_size(r.orphan_bytes)}")


def _metrics(client: CacheClient, args: argparse.Namespace) -> None:
    from prometheus_client import generate_latest, start_http_server

    from seneca._cache.metrics import registry_for
    from seneca._cache.status import cache_status

    registry = registry_for(
        lambda: cache_status(client.redis, client.redacted, args.dataset, args.prefix)
    )
    if args.serve is None and args.json:  # the samples as JSON: name, labels, value
        samples = [
            {"name": x.name, "labels": x.labels, "value": x.value}
            for family in registry.collect()
            for x in family.samples
        ]
        print(json.dumps({"metrics": samples}, indent=2))
        return
    if args.serve is None:
        print(generate_latest(registry).decode(), end="")
        return
    start_http_server(args.serve, addr=args.addr, registry=registry)
    print(
        f"serving metrics of {client.redacted} on http://{args.addr}:{args.serve}/metrics",
        flush=True,
    )
    while True:
        time.sleep(3600)


def run_cache(args: argparse.Namespace) -> None:
    """Run ``seneca cache <action>``."""
    if args.action == "stop":
        users = stop_embedded()
        if users:
            print(
                f"the embedded cache still serves {users} process(es) on this machine: it stops "
                "as soon as the last of them exits"
            )
        else:
            print("the embedded cache is stopped")
        return
    client = CacheClient(args.url or embedded_url())
    client.ping()
    if args.action == "status":
        from seneca._cache.status import cache_status

        s = cache_status(client.redis, client.redacted, args.dataset, args.prefix)
        print(json.dumps(_status_json(s), indent=2) if args.json else format_status(s))
    elif args.action == "clear":
        from seneca._cache.maintenance import clear_datasets

        if not args.dataset and not args.all:
            raise ConfigError(
                "clear: name the datasets with --dataset ID (see `seneca cache status`), or "
                "give --all to delete every dataset"
            )
        if args.dataset and args.all:
            raise ConfigError("clear: give --dataset or --all, not both")

        deleted = clear_datasets(client.redis, args.dataset, args.force, args.prefix)
        if args.json:
            print(json.dumps(deleted, indent=2))
        for d, n in deleted.items():
            if not args.json:
                print(f"{d}: deleted {n:,} keys")
        if not deleted and not args.json:
            print(f"no Seneca dataset in {client.redacted}")
    elif args.action == "gc":
        _gc(client, args)
    else:
        _metrics(client, args)
