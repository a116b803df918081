#!/usr/bin/env bash
# Runs the command given with two CPU-bound busy processes beside it, as on a busy CI machine
# (`make test-under-load`; `bash scripts/under_load.sh bash .ci/run` for the whole CI run).
set -euo pipefail
cd "$(dirname "$0")/.."
busy=()
for _ in 1 2; do
  python3 -c 'while True: pass' &
  busy+=($!)
done
trap 'kill "${busy[@]}" 2>/dev/null || true' EXIT
echo "[under-load] 2 busy processes beside: $*" >&2
start=$(date +%s)
status=0
"$@" || status=$?
echo "[under-load] took $(( $(date +%s) - start )) s, exit $status" >&2
exit "$status"
