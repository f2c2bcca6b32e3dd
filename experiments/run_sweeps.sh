#!/usr/bin/env bash
# The short-budget f and r sweeps (superseded: experiments/results/archive/short_budget/README.md).
# The full-budget sweeps are the commands of experiments/results/sweeps/README.md.
#   experiments/run_sweeps.sh [f|r|both]
# f sweep: final 0-var held-out accuracy against f at r = 1.
# r sweep: final 2-var union accuracy against r at f = 0.7.
# Interrupted? Run this again: finished points are skipped, the others resume.
set -euo pipefail
cd "$(dirname "$0")/.."
WHICH=${1:-both}
OUT=${OUT:-runs/sweeps}
SEEDS=${SEEDS:-"0 1"}
F_STEPS=${F_STEPS:-2500}
R_STEPS=${R_STEPS:-3500}
mkdir -p experiments/results/archive/short_budget

collect() {  # copy the small outputs of sweep $1 next to this script's results
    cp "$OUT/$1/results.csv" "experiments/results/archive/short_budget/sweep_$1.csv"
    cp "$OUT/$1/thresholds.json" "experiments/results/archive/short_budget/sweep_$1_thresholds.json"
    cp "$OUT/$1/sweep.png" "experiments/results/archive/short_budget/sweep_$1.png"
}

if [[ $WHICH == f || $WHICH == both ]]; then
    start=$(date +%s)
    .venv/bin/compose-lens sweep --param f --values 0.1 0.15 0.2 0.25 0.3 0.4 0.5 0.7 --seeds $SEEDS \
        --steps "$F_STEPS" --set r=1 --set eval_every=250 --set checkpoint_every=500 --out "$OUT/f" \
        || echo "f sweep: some points failed (see results.csv)"
    echo "f sweep wall time: $(($(date +%s) - start)) s"
    collect f
fi
if [[ $WHICH == r || $WHICH == both ]]; then
    start=$(date +%s)
    .venv/bin/compose-lens sweep --param r --values 0 0.05 0.1 0.15 0.2 0.3 0.5 1.0 --seeds $SEEDS \
        --steps "$R_STEPS" --set f=0.7 --set eval_every=250 --set checkpoint_every=1000 --out "$OUT/r" \
        || echo "r sweep: some points failed (see results.csv)"
    echo "r sweep wall time: $(($(date +%s) - start)) s"
    collect r
fi
