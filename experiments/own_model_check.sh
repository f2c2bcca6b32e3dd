#!/usr/bin/env bash
# The researcher's own model (experiments/own_model.py) asked every question from the command line (modularity
# included), then where the toolkit located its roles, in Python; the printed lines are what docs/own-model.md quotes.
#   bash experiments/own_model_check.sh runs/own-model out/own-model
set -euo pipefail
MODEL=${1:?give the own model directory}; OUT=${2:?an output folder}
CL="${PYTHON:-python} -m compose_lens.cli"
mkdir -p "$OUT"
$CL evaluate "$MODEL" --exhaustive --quiet
$CL analyze "$MODEL" --out "$OUT/analyze" --overwrite --quiet
$CL same-mlp "$MODEL" --out "$OUT/same-mlp" --overwrite --quiet
$CL patch "$MODEL" --out "$OUT/patch" --overwrite --quiet
$CL circuit "$MODEL" --out "$OUT/circuit" --overwrite --quiet
$CL modularity "$MODEL" --out "$OUT/modularity" --overwrite --quiet
$CL report "$MODEL" --out "$OUT/report.html" --overwrite --quiet
${PYTHON:-python} - "$MODEL" <<'PY'
import sys
from compose_lens.analysis import locate
from compose_lens.training.subject import for_analyses, load_subject

subject = for_analyses(load_subject(sys.argv[1], bridge=False))
where = locate.locate(subject.model, subject.config, subject.split)
print("\n".join(role.line() for role in where.roles()))
PY
