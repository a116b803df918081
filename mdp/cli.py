"""``mdp`` command line (not implemented yet)."""

from __future__ import annotations

import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    print("mdp: not implemented yet; see the project's issue tracker", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
