#!/usr/bin/env bash
# The tests with the frameworks users train with (tests/ecosystem: PyTorch Lightning, Hugging
# Face datasets, timm), in .venv-ecosystem: the package with its extras `[lightning,hf,timm]` at
# the versions constraints.txt pins. The core environment (.venv) stays free of them.
# Needs what scripts/bootstrap.sh installs on the system (redis-server); `make test-ecosystem`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/pyinstall.sh

PYTHON=${PYTHON:-python3}
VENV=.venv-ecosystem
STAMP=$VENV/.seneca-ecosystem
say() { printf '[ecosystem] %s\n' "$*"; }

want=$(stamp_of pyproject.toml constraints.txt scripts/ecosystem.sh scripts/pyinstall.sh)
if ! current "$VENV" "$STAMP" "$want"; then
  venv_at "$VENV"
  say "installing $(grep -E '^(lightning|datasets|timm)==' constraints.txt | tr '\n' ' ')"
  pyinstall "$VENV" /tmp/seneca-ecosystem-pip.log -c constraints.txt -e '.[dev,lightning,hf,timm]'
  # (uv writes no bytecode: this import writes it once, as bootstrap.sh does for .venv)
  PYTHONDONTWRITEBYTECODE= "$VENV/bin/python" -c "import torch, torchvision, lightning, datasets, timm, seneca"
  echo "$want" > "$STAMP"
fi
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider -m ecosystem tests/ecosystem "$@"
