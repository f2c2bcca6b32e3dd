"""Shared fixtures: tiny tasks and models for fast tests, and the study's reference checkpoints.

At the repository's root, so that they serve the tests under tests/ and those an analysis folder keeps beside
its code (compose_lens/registry/<name>/test_*.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from compose_lens.core.config import ModelConfig, RunConfig, TaskConfig, TrainConfig
from compose_lens.data.split import Split

REFERENCE_DIR = Path(__file__).resolve().parents[1] / "shared" / "reference"

# The slowest files, longest first (tests/unit/test_locate.py with the files of :data:`TOGETHER`), run before every
# other file: make test runs each file whole in one of two processes (--dist loadfile), and one of these started last
# would leave that process running alone long after the other has finished (--durations lists what each test took).
SLOW_FILES = ("tests/unit/test_locate.py", "tests/unit/test_modularity.py",
              "compose_lens/registry/same_mlp/test_same_mlp.py", "tests/integration/test_faults.py",
              "tests/integration/test_report.py", "tests/integration/test_sweep.py", "tests/integration/test_zoo.py",
              "tests/integration/test_slurm.py", "tests/unit/test_figures_paper_style.py",
              "tests/integration/test_bad_input.py", "tests/integration/test_analyze.py",
              "tests/integration/test_layernorm.py")
# Files that read the same planted models run in the same process, one after the other, so that each model is built
# once (:func:`paper`, test_locate.plant, :func:`orthogonal_plant`) and its answers checked once (tests/planted.py).
TOGETHER = {"tests/unit/test_modularity.py": "tests/unit/test_locate.py",
            "compose_lens/registry/same_mlp/test_same_mlp.py": "tests/unit/test_locate.py"}


def pytest_collection_modifyitems(items):
    order = {path: i for i, path in enumerate(SLOW_FILES)}
    items.sort(key=lambda item: order.get(item.nodeid.split("::")[0], len(order)))  # stable: the rest as collected


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: absent without it
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile, with the files of :data:`TOGETHER` as one and in :data:`SLOW_FILES`' order (not xdist's
    most-tests-first)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Together(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return TOGETHER.get(path, path)

    config.option.loadscopereorder = False
    return Together(config, log)


def pytest_configure(config):
    torch.set_num_threads(1)  # already for the session's and modules' fixtures set up before the first test's own


@pytest.fixture(autouse=True)
def _few_threads():
    torch.set_num_threads(1)  # tiny models gain nothing from more, and lose a lot on a busy machine


@pytest.fixture
def tiny_task() -> TaskConfig:
    """p = 7, 6 variables: small enough to enumerate, with both slot restrictions."""
    return TaskConfig(modulus=7, n_vars=6, left_forbidden=("f",), right_forbidden=("a",), f=0.8)


@pytest.fixture
def tiny_config(tiny_task) -> RunConfig:
    model = ModelConfig.for_task(tiny_task, d_model=32, d_head=32, d_mlp=64)
    train = TrainConfig(steps=40, batch_size=64, eval_every=10, checkpoint_every=10, pool_size=64, threads=1)
    return RunConfig(task=tiny_task, model=model, train=train)


@pytest.fixture
def tiny_split(tiny_task) -> Split:
    return Split.from_task(tiny_task)


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    """../shared/reference, or skip the test where it is absent."""
    if not (REFERENCE_DIR / "final.pth").exists():
        pytest.skip("the study's reference checkpoints (../shared/reference) are not here")
    return REFERENCE_DIR


@pytest.fixture(scope="session")
def reference_final(reference_dir):
    """The study's final model with its own split (loaded once per session)."""
    from compose_lens.training.subject import load_model

    return load_model(reference_dir / "final.pth")


@pytest.fixture(scope="session")
def paper():
    """The paper model as weights (no TransformerLens bridge), loaded once per session."""
    from compose_lens.core.errors import ComposeLensError
    from compose_lens.training.subject import load_model

    try:
        return load_model("paper", bridge=False)
    except ComposeLensError:
        pytest.skip("the paper model is not installed")


@pytest.fixture(scope="session")
def orthogonal_plant(paper):
    """The verdict zoo's planted model whose variables reach MLP2 in another subspace than constants
    (experiments/zoo_planted.py), built once per session, with the paper model's exhaustive accuracies once
    its answers are checked (tests/planted.py)."""
    import importlib.util

    from tests.planted import takes_the_papers_gate

    path = Path(__file__).resolve().parent / "experiments" / "zoo_planted.py"
    spec = importlib.util.spec_from_file_location("zoo_planted", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    subject = module.orthogonal_subspaces(paper)[0]
    assert takes_the_papers_gate(subject, paper)
    return subject
