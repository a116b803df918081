"""``seneca`` command line: make-dataset, cache-node, demo."""

from __future__ import annotations

import argparse
import sys

from seneca import defaults
from seneca._cli import run_command
from seneca._units import parse_size

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
    c.add_argument("--password-file", help="file whose first line is the password")
    c.add_argument(
        "--bind",
        default=defaults.CACHE_NODE_BIND,
        help="addresses to listen on (default 127.0.0.1)",
    )

    d = sub.add_parser("demo", help="two concurrent training jobs, Seneca vs DataLoader")
    d.add_argument("--data", default="data/demo", help="dataset directory (made if missing)")
    d.add_argument("--images", type=int, default=2000)
    d.add_argument("--iterations", type=int, default=150, help="training steps per job")
    return p


def _run(args: argparse.Namespace) -> None:
    if args.command == "make-dataset":
        from seneca.synthetic import make_dataset

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
    elif args.command == "cache-node":
        from seneca.server import run_cache_node

        run_cache_node(
            port=args.port,
            maxmemory=parse_size(args.maxmemory, "--maxmemory"),
            password_file=args.password_file,
            bind=args.bind,
        )
    elif args.command == "demo":
        from seneca.demo import run_demo

        run_demo(args.data, images=args.images, iterations=args.iterations)


def main(argv: list[str] | None = None) -> int:
    """Run ``seneca``; returns the exit status."""
    return run_command("seneca", _parser(), _run, argv)


if __name__ == "__main__":
    sys.exit(main())
