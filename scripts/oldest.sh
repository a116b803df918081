#!/usr/bin/env bash
# The loader's tests (tests/loader, tests/ods) with the oldest torch, torchvision and redis-py
# the package accepts (scripts/oldest.py reads them from pyproject.toml), in .venv-oldest:
# Seneca uses some of their internals, so a version that breaks one fails here.
# Needs what scripts/bootstrap.sh installs on the system (redis-server); `make test-oldest`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/pyinstall.sh

PYTHON=${PYTHON:-python3}
VENV=.venv-oldest
STAMP=$VENV/.seneca-oldest
say() { printf '[oldest] %s\n' "$*"; }

want=$(stamp_of pyproject.toml constraints.txt scripts/oldest.py scripts/oldest.sh scripts/pyinstall.sh)
if ! current "$VENV" "$STAMP" "$want"; then
  venv_at "$VENV"
  CONSTRAINTS=$(mktemp)
  trap 'rm -f "$CONSTRAINTS"' EXIT
  "$PYTHON" scripts/oldest.py > "$CONSTRAINTS"
  say "installing $(grep -E '^(torch|torchvision|redis)==' "$CONSTRAINTS" | tr '\n' ' ')(a minute or two)"
  pyinstall "$VENV" /tmp/seneca-oldest-pip.log -c "$CONSTRAINTS" -e '.[dev]'
  echo "$want" > "$STAMP"
fi
# (uv writes no bytecode: this import writes torch's, as bootstrap.sh does for .venv)
PYTHONDONTWRITEBYTECODE= "$VENV/bin/python" -c "import torch, torchvision, redis; print('[oldest] torch', torch.__version__, 'torchvision', torchvision.__version__, 'redis', redis.__version__)"
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/loader tests/ods "$@"
