#!/usr/bin/env bash
# Run here (a machine with pip and Seneca's redis-server), before sending the tree to a GPU
# machine that reaches no package registry: fills .carry/ (ignored by git) with what
# scripts/gpu/bench.sh needs there and the machine lacks.
#   .carry/wheels/   redis-py and hiredis for the GPU machine's Python (3.12, x86_64)
#   .carry/redis/    this machine's redis-server with the shared libraries it links (all but
#                    glibc's own), and bin/redis-server: a wrapper that sets LD_LIBRARY_PATH
#                    for that binary alone
# Usage: scripts/gpu/carry.sh [PYTHON_VERSION]   (default 3.12; CARRY=DIR for another folder)
set -euo pipefail
cd "$(dirname "$0")/../.."
PYV=${1:-3.12}
OUT=${CARRY:-.carry}
rm -rf "$OUT" && mkdir -p "$OUT/wheels" "$OUT/redis/lib" "$OUT/redis/bin"

pin() { grep -E "^$1==" constraints.txt | cut -d= -f3; }
for name in redis hiredis; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYV" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$OUT/wheels" "$name==$(pin "$name")"
done

server=$(readlink -f "$(command -v redis-server)")
# the binary picks its role from its name (redis-server, redis-check-rdb, ...): keep the name
cp "$server" "$OUT/redis/lib/redis-server"
ldd "$server" | awk '/=> \//{print $3}' | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*) ;;  # the machine's own
    *) cp -L "$lib" "$OUT/redis/lib/" ;;
  esac
done
cat > "$OUT/redis/bin/redis-server" <<'WRAP'
#!/bin/sh
here=$(dirname "$(readlink -f "$0")")/../lib
LD_LIBRARY_PATH="$here${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/redis-server" "$@"
WRAP
chmod +x "$OUT/redis/bin/redis-server"
"$OUT/redis/bin/redis-server" --version
du -sh "$OUT"
