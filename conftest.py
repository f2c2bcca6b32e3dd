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
