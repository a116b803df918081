#!/usr/bin/env bash
# Seneca's benchmark on a GPU machine that reaches no package registry. Run from the root of a
# tree sent with .carry/ (made by scripts/gpu/carry.sh on a machine that has pip and
# redis-server). The machine needs python3 with torch, torchvision, numpy, scipy, matplotlib,
# tqdm and prometheus-client (pynvml for the GPU's busy time); redis-py, hiredis and
# redis-server come from .carry/.
#
# It makes synthetic datasets, runs the CUDA tests of device= and of the batch slots, starts a
# cache node on loopback TCP and runs `seneca bench` twice, every job a fresh interpreter:
#   model/     MODEL trained on the GPU by each job, the ceiling (loader none) beside the
#              loaders, IMAGES images, WORKERS workers per job, batch BATCH;
#   emulated/  a 10 ms sleep per batch, 1,500 images, 2 workers per job, batch 32, batches on
#              the GPU (EMULATED=0 skips it).
# Every loader keeps its workers between epochs (PERSISTENT=0: DataLoader's default). Outputs
# go to $OUT (default /tmp/seneca-gpu): info.txt (machine, tests), bench.txt (both tables),
# model/ and emulated/ (results.json and results.md; `seneca._bench.report.write_reports`
# draws the plots from results.json anywhere), model/timeline/ (each Seneca job's batches'
# stage times, SENECA_TIMELINE; their medians are in bench.txt). Settings (environment): IMAGES (6000),
# CLASSES (100), JOBS (3), WORKERS (4), BATCH (128), EPOCHS (3), REPEATS (1), MODEL
# (resnet18), DEVICE (cuda), CACHE_FRAC (0.25), LOADERS (none,pytorch-tuned,seneca), TESTS
# (1), PORT (6390), DATA (/tmp/seneca-data), PYTHON (python3), CARRY (.carry).
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
CARRY=${CARRY:-.carry}
OUT=${OUT:-/tmp/seneca-gpu}
DATA=${DATA:-/tmp/seneca-data}
PORT=${PORT:-6390}
mkdir -p "$OUT"
export TQDM_DISABLE=1 PYTHONUNBUFFERED=1  # no progress bars in the logs

site=$(mktemp -d /tmp/seneca-site.XXXX)
"$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target "$site" "$CARRY"/wheels/*.whl
export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$PWD/$CARRY/redis/bin:$PATH"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
  nproc
  redis-server --version
  "$PYTHON" -c 'import sys, torch, torchvision, redis; print(sys.version.split()[0], torch.__version__, torchvision.__version__, redis.__version__)'
} | tee "$OUT/info.txt"

[ -d "$DATA" ] || "$PYTHON" -m seneca make-dataset "$DATA" --images "${IMAGES:-6000}" --classes "${CLASSES:-100}"
[ "${EMULATED:-1}" = 0 ] || [ -d "$DATA-1500" ] || "$PYTHON" -m seneca make-dataset "$DATA-1500" --images 1500 --classes 10

if [ "${TESTS:-1}" = 1 ]; then
  "$PYTHON" -m pytest -q -p no:cacheprovider tests/loader/test_device.py tests/loader/test_slots.py 2>&1 | tee -a "$OUT/info.txt" || true
fi

"$PYTHON" -m seneca cache-node --port "$PORT" --maxmemory 8GB >/tmp/seneca-node.log 2>&1 &
node=$!
trap 'kill $node 2>/dev/null || true' EXIT
"$PYTHON" - "$PORT" <<'PY'
import sys, time, redis
r = redis.Redis(port=int(sys.argv[1]))
for _ in range(100):
    try:
        r.ping()
        break
    except redis.ConnectionError:
        time.sleep(0.1)
else:
    sys.exit("the cache node did not start")
PY

persistent=()
[ "${PERSISTENT:-1}" = 1 ] && persistent=(--persistent-workers)
common=(--cache "redis://127.0.0.1:$PORT" --cache-frac "${CACHE_FRAC:-0.25}" --split auto
  --jobs "${JOBS:-3}" --repeats "${REPEATS:-1}" "${persistent[@]}")
SENECA_TIMELINE="$OUT/model/timeline" "$PYTHON" -m seneca bench --data "$DATA" \
  --workers "${WORKERS:-4}" --batch-size "${BATCH:-128}" --model "${MODEL:-resnet18}" \
  --device "${DEVICE:-cuda}" --loaders "${LOADERS:-none,pytorch-tuned,seneca}" \
  --epochs "${EPOCHS:-3}" "${common[@]}" --out "$OUT/model" 2>&1 | tee "$OUT/bench.txt"
[ -d "$OUT/model/timeline" ] && "$PYTHON" -m seneca.loader.timeline "$OUT/model/timeline" | tee -a "$OUT/bench.txt"
if [ "${EMULATED:-1}" = 1 ]; then
  "$PYTHON" -m seneca bench --data "$DATA-1500" --workers 2 --batch-size 32 --step-ms 10 \
    --device "${DEVICE:-cuda}" --loaders pytorch-tuned,seneca --epochs 2 "${common[@]}" \
    --out "$OUT/emulated" 2>&1 | tee -a "$OUT/bench.txt"
fi
rm -f "$OUT"/*/*.png
