"""The tests with the frameworks users train with: PyTorch Lightning, Hugging Face datasets
and timm, the real packages (the extras ``[lightning,hf,timm]``). `make test-ecosystem` runs
them in .venv-ecosystem; the core environment has none of the packages and collects none of
these tests (and `make test` deselects the ``ecosystem`` marker)."""

import importlib.util

FRAMEWORKS = ("lightning", "datasets", "timm")

if not all(importlib.util.find_spec(name) for name in FRAMEWORKS):
    collect_ignore_glob = ["test_*.py"]
