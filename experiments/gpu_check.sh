#!/usr/bin/env bash
# The prepared device check (issue #31): one script, under ~8 minutes on one GPU.
#   bash experiments/gpu_check.sh OUTDIR [TRAJECTORIES]
# 1. the GPU tests (tests/gpu); 2. the paper model's step time, single and with K = 16 / 64
# stacked runs (experiments/bench_batched.py); 3. TRAJECTORIES (default 16) 30k-step runs of
# the study's setting in bf16 autocast, as parallel processes, each stopped once the stall
# detector decides (stop_at=decided), and their outcomes as OUTDIR/stall_rate/runs.csv.
set -uo pipefail
OUT=${1:?usage: gpu_check.sh OUTDIR [TRAJECTORIES]}
N=${2:-16}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv | tee "$OUT/gpu.txt"
timeout 120 $PY -m pytest -q -p no:cacheprovider tests/gpu 2>&1 | tee "$OUT/gpu_tests.log"
for k in 1 16 64; do
  timeout 90 $PY experiments/bench_batched.py --device cuda --runs $k --steps 50 --repeats 2 2>&1 | tee -a "$OUT/bench_batched.log"
done
timeout 330 $PY experiments/stall_rate.py --out "$OUT/stall_rate" --seeds 200-$((199 + N)) --kernels native \
  --precision bf16 --device cuda --stop-at decided --workers "$N" 2>&1 | tee "$OUT/stall_rate.log"
$PY experiments/stall_rate.py --out "$OUT/stall_rate" --table > /dev/null 2>&1 || true
