"""The constraints of the oldest environment the package accepts: torch, torchvision and
redis-py at the lower bounds of ``pyproject.toml``'s ranges, everything else as
``constraints.txt`` pins it. ``scripts/oldest.sh`` installs them and runs the loader's tests.

    python scripts/oldest.py > constraints-oldest.txt
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the libraries whose oldest accepted version CI tests (Seneca uses their internals:
#: ``seneca/_torch_internals.py``, ``ods/redis_internals.py``)
OLDEST = ("torch", "torchvision", "redis")


def lower_bounds() -> dict[str, str]:
    """Each of :data:`OLDEST` at the lower bound of its range in ``pyproject.toml``, as a full
    version (``>=2.6`` is ``2.6.0``)."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    out = {}
    for dep in deps:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^]]*\])?\s*>=\s*([0-9.]+).*", dep)
        if m and m[1] in OLDEST:
            parts = m[2].split(".")
            out[m[1]] = ".".join(parts + ["0"] * (3 - len(parts)))
    missing = set(OLDEST) - set(out)
    if missing:
        raise SystemExit(f"pyproject.toml gives no lower bound for {sorted(missing)}")
    return out


def constraints() -> str:
    """``constraints.txt`` with :data:`OLDEST` at their lower bounds."""
    oldest = lower_bounds()
    lines = []
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        name = line.split("==")[0].strip()
        if name in oldest:
            line = f"{name}=={oldest.pop(name)}"
        lines.append(line)
    lines += [f"{name}=={version}" for name, version in oldest.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(constraints())
