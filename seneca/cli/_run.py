"""What the ``seneca``, ``mdp`` and ``ods`` commands share: errors become exit status 2."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from seneca_base.errors import SenecaError

__all__ = ["run_command"]


def run_command(
    prog: str,
    parser: argparse.ArgumentParser,
    run: Callable[[argparse.Namespace], None],
    argv: Sequence[str] | None,
) -> int:
    """Parse ``argv`` and run; a SenecaError prints ``PROG COMMAND: error: ...`` and gives 2."""
    args = parser.parse_args(argv)
    try:
        run(args)
    except SenecaError as e:
        print(f"{prog} {args.command}: error: {e}", file=sys.stderr)
        return 2
    return 0
