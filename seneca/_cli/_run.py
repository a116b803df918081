"""What the ``seneca``, ``mdp`` and ``ods`` commands share: errors become exit status 2."""

from __future__ import annotations

import argparse
import json
import os
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
    """Parse ``argv`` (``--version`` included) and run. A SenecaError gives 2: printed as
    ``PROG COMMAND: error: ...`` on stderr, or with ``--json`` as ``{"error": ..., "type": ...}``
    on stdout. A reader that closes the pipe early (``| head``) ends the command quietly."""
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    args = parser.parse_args(argv)
    try:
        run(args)
        sys.stdout.flush()
    except SenecaError as e:
        if getattr(args, "json", False):
            print(json.dumps({"error": str(e), "type": type(e).__name__}))
        else:
            print(f"{prog} {args.command}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader is gone: nothing more can be written, and Python's own flush at exit
        # would fail again, so stdout goes to /dev/null
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return 0
