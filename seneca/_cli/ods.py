"""``ods`` command line: ``ods simulate``.

Exit status: 0 on success, 2 for a bad option or an unreachable cache (the message says which).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

import redis

from ods import defaults as ods_defaults
from ods.servertime import THRESHOLD_US
from ods.simulate import BASELINES, SIM_TIERS, SimConfig, simulate_baseline, simulate_ods
from ods.store import POLICIES
from seneca import defaults
from seneca._cli._run import run_command
from seneca_base.errors import ConfigError

__all__ = ["main"]


def _speeds(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers such as 1,2,3, got {text!r}") from None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ods", description="Opportunistic data sampling (ODS)")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("simulate", help="hit rates of ODS and baselines, payload-free")
    s.add_argument("--samples", type=int, required=True, help="samples in the dataset (N)")
    s.add_argument("--jobs", type=int, required=True, help="concurrent jobs (K)")
    s.add_argument("--cache-frac", type=float, required=True, help="cache size / N (0-1)")
    s.add_argument("--speeds", type=_speeds, default=(), help="relative job speeds, e.g. 1,2,3")
    s.add_argument(
        "--starts",
        type=_speeds,
        default=(),
        help="each job's start, in epochs of a job of speed 1, e.g. 0,0.5,1 (default: together)",
    )
    s.add_argument("--batch", type=int, default=64, help="batch size (default 64)")
    s.add_argument("--epochs", type=int, default=3, help="epochs per job (default 3)")
    s.add_argument("--policy", choices=POLICIES, default="seneca", help="ODS cache policy")
    s.add_argument(
        "--compare",
        action="store_true",
        help="also run the other ODS policies and " + ", ".join(BASELINES),
    )
    s.add_argument("--cache", help="Redis URL (default: a private embedded server)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--max-batches", type=int, default=None, help="stop after this many batches")
    s.add_argument(
        "--tier",
        choices=SIM_TIERS,
        default="encoded",
        help="the cache's tier: encoded (any job reads a copy again) or augmented (crops: a job "
        "reads each once, never its own; no baselines)",
    )
    s.add_argument(
        "--promise",
        action="store_true",
        help="a miss the engine promised (another job is making it) is read from that job's "
        "copy once the batch is made, as SenecaLoader's workers do (a load if it is not cached "
        "then); without it, loaded like any miss",
    )
    s.add_argument(
        "--in-making",
        type=int,
        default=0,
        help="batches each job has in the making: a batch's misses are admitted after the "
        "job's next K calls, as a loader's workers make them (default 0: at once)",
    )
    s.add_argument(
        "--together",
        type=int,
        default=1,
        help="calls each job makes at a time, as a loader's workers that started together "
        "decide their batches together (default 1)",
    )
    s.add_argument(
        "--swap-every",
        type=int,
        default=0,
        help="a batch's misses past its first M are swapped, when the batch is made, for "
        "copies cached since it was decided, as SenecaLoader's workers do (default 0: none)",
    )
    s.add_argument(
        "--shard-size",
        type=int,
        default=ods_defaults.SHARD_SIZE,
        help="a dataset of more samples keeps its metadata in shards of at most this many "
        f"samples, each in its own hash slot (default {ods_defaults.SHARD_SIZE:,})",
    )
    s.add_argument("--json", action="store_true", help="print JSON")
    return p


def _row(r: dict) -> str:
    per_job = " ".join(f"{j['hit_rate']:.2f}" for j in r["jobs"]) if "jobs" in r else "-"
    lat = r.get("decision_ms")
    lat_text = f"{lat['p50']:.2f} / {lat['p99']:.2f}" if lat else "-"
    mem = r.get("metadata_bytes")
    mem_text = f"{mem / 1e3:,.1f} KB" if mem is not None else "-"
    return (
        f"{r['loader']:<12} {r['hit_rate']:>8.3f}  {per_job:<24} {r['storage_loads']:>13,}"
        f"  {r['loads_per_sample']:>12.3f}  {lat_text:>17}  {mem_text:>12}"
    )


def _ceiling_row(r: dict) -> dict:
    best = r["ceiling"]
    per = best["storage_loads"] / r["served"] if r["served"] else 0.0
    return {"loader": "ceiling", **best, "loads_per_sample": per}


def _causes(r: dict) -> str:
    c = r["loads_by_cause"]
    return (
        f"{r['loader']} loads: {c['first']:,} first, {c['dropped_needed']:,} dropped while the "
        f"job needed them, {c['not_needed']:,} dropped while it did not, {c['prefetch']:,} "
        f"prefetched; {c['evicted_needed']:,} evictions of copies a live job needed"
    )


def _client(url: str | None) -> redis.Redis:
    from seneca._cache.client import CacheClient

    if url is None:
        from seneca._cache.embedded import acquire_embedded

        url = acquire_embedded(defaults.CACHE_SIZE, name="ods-simulate")
    client = CacheClient(url)
    client.ping()
    return client.redis


def _simulate(args: argparse.Namespace) -> None:
    if args.max_batches is not None and args.max_batches <= 0:
        raise ConfigError(f"--max-batches: must be positive, got {args.max_batches}")
    cfg = SimConfig(
        samples=args.samples,
        jobs=args.jobs,
        cache_frac=args.cache_frac,
        speeds=args.speeds,
        starts=args.starts,
        batch=args.batch,
        epochs=args.epochs,
        policy=args.policy,
        seed=args.seed,
        max_batches=args.max_batches,
        in_making=args.in_making,
        together=args.together,
        tier=args.tier,
        promise=args.promise,
        swap_every=args.swap_every,
        shard_size=args.shard_size,
    )
    if args.compare:  # the other policies' configurations, checked before any run
        for policy in (p for p in POLICIES if p != cfg.policy):
            dataclasses.replace(cfg, policy=policy)
    client = _client(args.cache)
    result = simulate_ods(client, cfg)
    others = []
    if args.compare:
        for policy in (p for p in POLICIES if p != cfg.policy):
            others.append(simulate_ods(client, dataclasses.replace(cfg, policy=policy)))
        if cfg.tier == "encoded":
            others += [simulate_baseline(b, cfg) for b in BASELINES]
    if args.json:
        print(json.dumps({**result, "config": cfg.__dict__, "compare": others}, indent=2))
        return
    speeds = ",".join(f"{s:g}" for s in cfg.job_speeds())
    starts = f", starts {','.join(f'{s:g}' for s in cfg.starts)}" if cfg.starts else ""
    starts += f", {cfg.in_making} batches in the making" if cfg.in_making else ""
    starts += f", {cfg.together} calls at a time" if cfg.together > 1 else ""
    print(
        f"ods simulate: N={cfg.samples:,}, {cfg.jobs} jobs (speeds {speeds}{starts}), batch "
        f"{cfg.batch}, {cfg.epochs} epochs, cache {cfg.cache_frac:.0%} ({cfg.capacity:,} samples)"
    )
    print(
        f"{'loader':<12} {'hit rate':>8}  {'per job':<24} {'storage loads':>13}"
        f"  {'loads/sample':>12}  {'decision p50/p99':>17}  {'metadata':>12}"
    )
    for r in [result, *others, _ceiling_row(result)]:
        print(_row(r))
    print("ceiling: the fewest loads any policy can make (a hit that saves no load is a prefetch)")
    for r in [result, *others]:
        if "loads_by_cause" in r:
            print(_causes(r))
    if "promised" in result:
        got = result["promised"]
        print(f"promised: {got['taken']:,} misses other jobs were making, {got['kept']:,} read")
    if "swapped" in result:
        print(f"swapped: {result['swapped']:,} misses, for copies cached since their decision")
    _server_rows(result)


def _server_rows(result: dict) -> None:
    server = result.get("server_ms") or {}
    if not server:
        print("server time per call: not measured (CONFIG SET refused)")
        return
    head = f"server time per call (ms; 0: under {THRESHOLD_US} us)"
    print(f"{head:<39} {'calls':>8} {'p50':>8} {'p99':>8} {'max':>8}")
    for cmd, v in server.items():
        print(f"  {cmd:<37} {v['calls']:>8,} {v['p50']:>8.2f} {v['p99']:>8.2f} {v['max']:>8.2f}")
    busy = result.get("server_busy_ms") or []
    if busy and max(busy) > 0:
        each = " / ".join(f"{b / 1000:.2f}" for b in busy)
        rate = result["served"] / (max(busy) / 1000)
        print(
            f"engine calls held {len(busy)} server(s) {each} s; samples decided per second "
            f"of the busiest one's time: {rate:,.0f}"
        )


def main(argv: list[str] | None = None) -> int:
    """Run ``ods``; returns the exit status."""
    return run_command("ods", _parser(), _simulate, argv)


if __name__ == "__main__":
    sys.exit(main())
