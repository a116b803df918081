"""What the ``seneca``, ``mdp`` and ``ods`` commands share: errors become exit status 2."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from importlib import metadata

from seneca_base.errors import SenecaError

__all__ = ["run_command"]


def _version() -> str:
    try:
        return metadata.version("seneca-loader")
    except metadata.PackageNotFoundError:  # run from a checkout that was not installed
        return "unknown"


def run_command(
    prog: str,
    parser: argparse.ArgumentParser,
    run: Callable[[argparse.Namespace], None],
    argv: Sequence[str] | None,
) -> int:
    """Parse ``argv`` (``--version`` included) and run; a SenecaError prints ``PROG COMMAND:
    error: ...`` and gives 2."""
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    args = parser.parse_args(argv)
    try:
        run(args)
    except SenecaError as e:
        print(f"{prog} {args.command}: error: {e}", file=sys.stderr)
        return 2
    return 0
