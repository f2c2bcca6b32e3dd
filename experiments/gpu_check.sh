#!/usr/bin/env bash
# The device check (issue #46): one script, whole, under ~8 minutes on one GPU.
#
#   bash experiments/gpu_wheels.sh                      # here, once: the wheels into .whl/
#   bash experiments/gpu_check.sh OUTDIR                # there, from the repository root (.whl carried)
#   GPU_CHECK_DEVICE=cpu GPU_CHECK_BUDGET=tiny GPU_CHECK_WHEELS=.whl-rehearsal \
#     PYTHON=.venv/bin/python bash experiments/gpu_check.sh /tmp/rehearsal   # the CPU rehearsal
#
# 1. install: the carried wheels (compose-lens and what the machine lacks, experiments/gpu_wheels.sh)
#    with pip --no-deps --target into a folder of their own, put first on PYTHONPATH; the
#    machine's own torch is checked unchanged (same version, same file) and compose-lens is
#    checked to import from the wheel. Stops here, at once, if either fails.
# 2. the GPU tests (tests/gpu; every one skips where torch sees no GPU).
# 3. the paper training step, ms per run-step: K = 1 / 16 / 64 runs separate and stacked on the
#    device (experiments/bench_batched.py), beside one CPU core's K = 1.
# 4. trajectories of the study's setting (f = 0.7, r = 1, 30,000 steps, batch 512) in bf16
#    autocast, stop_at=decided, WORKERS processes at a time, seeds 200, 201, ..., until the
#    window closes (what is left of the ~8 minutes); then experiments/gpu_check_summary.py.
#
# OUTDIR receives (at most 8 files, what the device tool brings back): gpu_check.log (all of
# it), gpu_tests.log, bench.log, nvidia_smi.csv (utilisation every 5 s while training),
# trajectories.csv, summary.json, runs.tar.gz (config, metrics and results of each trajectory).
# The run directories themselves stay in $GPU_CHECK_WORK (default /tmp/gpu_check).
set -uo pipefail
OUT=${1:?usage: gpu_check.sh OUTDIR}
DEVICE=${GPU_CHECK_DEVICE:-cuda}
BUDGET=${GPU_CHECK_BUDGET:-full}
WHEELS=${GPU_CHECK_WHEELS:-.whl}
WORK=${GPU_CHECK_WORK:-/tmp/gpu_check}
PY=${PYTHON:-python3}
mkdir -p "$OUT" "$WORK"
OUT=$(cd "$OUT" && pwd)
REPO=$(pwd)
exec > >(tee -a "$OUT/gpu_check.log") 2>&1
# TOTAL_S: the whole script's budget in seconds; the trajectories get what is left of it
if [ "$BUDGET" = tiny ]; then  # the rehearsal: every step, a few seconds each
  KS="1 2 4"; BENCH="--steps 3 --repeats 1 --warmup 1"; STEPS=${GPU_CHECK_STEPS:-300}; WORKERS=2; SEEDS=200-203
  MIN_WINDOW=60
  TOTAL_S=${GPU_CHECK_TOTAL_S:-240}
else
  TOTAL_S=${GPU_CHECK_TOTAL_S:-470}
  KS="1 16 64"; BENCH="--steps 50 --repeats 2 --warmup 3"; STEPS=30000; WORKERS=${GPU_CHECK_WORKERS:-16}
  SEEDS=200-327; MIN_WINDOW=60
fi
stage() { echo "== $(date -u +%H:%M:%S) +${SECONDS}s: $*"; }

stage "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi"
nproc

stage "1. install the carried wheels beside the machine's torch"
ls "$WHEELS"/*.whl >/dev/null 2>&1 || { echo "no wheels in $WHEELS: run experiments/gpu_wheels.sh first"; exit 2; }
before=$(cd / && $PY -c "import torch; print(torch.__version__, torch.__file__)") || { echo "no torch in $PY"; exit 2; }
rm -rf "$WORK/site"
$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" \
  "$WHEELS"/*.whl || { echo "the wheels did not install"; exit 2; }
export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
after=$(cd / && $PY -c "import torch; print(torch.__version__, torch.__file__)")
echo "torch before: $before"
echo "torch after:  $after"
[ "$before" = "$after" ] || { echo "FAILED: installing compose-lens changed torch"; exit 2; }
(cd / && $PY -c "
import compose_lens, transformer_lens, torch
from compose_lens.training.train import Trainer
print('compose_lens from', compose_lens.__file__)
print('transformer_lens', transformer_lens.__version__ if hasattr(transformer_lens, '__version__') else '?')
print('cuda available:', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')
assert compose_lens.__file__.startswith('$WORK/site'), 'compose-lens did not import from the wheel'
") || { echo "FAILED: compose-lens does not import here (above: what is missing); nothing else can run"; exit 2; }

stage "2. the GPU tests"
timeout 150 $PY -m pytest -q -p no:cacheprovider -rs tests/gpu 2>&1 | tee "$OUT/gpu_tests.log"

stage "3. the paper step: K = ${KS// / / } on $DEVICE, and one CPU core"
for k in $KS; do  # at most 60 + 60 + 90 s, and 45 s on the CPU: with the tests' 150 s and the window's
  # least 60 s, the script ends inside 520 s even if every step runs to its limit
  timeout $([ "$k" -ge 64 ] && echo 90 || echo 60) $PY experiments/bench_batched.py --device "$DEVICE" --runs "$k" \
    $BENCH 2>&1 | tee -a "$OUT/bench.log"
done
timeout 45 $PY experiments/bench_batched.py --device cpu --threads 1 --runs 1 $BENCH 2>&1 | tee -a "$OUT/bench.log"

WINDOW=$((TOTAL_S - SECONDS - 25))   # 25 s kept for the summary
[ "$WINDOW" -ge "$MIN_WINDOW" ] || WINDOW=$MIN_WINDOW
stage "4. trajectories: $WORKERS at a time, seeds from ${SEEDS%-*}, ${STEPS} steps, bf16, stop_at=decided, for ${WINDOW}s"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 5 > "$OUT/nvidia_smi.csv" 2>/dev/null &
  SMI=$!
fi
rm -rf "$WORK/trajectories"
started=$SECONDS
timeout -k 10 "$WINDOW" $PY experiments/stall_rate.py --out "$WORK/trajectories" --seeds "$SEEDS" \
  --kernels native --precision bf16 --device "$DEVICE" --stop-at decided --steps "$STEPS" \
  --workers "$WORKERS" --threads 1 2>&1
window=$((SECONDS - started))
[ -n "${SMI:-}" ] && kill "$SMI" 2>/dev/null

stage "summary"
(cd "$REPO" && $PY experiments/gpu_check_summary.py --runs "$WORK/trajectories/runs" --bench "$OUT/bench.log" \
  --window-s "$window" --out "$OUT")
stage "done"
