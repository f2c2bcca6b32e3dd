# compose-lens: the two commands of the README are `make reproduce` and `make test`.
# Each installs what it needs into .venv first (torch's CPU build, then the package).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
RUN ?= runs/paper

.PHONY: install test reproduce bench paper-model constraints lower-bounds other-versions clean

install: $(VENV)/.installed

# pyproject.toml gives ranges (what a user's environment may hold); the project's own venv gets
# the exact versions its tests passed with, constraints.txt.
$(VENV)/.installed: pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -c constraints.txt -e .
	touch $@

# What only the tests need: pytest, Hypothesis, the notebook runner, Ray, submitit, devinterp and TensorBoard.
$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[test,ray,methods,slurm]'
	touch $@

# The unit and integration tests (tiny configurations; minutes on 2 cores), the walkthrough
# notebook executed, and the Ray sweep backend run for real (the `ray` extra), in TEST_WORKERS
# processes (pytest-xdist; 0: in this one), each test file whole in one of them (its module
# fixtures built once; files that read the same planted models in one, and the slowest files first:
# conftest.py); --durations lists the 25 slowest. The report's browser test needs
# Chromium: installed here when missing and we are root, else it skips.
# Then the tests that train and judge what was learned run again on torch's scalar kernels
# (ATEN_CPU_CAPABILITY=default): float rounding differs from the machine's own kernels, and
# each of these tests must pass under both.
TEST_WORKERS ?= 2
TRAINING_TESTS := tests/integration/test_train.py tests/integration/test_train_stops.py \
	compose_lens/registry/same_mlp/test_same_mlp.py::test_model_trained_without_variables_is_not_supported
test: $(VENV)/.installed-test
	@test -x /usr/bin/chromium || [ "$$(id -u)" != 0 ] || (apt-get update -qq && apt-get install -y -qq chromium) || echo "chromium not installed: the browser tests will skip"
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile
	ATEN_CPU_CAPABILITY=default $(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile $(TRAINING_TESTS)
	$(BIN)/mkdocs build --strict --quiet

# The main job: train the paper model from scratch on CPU, evaluate it, print the table.
reproduce: install
	$(BIN)/python experiments/reproduce.py --out $(RUN)

# Speed: the project's training step and patching against the plain TransformerLens way, the
# core-minutes a run costs in fp32 and bf16, alone and stacked (experiments/results/bench/throughput.json),
# how fast the command line answers (--help, argument errors), and the long analysis commands
# (analyze, evaluate --exhaustive, dynamics; BEFORE=<checkout of an older commit> to compare).
bench: install
	$(BIN)/python experiments/bench_training.py
	$(BIN)/python experiments/bench_throughput.py
	$(BIN)/python experiments/bench_patching.py
	$(BIN)/python experiments/bench_cli.py
	$(BIN)/python experiments/bench_analyses.py $(if $(BEFORE),--before $(BEFORE))

# Re-make the paper model shipped in compose_lens/assets/paper from a full run.
paper-model: install
	$(BIN)/python experiments/reproduce.py --out runs/paper-model --install-paper-model

# constraints.txt from the venv's versions of every dependency pyproject.toml names (run after
# `make test` passes on newer versions).
constraints:
	$(BIN)/python -c 'import importlib.metadata as md, re, tomllib; \
	project = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
	wanted = project["dependencies"] + sum(project["optional-dependencies"].values(), []); \
	names = sorted({re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower() for r in wanted} - {project["name"]}); \
	print("# The exact versions the tests last passed with: the dependencies pyproject.toml names, torch\n" \
	      "# without its +cpu tag. make install installs with these; remade by make constraints."); \
	print("\n".join(name + "==" + md.version(name).split("+")[0] for name in names))' > constraints.txt

# The lower bound of every range in pyproject.toml, installed together into a fresh venv
# (.venv-lower): the package installs, and evaluates the paper model from outside the checkout.
lower-bounds:
	rm -rf .venv-lower && $(PYTHON) -m venv .venv-lower
	.venv-lower/bin/python -m pip install -q torch==2.13.0
	.venv-lower/bin/python -c 'import re, tomllib; \
	deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]; \
	print("\n".join("==".join(re.match(r"([A-Za-z0-9_.-]+)>=([0-9.]+)", d).groups()) for d in deps))' > .venv-lower/lowest.txt
	.venv-lower/bin/python -m pip install -q -c .venv-lower/lowest.txt .
	cd .venv-lower && bin/compose-lens --version && bin/compose-lens evaluate paper

# compose-lens joining an environment that already holds other versions than constraints.txt's,
# within pyproject.toml's ranges: a fresh venv (.venv-other) gets those first, then `pip install .`
# without constraints must keep every one, and the paper model, evaluated from outside the
# checkout, must give the project venv's accuracies exactly.
OTHER_VERSIONS ?= torch==2.13.0 numpy==2.1.3 pandas==2.2.3 scipy==1.14.1
other-versions: install
	rm -rf .venv-other && $(PYTHON) -m venv .venv-other
	.venv-other/bin/python -m pip install -q $(OTHER_VERSIONS)
	.venv-other/bin/python -m pip install -q .
	.venv-other/bin/python -c 'import importlib.metadata as md, sys; \
	wanted = dict(v.split("==") for v in sys.argv[1:]); \
	found = {name: md.version(name).split("+")[0] for name in wanted}; \
	print("kept:", found); sys.exit(found != wanted)' $(OTHER_VERSIONS)
	cd .venv-other && bin/compose-lens evaluate paper --exhaustive --json --quiet > other.json
	cd .venv-other && $(abspath $(BIN))/compose-lens evaluate paper --exhaustive --json --quiet > own.json
	$(BIN)/python -c 'import json; \
	other, own = (json.load(open(f".venv-other/{n}.json")) for n in ("other", "own")); \
	keys = ("pools", "zero_var_heldout", "two_var_union"); \
	same = all(other[k] == own[k] for k in keys); \
	print("accuracies equal:", same, other["zero_var_heldout"], other["two_var_union"]); exit(not same)'

clean:
	rm -rf $(VENV) .pytest_cache
