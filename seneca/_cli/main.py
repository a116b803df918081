"""``seneca`` command line: make-dataset, cache-node, cache (status, clear, gc, metrics),
hit-path, bench, validate-model, accuracy, demo."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any

from seneca import defaults
from seneca._cli._run import run_command
from seneca._cli.cache import add_cache, run_cache
from seneca_base.errors import CacheError, ConfigError
from seneca_base.tiers import NOTATION
from seneca_base.units import parse_size

__all__ = ["main"]


def _image_size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected WIDTHxHEIGHT such as 500x375, got {text!r}"
        ) from None
    return w, h


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="seneca", description="Seneca data loader tools")
    sub = p.add_subparsers(dest="command", required=True)
    _add_tools(sub)
    add_cache(sub)
    _add_bench(sub)
    _add_measurements(sub)
    return p


def _add_tools(sub: Any) -> None:
    """make-dataset and cache-node."""
    m = sub.add_parser("make-dataset", help="write a synthetic photo-like ImageFolder dataset")
    m.add_argument("dir", help="output directory (one folder per class)")
    m.add_argument("--images", type=int, required=True, help="number of images")
    m.add_argument("--classes", type=int, required=True, help="number of classes")
    m.add_argument(
        "--size",
        type=_image_size,
        default=defaults.DATASET_SIZE,
        help="WIDTHxHEIGHT (default 500x375)",
    )
    m.add_argument("--quality", type=int, default=defaults.DATASET_QUALITY, help="JPEG quality")
    m.add_argument("--seed", type=int, default=defaults.DATASET_SEED, help="random seed")
    m.add_argument("--force", action="store_true", help="write into a non-empty directory")

    c = sub.add_parser("cache-node", help="run a standalone cache node in the foreground")
    c.add_argument("--port", type=int, default=defaults.CACHE_NODE_PORT)
    c.add_argument("--maxmemory", required=True, help="cache size, e.g. 64GB")
    c.add_argument(
        "--password-file",
        help="file whose first line is the loaders' password: ACL user 'loader' (Seneca's keys "
        "and functions only) and an 'admin' user; the default user is off",
    )
    c.add_argument(
        "--bind",
        default=defaults.CACHE_NODE_BIND,
        help="addresses to listen on (default 127.0.0.1)",
    )
    c.add_argument(
        "--cluster",
        type=int,
        metavar="N",
        help="run a Redis Cluster of N nodes on ports PORT..PORT+N-1 here (tests, demos)",
    )
    c.add_argument(
        "--cluster-enabled", action="store_true", help="a node of a Redis Cluster formed later"
    )
    c.add_argument(
        "--write-config", metavar="FILE", help="write the node's redis.conf to FILE and exit"
    )
    c.add_argument("--loader-password-file", help="the same as --password-file")
    c.add_argument(
        "--admin-password-file",
        help="ACL user 'admin' (everything; default: a password generated into "
        "PASSWORD_FILE.admin)",
    )
    c.add_argument("--tls-cert", help="serve TLS only, with this certificate (PEM)")
    c.add_argument("--tls-key", help="the certificate's private key (PEM)")
    c.add_argument("--tls-ca", help="CA certificate for clients that present one")


def _add_measurements(sub: Any) -> None:
    """hit-path, accuracy, validate-model and demo."""
    h = sub.add_parser("hit-path", help="the loader's cache-hit path against raw Redis MGET")
    h.add_argument("--data", required=True, help="ImageFolder dataset directory")
    h.add_argument("--samples", type=int, default=1000, help="values cached and read")
    h.add_argument("--batch-size", type=int, default=32)
    h.add_argument("--crop", type=int, default=224, help="RandomResizedCrop size")
    h.add_argument("--repeats", type=int, default=3, help="fills of the cache")
    h.add_argument("--passes", type=int, default=3, help="turns of the three reads per fill")
    h.add_argument("--cache", help="Redis URL (default: a private embedded one)")
    h.add_argument("--out", help="directory for hit_path.json")
    a = sub.add_parser(
        "accuracy", help="test accuracy: DataLoader, Seneca with and without shared crops"
    )
    a.add_argument("--data", default="data/digits", help="where the digits are (written if new)")
    a.add_argument("--jobs", type=int, default=3, help="concurrent jobs per loader")
    a.add_argument("--epochs", type=int, default=15)
    a.add_argument("--cache", default=None, help="Redis URL (default: a private embedded one)")
    a.add_argument("--out", default=None, help="also write the results as JSON here")

    v = sub.add_parser("validate-model", help="MDP models vs measured throughput (Fig. 8)")
    v.add_argument("--data", required=True, help="ImageFolder dataset directory")
    v.add_argument("--spec", default=None, help="cluster spec (default: mdp profile here)")
    v.add_argument("--sizes", default="0.5,1,2", help="encoded dataset size / cache size")
    v.add_argument("--jobs", type=int, default=2, help="concurrent jobs per measurement")
    v.add_argument("--epochs", type=int, default=3, help="epochs per measurement (>= 2)")
    v.add_argument("--crop", type=int, default=224)
    v.add_argument("--workers", type=int, default=0)
    v.add_argument("--loader", default="mdp", help="mdp (the default) or seneca (with ODS)")
    v.add_argument(
        "--storage-mbps", type=float, default=None, help="emulated storage bandwidth (MB/s)"
    )
    v.add_argument(
        "--splits", default=None, help=f"fixed splits measured, {NOTATION},... (default: the six)"
    )
    v.add_argument("--out", required=True, help="directory for points.json and the plot")

    d = sub.add_parser("demo", help="two concurrent training jobs, Seneca vs DataLoader")
    d.add_argument("--data", default="data/demo", help="dataset directory (made if missing)")
    d.add_argument("--images", type=int, default=2000)
    d.add_argument("--iterations", type=int, default=250, help="training steps per job")
    d.add_argument("--rounds", type=int, default=2, help="rounds of both loaders, interleaved")


def _add_bench(sub: Any) -> None:
    """bench."""
    b = sub.add_parser("bench", help="all loaders with K concurrent jobs, side by side")
    b.add_argument("--data", required=True, help="ImageFolder dataset directory")
    b.add_argument("--jobs", default="1,2,3", help="numbers of concurrent jobs, e.g. 1,2,3")
    b.add_argument(
        "--loaders",
        default="pytorch,pytorch-tuned,minio,quiver,mdp,seneca",
        help=f"loaders to compare; mdp@{NOTATION}, seneca@{NOTATION} or seneca@auto: that loader "
        "with a split of its own (one run can compare splits); none: no loader, the ceiling "
        "(one batch made once)",
    )
    b.add_argument(
        "--cache-frac",
        default="0.25",
        help="cache / encoded dataset; several, e.g. 0.1,0.25,0.5: each a configuration",
    )
    b.add_argument("--epochs", type=int, default=2)
    b.add_argument("--batch-size", type=int, default=32)
    b.add_argument(
        "--workers",
        default="0",
        help="loader workers per job (0, the default: each job loads in its own process); "
        "several, e.g. 0,1,2,4: each a configuration",
    )
    b.add_argument(
        "--prefetch-factor",
        type=int,
        default=None,
        help="batches each worker loads ahead, for every loader (DataLoader's default: 2)",
    )
    b.add_argument(
        "--persistent-workers",
        action="store_true",
        help="every loader keeps its workers between epochs (DataLoader's default: off)",
    )
    b.add_argument("--crop", type=int, default=224, help="RandomResizedCrop size")
    b.add_argument("--step-ms", type=float, default=0.0, help="emulated GPU step per batch")
    b.add_argument(
        "--step-gil-ms",
        type=float,
        default=0.0,
        help="of each emulated step, ms spent spinning in Python (holding the GIL, as a loop "
        "launching kernels does) before the rest sleeps",
    )
    b.add_argument(
        "--speeds",
        default=None,
        help="each job's speed, e.g. 1,2,3: job k's emulated step is --step-ms divided by the "
        "k-th (cycled; default: all 1)",
    )
    b.add_argument(
        "--model",
        default=None,
        help="a torchvision model each job trains (resnet18, resnet50, ...) instead of a step",
    )
    b.add_argument(
        "--device",
        default=None,
        help="where batches go and the model trains: cuda, cuda:N or cpu (default: batches stay "
        "on the CPU; with --model, the CPU)",
    )
    b.add_argument("--storage-mbps", type=float, default=None, help="emulated storage MB/s")
    b.add_argument(
        "--split",
        default=None,
        help=f"{NOTATION} for mdp and seneca (default 50-30-20), or auto: the loaders plan it",
    )
    b.add_argument("--plan", default=None, help="plan.json (mdp plan --out) for mdp and seneca")
    b.add_argument("--cache", default=None, help="Redis URL (default: a private embedded one)")
    b.add_argument(
        "--repeats", type=int, default=1, help="rounds of every configuration (medians reported)"
    )
    b.add_argument("--order-seed", type=int, default=0, help="seed of the rounds' run orders")
    b.add_argument(
        "--page-cache",
        choices=("warm", "drop"),
        default="warm",
        help="before each configuration: read every file (warm) or drop their cached pages",
    )
    b.add_argument("--out", required=True, help="directory for results.json, .md and plots")
    t = sub.add_parser(
        "bench-timeline", help="the planned split and throughput as a job joins and one leaves"
    )
    t.add_argument("--data", required=True, help="ImageFolder dataset directory")
    t.add_argument("--epochs", type=int, default=4, help="epochs of each of the two jobs")
    t.add_argument("--join-at", type=int, default=2, help="the first job's epoch the second joins")
    t.add_argument("--cache-frac", type=float, default=0.25, help="cache / encoded dataset")
    t.add_argument("--batch-size", type=int, default=32)
    t.add_argument("--workers", type=int, default=0, help="loader workers per job")
    t.add_argument("--cache", default=None, help="Redis URL (default: a private embedded one)")
    t.add_argument("--out", required=True, help="directory for timeline.json and timeline.png")


def _run(args: argparse.Namespace) -> None:
    if args.command == "make-dataset":
        from seneca._bench.synthetic import make_dataset

        r = make_dataset(
            args.dir,
            args.images,
            args.classes,
            size=args.size,
            quality=args.quality,
            seed=args.seed,
            force=args.force,
        )
        print(
            f"wrote {r['images']} images, {r['bytes'] / 1e6:.1f} MB, "
            f"mean {r['mean_kb']:.1f} KB to {args.dir}"
        )
    elif args.command == "cache-node" and args.cluster is not None:
        from seneca._cache.cluster import run_cache_cluster

        run_cache_cluster(args.cluster, args.port, parse_size(args.maxmemory, "--maxmemory"))
    elif args.command == "cache-node":
        _cache_node(args)
    elif args.command == "cache":
        run_cache(args)
    elif args.command == "bench":
        _bench(args)
    elif args.command == "bench-timeline":
        from seneca._bench.join_leave import TimelineConfig, run_timeline

        opts = ("data", "out", "epochs", "join_at", "cache_frac", "batch_size", "workers", "cache")
        r = run_timeline(TimelineConfig(**{k: getattr(args, k) for k in opts}))
        plans = [e for e in r["events"] if e[0] == "plan"]
        for e in plans:
            print(f"{e[2]:7.1f} s  job {e[1]}: split {e[3]} (version {e[4]}, {e[5]}, {e[6]} jobs)")
        print(f"wrote {args.out}/timeline.json, timeline.png")
    elif args.command == "hit-path":
        from seneca._bench.hitpath import format_hit_path, run_hit_path

        r = run_hit_path(
            args.data,
            args.samples,
            args.batch_size,
            args.crop,
            args.repeats,
            args.cache,
            args.out,
            args.passes,
        )
        print(format_hit_path(r))
    elif args.command == "validate-model":
        _validate(args)
    elif args.command == "accuracy":
        from seneca._bench.accuracy import format_accuracy, run_accuracy

        print(
            format_accuracy(run_accuracy(args.data, args.jobs, args.epochs, args.cache, args.out))
        )
    elif args.command == "demo":
        from seneca._bench.demo import run_demo

        run_demo(args.data, images=args.images, iterations=args.iterations, rounds=args.rounds)


def _cache_node(args: argparse.Namespace) -> None:
    from seneca._cache.server import cache_node_config, node_url, serve_redis_server

    config = cache_node_config(
        port=args.port,
        maxmemory=parse_size(args.maxmemory, "--maxmemory"),
        password_file=args.password_file,
        bind=args.bind,
        loader_password_file=args.loader_password_file,
        admin_password_file=args.admin_password_file,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_ca=args.tls_ca,
        cluster=args.cluster_enabled,
    )
    if args.write_config is None:
        login = args.password_file or args.loader_password_file
        url = node_url(args.port, args.bind, args.tls_cert is not None, login and "loader")
        status = serve_redis_server(config, args.port, args.bind, url)
        if status not in (0, -signal.SIGINT, -signal.SIGTERM):
            raise CacheError(f"redis-server exited with status {status}")
        return
    path = Path(args.write_config)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # ACL users' passwords are hashes: readable by the server's own user (a container's)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(config)
    except OSError as e:
        raise ConfigError(f"--write-config: cannot write {path}: {e.strerror}") from None
    print(f"wrote {path} (redis-server {path} runs the node)")


def _int_list(text: str, option: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",")]
    except ValueError:
        raise ConfigError(f"{option}: expected integers such as 1,2,3, got {text!r}") from None


def _float_list(text: str, option: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",")]
    except ValueError:
        raise ConfigError(f"{option}: expected numbers such as 0.1,0.25, got {text!r}") from None


def _bench(args: argparse.Namespace) -> None:
    from mdp.planfile import load_plan
    from seneca._bench.harness import BenchConfig, run_bench
    from seneca._bench.report import format_targets, markdown, targets

    if args.split and args.plan:
        raise ConfigError("give --split or --plan, not both")
    split = BenchConfig.__dataclass_fields__["split"].default
    if args.plan:
        split = tuple(load_plan(args.plan).split.fractions.values())
    elif args.split == "auto":
        split = "auto"  # each job's loader plans the split itself
    elif args.split:
        from seneca_base.split import Split

        split = tuple(Split.parse(args.split).fractions.values())
    cfg = BenchConfig(
        data=args.data,
        out=args.out,
        jobs=_int_list(args.jobs, "--jobs"),
        loaders=[v.strip() for v in args.loaders.split(",") if v.strip()],
        cache_frac=_float_list(args.cache_frac, "--cache-frac"),
        epochs=args.epochs,
        batch_size=args.batch_size,
        workers=_int_list(args.workers, "--workers"),
        prefetch_factor=args.prefetch_factor,
        persistent_workers=args.persistent_workers,
        crop=args.crop,
        step_ms=args.step_ms,
        step_gil_ms=args.step_gil_ms,
        speeds=_float_list(args.speeds, "--speeds") if args.speeds else [],
        model=args.model,
        device=args.device,
        storage_mbps=args.storage_mbps,
        split=split,
        cache=args.cache,
        repeats=args.repeats,
        order_seed=args.order_seed,
        page_cache=args.page_cache,
    )
    result = run_bench(cfg)
    print(markdown(result), end="")
    from seneca._bench import splits

    rows = splits.compare(result)
    if rows:
        print(f"\nthe planned split against fixed ones:\n{splits.markdown(rows)}", end="")
    if targets(result, 3):  # the headline targets are stated for 3 concurrent jobs
        print(f"\ntargets at 3 jobs:\n{format_targets(result, 3)}")
    print(f"\nwrote {args.out}/results.json, results.md, throughput.png, decodes.png")


def _validate(args: argparse.Namespace) -> None:
    from seneca._bench.validate import SPLITS, run_validation
    from seneca_base.split import Split

    try:
        sizes = tuple(float(v) for v in args.sizes.split(","))
    except ValueError:
        raise ConfigError(
            f"--sizes: expected numbers such as 0.5,1,2, got {args.sizes!r}"
        ) from None
    splits = SPLITS
    if args.splits:
        splits = tuple(Split.parse(t, "--splits").percent for t in args.splits.split(","))
    r = run_validation(
        args.data,
        args.out,
        spec=args.spec,
        sizes=sizes,
        jobs=args.jobs,
        epochs=args.epochs,
        crop=args.crop,
        workers=args.workers,
        loader=args.loader,
        storage_mbps=args.storage_mbps,
        splits=splits,
    )
    print(f"{'size':>5} {'split':<9} {'measured':>9} {'paper':>9} {'shared':>9}")
    for p in r["points"]:
        mark = "  (planned)" if p["planned"] else ""
        print(
            f"{p['size_ratio']:>5g} {p['split']:<9} {p['measured']:>9.1f} "
            f"{p['paper']:>9.1f} {p['shared']:>9.1f}{mark}"
        )
    for model in ("paper", "shared"):
        m = r[model]
        lines = ", ".join(f"{k} {v:.3f}" for k, v in m["pearson_r_per_split"].items())
        print(f"{model:<7} Pearson r {m['pearson_r']:.3f}, MAPE {m['mape']:.1f}%")
        print(f"        Pearson r per split over the sizes: {lines}")
    planned = ", ".join(f"size {k}: {v:.1%}" for k, v in r["planned_vs_best"].items())
    print(f"planned split, measured, vs the best measured split: {planned}")
    print(f"wrote {args.out}/points.json and validation.png")


def main(argv: list[str] | None = None) -> int:
    """Run ``seneca``; returns the exit status."""
    return run_command("seneca", _parser(), _run, argv)


if __name__ == "__main__":
    sys.exit(main())
