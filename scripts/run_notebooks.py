"""Execute the notebooks in notebooks/ (``make notebooks``; the tests run the small size).

    python scripts/run_notebooks.py [--size full|small] [--out DIR] [--parallel N] [NAME ...]

``--size full`` (the default) runs them at the sizes behind their saved outputs and saves
the outputs in place; ``--size small`` runs a quick version of each (what CI runs). With
``--out`` the executed notebooks are written there instead of in place. Every notebook runs in
a fresh kernel from the repository root, with ``SENECA_NOTEBOOK_SIZE`` set to the size.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"


def _execute(path: Path, out: Path | None, timeout: int) -> Path:
    import tempfile

    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    from seneca._bench.provenance import provenance

    start = time.perf_counter()
    book = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory() as sockets:
        # the kernel's channels are unix sockets in a private directory, not TCP ports
        km = KernelManager(kernel_name="python3", transport="ipc", ip=f"{sockets}/kernel")
        client = NotebookClient(
            book, km=km, timeout=timeout, resources={"metadata": {"path": ROOT}}
        )
        client.execute()
    size = os.environ.get("SENECA_NOTEBOOK_SIZE", "full")
    made = provenance(["run_notebooks.py", "--size", size, path.name])
    book.metadata["seneca"] = {"provenance": made}  # command, date, machine, revision
    target = (out / path.name) if out else path
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(book, target)
    print(f"{path.name}: {time.perf_counter() - start:.0f} s -> {target}", flush=True)
    return target


def run(
    names: list[str], size: str, out: Path | None, parallel: int = 1, timeout: int = 3600
) -> list[Path]:
    """Execute the notebooks called ``names`` (all when empty), ``parallel`` at a time;
    returns the files written."""
    from concurrent.futures import ThreadPoolExecutor

    paths = [NOTEBOOKS / n for n in names] or sorted(NOTEBOOKS.glob("*.ipynb"))
    os.environ["SENECA_NOTEBOOK_SIZE"] = size  # the kernels inherit it
    with ThreadPoolExecutor(parallel) as pool:
        return list(pool.map(lambda p: _execute(p, out, timeout), paths))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", choices=("full", "small"), default="full")
    p.add_argument("--out", type=Path, default=None, help="write the executed notebooks here")
    p.add_argument("--parallel", type=int, default=1, help="notebooks run at a time")
    p.add_argument("names", nargs="*", help="notebook file names (default: all)")
    args = p.parse_args(argv)
    run(args.names, args.size, args.out, max(1, args.parallel))
    return 0


if __name__ == "__main__":
    sys.exit(main())
