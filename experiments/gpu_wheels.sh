#!/usr/bin/env bash
# The wheels the device check carries (experiments/gpu_check.sh), downloaded here where pip can
# reach its index, into .whl/ (git-ignored; about 7 MB). Run from the repository root:
#   bash experiments/gpu_wheels.sh            # for the accelerator machine: Python 3.12, x86-64
#   bash experiments/gpu_wheels.sh 3.11 .whl-rehearsal   # for a CPU rehearsal with this Python 3.11
# The machine has torch 2.11, transformers, pandas, numpy, safetensors, tqdm, matplotlib, scipy,
# pytest and hypothesis; it lacks transformer-lens and what transformer-lens imports that it does
# not have (datasets, dill, multiprocess; fancy-einsum, beartype and typeguard, which it names),
# circuitsvis (the report), submitit (the slurm backend), and devinterp with what it needs
# there (zarr, donfig, numcodecs, google-crc32c, pydantic and its parts) for `llc --device cuda`. Every wheel is fetched --no-deps and
# installed there --no-deps into a folder of its own, so the machine's torch is never replaced.
# compose-lens itself is built here as a wheel (no dependencies resolved, so its torch pin is moot).
set -euo pipefail
PYVER=${1:-3.12}
DEST=${2:-.whl}
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
mkdir -p "$DEST"
rm -f "$DEST"/compose_lens-*.whl
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$DEST" \
  transformer-lens==4.3.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 fancy-einsum==0.0.3 \
  beartype==0.23.1 typeguard==4.6.1 circuitsvis==1.43.3 importlib-metadata==10.2.0 submitit==1.5.4 \
  devinterp==2.0.1 zarr==3.1.6 donfig==0.8.1.post1 numcodecs==0.16.6 google-crc32c==1.9.0 \
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$DEST" .
ls "$DEST"
