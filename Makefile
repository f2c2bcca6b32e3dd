# compose-lens: the two commands of the README are `make reproduce` and `make test`.
# Each installs what it needs into .venv first (torch's CPU build, then the package).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
RUN ?= runs/paper

.PHONY: install test reproduce bench paper-model clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e .
	touch $@

# What only the tests need: pytest, Hypothesis, the notebook runner, Ray, submitit, devinterp and TensorBoard.
$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/python -m pip install -q -e '.[test,ray,methods,slurm]'
	touch $@

# The unit and integration tests (tiny configurations; minutes on 2 cores), the walkthrough
# notebook executed, and the Ray sweep backend run for real (the `ray` extra). The report's
# browser test needs Chromium: installed here when missing and we are root, else it skips.
# Then the tests that train and judge what was learned run again on torch's scalar kernels
# (ATEN_CPU_CAPABILITY=default): float rounding differs from the machine's own kernels, and
# each of these tests must pass under both.
TRAINING_TESTS := tests/integration/test_train.py tests/integration/test_train_stops.py \
	tests/integration/test_same_mlp.py::test_model_trained_without_variables_is_not_supported
test: $(VENV)/.installed-test
	@test -x /usr/bin/chromium || [ "$$(id -u)" != 0 ] || (apt-get update -qq && apt-get install -y -qq chromium) || echo "chromium not installed: the browser tests will skip"
	$(BIN)/python -m pytest
	ATEN_CPU_CAPABILITY=default $(BIN)/python -m pytest -q -p no:cacheprovider $(TRAINING_TESTS)
	$(BIN)/mkdocs build --strict --quiet

# The main job: train the paper model from scratch on CPU, evaluate it, print the table.
reproduce: install
	$(BIN)/python experiments/reproduce.py --out $(RUN)

# Speed: the project's training step and patching against the plain TransformerLens way,
# how fast the command line answers (--help, argument errors), and the long analysis commands
# (analyze, evaluate --exhaustive, dynamics; BEFORE=<checkout of an older commit> to compare).
bench: install
	$(BIN)/python experiments/bench_training.py
	$(BIN)/python experiments/bench_patching.py
	$(BIN)/python experiments/bench_cli.py
	$(BIN)/python experiments/bench_analyses.py $(if $(BEFORE),--before $(BEFORE))

# Re-make the paper model shipped in compose_lens/assets/paper from a full run.
paper-model: install
	$(BIN)/python experiments/reproduce.py --out runs/paper-model --install-paper-model

clean:
	rm -rf $(VENV) .pytest_cache
