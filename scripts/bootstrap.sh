#!/usr/bin/env bash
# Idempotent set-up used by `make test` and `make demo`.
# 1. system packages (redis-server, libjpeg/zlib headers) via apt-get when missing;
# 2. .venv with the Python packages at the versions in constraints.txt (skipped when
#    nothing changed);
# 3. pillow-simd in place of pillow (falls back to pillow with one warning).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/pyinstall.sh

PYTHON=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.seneca-bootstrap

say() { printf '[bootstrap] %s\n' "$*"; }

need_apt=()
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
[ -f /usr/include/jpeglib.h ] || need_apt+=(libjpeg62-turbo-dev)
[ -f /usr/include/zlib.h ] || need_apt+=(zlib1g-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing system packages: ${need_apt[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
    # The Debian package starts a system-wide server; Seneca starts its own.
    if command -v systemctl >/dev/null 2>&1; then systemctl disable --now redis-server >/dev/null 2>&1 || true; fi
  else
    echo "error: missing system packages: ${need_apt[*]}" >&2
    echo "       install them (e.g. 'sudo apt-get install ${need_apt[*]}') and re-run." >&2
    exit 1
  fi
fi
command -v redis-server >/dev/null 2>&1 || { echo "error: redis-server not found on PATH" >&2; exit 1; }

want=$(stamp_of pyproject.toml constraints.txt scripts/bootstrap.sh scripts/pyinstall.sh)
if current "$VENV" "$STAMP" "$want"; then
  exit 0
fi

venv_at "$VENV"
PIP="$VENV/bin/python -m pip --disable-pip-version-check -q"
SIMD=pillow-simd==12.1.1.post0
WARM="import PIL.Image, torch, torchvision, torch.distributed.run, redis, numpy, scipy, psutil, pytest, xdist, hypothesis, seneca, ods, mdp"
simd_ok() { "$VENV/bin/python" -c "import PIL.Image, sys; sys.exit('post' not in PIL.__version__)" 2>/dev/null; }

# pillow-simd's wheel is compiled (CPU) while the packages install (mostly disk): both at once.
WHEELS=$(mktemp -d)
trap 'rm -rf "$WHEELS"' EXIT
building=
if ! simd_ok; then
  say "building pillow-simd beside the install"
  CC="cc -mavx2" $PIP wheel --no-deps -w "$WHEELS" "$SIMD" >/tmp/seneca-pillow-simd.log 2>&1 &
  building=$!
fi
say "installing Python packages (first run takes a minute or two)"
pyinstall "$VENV" /tmp/seneca-pip.log -c constraints.txt -e '.[dev]'

# pillow and pillow-simd share the PIL/ directory: always remove both before installing one.
built=no
if [ -n "$building" ] && wait "$building"; then built=yes; fi
if ! simd_ok || $PIP show pillow >/dev/null 2>&1; then
  $PIP uninstall -y pillow pillow-simd >/dev/null 2>&1 || true
  if [ "$built" = yes ] && $PIP install --no-deps --no-index --find-links "$WHEELS" "$SIMD" \
      >>/tmp/seneca-pillow-simd.log 2>&1 && simd_ok; then
    say "pillow-simd installed"
  elif CC="cc -mavx2" $PIP install --no-deps "$SIMD" >>/tmp/seneca-pillow-simd.log 2>&1 && simd_ok; then
    say "pillow-simd installed"
  else
    echo "WARNING: pillow-simd failed to build (log: /tmp/seneca-pillow-simd.log); using plain pillow, JPEG decode will be slower." >&2
    $PIP uninstall -y pillow-simd >/dev/null 2>&1 || true
    $PIP install --force-reinstall --no-deps pillow >/dev/null
  fi
fi
# uv writes no bytecode: this import writes it for what every test process imports (torch alone
# would otherwise be compiled again in each fresh interpreter where PYTHONDONTWRITEBYTECODE is set).
PYTHONDONTWRITEBYTECODE= "$VENV/bin/python" -c "$WARM" || { echo "error: .venv is incomplete" >&2; exit 1; }
echo "$want" > "$STAMP"
say "environment ready"
