#!/usr/bin/env bash
# Idempotent set-up used by `make test` and `make demo`.
# 1. system packages (redis-server, libjpeg/zlib headers) via apt-get when missing;
# 2. .venv with the pinned Python packages (skipped when requirements are unchanged);
# 3. pillow-simd in place of pillow (falls back to pillow with one warning).
set -euo pipefail
cd "$(dirname "$0")/.."

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

want=$(cat pyproject.toml scripts/bootstrap.sh | sha256sum | cut -d' ' -f1)
if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  exit 0
fi

[ -x "$VENV/bin/python" ] || { say "creating $VENV"; "$PYTHON" -m venv "$VENV"; }
PIP="$VENV/bin/python -m pip --disable-pip-version-check -q"
say "installing Python packages (first run takes a few minutes)"
$PIP install -e '.[dev]'

if ! "$VENV/bin/python" -c "import PIL, sys; sys.exit(0 if 'post' in PIL.__version__ else 1)" 2>/dev/null; then
  say "building pillow-simd (about a minute)"
  if $PIP uninstall -y pillow >/dev/null 2>&1 && CC="cc -mavx2" $PIP install --no-cache-dir pillow-simd==12.1.1.post0 >/tmp/seneca-pillow-simd.log 2>&1; then
    say "pillow-simd installed"
  else
    echo "WARNING: pillow-simd failed to build (log: /tmp/seneca-pillow-simd.log); using plain pillow, JPEG decode will be slower." >&2
    $PIP install 'pillow' >/dev/null
  fi
fi
echo "$want" > "$STAMP"
say "environment ready"
