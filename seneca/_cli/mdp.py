"""``mdp`` command line: plan, predict, sweep, profile, bench, examples.

Exit status: 0 on success, 2 for a bad option, spec or data (the message names it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mdp.planner import DEFAULT_MODEL, MODELS, Prediction, plan, predict, sweep
from mdp.report import format_prediction, format_sweep, plot_sweep
from mdp.spec import Spec, example_names, example_text, load_spec
from seneca._cli._run import run_command
from seneca_base.errors import ConfigError
from seneca_base.tiers import NOTATION

__all__ = ["main"]


def _add_model(p: argparse.ArgumentParser, tolerance: bool = True) -> None:
    p.add_argument(
        "--model",
        choices=MODELS,
        default=DEFAULT_MODEL,
        help="shared (default): the forms share CPU, cache link and storage at once; paper: Eq. 9",
    )
    if tolerance:
        p.add_argument(
            "--tolerance",
            type=float,
            default=0.0,
            help="splits within this relative throughput of the best count as ties "
            "(broken toward caching more samples, then less preprocessing); default 0",
        )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mdp",
        description="Model-driven partitioning: split a Seneca cache between the encoded, "
        "decoded and augmented forms (Seneca paper §5.1).",
    )
    sub = p.add_subparsers(dest="command", required=True)
    spec_help = "cluster spec (TOML), or the name of a shipped example (see 'mdp examples')"

    pl = sub.add_parser("plan", help="the best split for a cluster spec")
    pl.add_argument("spec", help=spec_help)
    _add_model(pl)
    pl.add_argument(
        "--min-gain",
        type=float,
        default=0.0,
        help="cache more than the fewest samples only when that is predicted to gain more "
        "than this fraction (filling a cache costs what the model does not charge); default 0",
    )
    pl.add_argument("--json", action="store_true", help="print JSON instead of the table")
    pl.add_argument("--out", help="also write the plan as JSON here (for SenecaLoader(plan=...))")

    pr = sub.add_parser("predict", help="the model's prediction for one split")
    pr.add_argument("spec", help=spec_help)
    pr.add_argument("--split", required=True, help=f"{NOTATION} in whole percent, e.g. 40-59-1")
    _add_model(pr, tolerance=False)
    pr.add_argument("--json", action="store_true", help="print JSON instead of the table")
    pr.add_argument("--out", help="also write the prediction as JSON here")

    sw = sub.add_parser("sweep", help="the best split as one spec value varies")
    sw.add_argument("spec", help=spec_help)
    sw.add_argument("--param", required=True, help="SECTION.KEY, e.g. dataset.samples")
    sw.add_argument("--values", required=True, help="comma-separated values, e.g. 1,2,4")
    _add_model(sw)
    sw.add_argument("--plot", help="write a PNG plot here")
    sw.add_argument("--json", action="store_true", help="print JSON instead of the table")

    pf = sub.add_parser("profile", help="measure this machine and write a cluster spec")
    pf.add_argument("--data", required=True, help="ImageFolder-style dataset directory")
    pf.add_argument("--cache", help="Redis URL to measure (default: the embedded cache)")
    pf.add_argument("--workers", type=int, default=None, help="worker processes (default: CPUs)")
    pf.add_argument("--out", required=True, help="spec file (TOML) to write")
    pf.add_argument("--base", help="spec whose values fill what cannot be measured here")
    pf.add_argument("--seconds", type=float, default=None, help="time per measurement")
    pf.add_argument("--sample-count", type=int, default=None, help="images to measure with")

    b = sub.add_parser("bench", help="time planning (goal: well under 1 s per spec)")
    b.add_argument("specs", nargs="*", help="specs to time (default: the shipped examples)")
    b.add_argument("--repeat", type=int, default=20, help="plan() runs per spec and model")

    sub.add_parser("examples", help="list the example specs shipped with mdp")
    return p


def _emit(args: argparse.Namespace, pred: Prediction, spec: Spec, title: str) -> None:
    data = pred.to_json()
    if args.out:
        _write(args.out, json.dumps(data, indent=2) + "\n")
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(format_prediction(pred, spec, title), end="")
        if args.out:
            print(f"\nwrote {args.out}")


def _write(path: str, text: str) -> None:
    try:
        Path(path).write_text(text)
    except OSError as e:
        raise ConfigError(f"--out {path}: cannot write: {e.strerror or e}") from None


def _values(text: str) -> list[str]:
    values = [v.strip() for v in text.split(",")]
    if not text.strip() or any(not v for v in values):
        raise ConfigError(f"--values: expected comma-separated values such as 1,2,4, got {text!r}")
    return values


def _run(args: argparse.Namespace) -> None:
    if args.command == "examples":
        for name in example_names():
            title = example_text(name).splitlines()[0].lstrip("# ")
            print(f"{name:<18} {title}")
        return
    if args.command == "bench":
        from mdp.bench import run_bench

        if args.repeat <= 0:
            raise ConfigError(f"--repeat: must be positive, got {args.repeat}")
        mdp = [sys.executable, "-m", "seneca._cli.mdp"]  # this command, a fresh process
        run_bench(args.specs or example_names(), mdp, args.repeat)
        return
    if args.command == "profile":
        from seneca._bench.profile import profile_command

        profile_command(
            data=args.data,
            cache=args.cache,
            workers=args.workers,
            out=args.out,
            base=args.base,
            seconds=args.seconds,
            sample_count=args.sample_count,
        )
        return
    spec = load_spec(args.spec)
    if args.command == "plan":
        pred = plan(spec, args.model, tolerance=args.tolerance, min_gain=args.min_gain)
        _emit(args, pred, spec, f"mdp plan {args.spec}")
    elif args.command == "predict":
        pred = predict(spec, args.split, args.model)
        _emit(args, pred, spec, f"mdp predict {args.spec}")
    elif args.command == "sweep":
        results = sweep(spec, args.param, _values(args.values), args.model, args.tolerance)
        title = f"mdp sweep {args.spec} --param {args.param}"
        if args.json:
            print(json.dumps([{"value": v, **p.to_json()} for v, p in results], indent=2))
        else:
            counts = [spec.replace(args.param, v).samples for v, _ in results]
            print(format_sweep(args.param, results, counts, title), end="")
        if args.plot:
            try:
                plot_sweep(args.param, results, args.plot, title)
            except OSError as e:
                raise ConfigError(f"--plot {args.plot}: cannot write: {e.strerror or e}") from None
            if not args.json:
                print(f"\nwrote {args.plot}")


def main(argv: list[str] | None = None) -> int:
    """Run ``mdp``; returns the exit status."""
    return run_command("mdp", _parser(), _run, argv)


if __name__ == "__main__":
    sys.exit(main())
