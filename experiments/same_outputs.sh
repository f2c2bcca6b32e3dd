#!/usr/bin/env bash
# The renovation's behaviour check (issue 56): the analysis commands on the shipped paper model and on
# the study's own final checkpoint, their CSVs written under OUT. Run it on a checkout before and after
# a change and compare: `diff -r` over the CSVs (and `cmp` file by file) must find nothing. The hashes of
# every CSV and figure it wrote at aa9c824 (before the renovation of issue 56) are committed in
# experiments/results/renovation/{csv,png}.sha256; `sha256sum -c` run inside OUT checks a later tree against them.
# Every CSV hash is still aa9c824's. 18 PNG hashes were made again when each figure came to be drawn once: the
# report embeds an analysis's own file (its declared dpi, not the page's 110) and `ablate` draws the report's view.
#   bash experiments/same_outputs.sh CHECKOUT OUT [REFERENCE_DIR]
set -euo pipefail
CHECKOUT=$(cd "$1" && pwd); OUT=$2; REF=${3:-$CHECKOUT/../shared/reference}
PY=${PYTHON:-python}
# one thread, as the hashes were made: an analysis command otherwise takes its threads from the load average
# (compose_lens.core.cores.threads_now), and the same-MLP probe's subspace rounds differently on two threads
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p "$OUT"
cl() { echo "+ compose-lens $*" >&2; (cd "$CHECKOUT" && PYTHONPATH="$CHECKOUT" $PY -m compose_lens.cli -q "$@"); }
for model in paper "$REF/final.pth"; do
  name=$(basename "$model" .pth)
  cl analyze "$model" --out "$OUT/$name/analyze" --seed 0
  cl evaluate "$model" --exhaustive --out "$OUT/$name/evaluate" --seed 0
  cl circuit "$model" --out "$OUT/$name/circuit" --seed 0
  cl same-mlp "$model" --out "$OUT/$name/same_mlp" --seed 0
  cl patch "$model" --out "$OUT/$name/patch" --seed 0
  cl report "$model" --out "$OUT/$name/report" --seed 0
done
cl dynamics "$REF" --steps 2501 3001 3501 4001 5001 6001 --out "$OUT/dynamics" --seed 0
find "$OUT" -name '*.csv' | sort | while read -r f; do sha256sum "$f"; done | sed "s#$OUT/##" > "$OUT/csv.sha256"
wc -l < "$OUT/csv.sha256"
