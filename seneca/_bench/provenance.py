"""Where a measurement came from: recorded in every result file the harnesses write.

A benchmark's number means little without the command that produced it, the machine it ran
on, when, and which source. :func:`provenance` gathers these once per run; the result files
(``results.json``, ``hit_path.json``, ``points.json``, ...) carry them under ``provenance``.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["provenance"]

_ROOT = Path(__file__).resolve().parents[2]
#: Programs whose command line reproduces a run (else the result's config describes it).
_PROGRAMS = ("seneca", "mdp", "ods")


def provenance(argv: list[str] | None = None) -> dict[str, Any]:
    """The command (``argv``, default ``sys.argv``), UTC date, machine and source revision of
    this run. The revision is the git commit of the checkout the code runs from (with
    ``-dirty`` when it has uncommitted changes), else the installed package's version."""
    args = list(sys.argv if argv is None else argv)
    program = Path(args[0]).name if args else ""
    if args and Path(args[0]).parts[-2:] == ("seneca", "__main__.py"):
        program = "seneca"  # python -m seneca: the seneca command
    ours = program in _PROGRAMS or (program.endswith(".py") and not program.startswith("ipykernel"))
    return {
        "command": shlex.join([program, *args[1:]]) if ours else f"called from Python ({program})",
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": _machine(),
        "revision": _revision(),
    }


def _machine() -> dict[str, Any]:
    out: dict[str, Any] = {
        "platform": platform.platform(),
        "processor": _cpu_model(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        out["memory_gib"] = round(pages * size / 2**30, 1)
    except (ValueError, OSError):
        pass
    for package in ("torch", "torchvision", "redis"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[package] = metadata.version(package)
    return out


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _revision() -> str:
    def git(*cmd: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(_ROOT), *cmd], capture_output=True, text=True, timeout=10
        )
        return done.stdout.strip() if done.returncode == 0 else ""

    try:
        commit = git("rev-parse", "HEAD") if (_ROOT / ".git").exists() else ""
        if commit:
            return commit + (
                "-dirty" if git("status", "--porcelain", "--untracked-files=no") else ""
            )
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        return "seneca-loader " + metadata.version("seneca-loader")
    except metadata.PackageNotFoundError:
        return "unknown"
