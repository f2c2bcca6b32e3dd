"""Which files of a sweep under experiments/results/sweeps/ git keeps: the small per-point
results that make a sweep resumable from the repository, not its weights or locks."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
POINT = "experiments/results/sweeps/f/runs/f=0.25_seed=0"


def ignored(path: str) -> bool:
    out = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT, capture_output=True)
    assert out.returncode in (0, 1), out.stderr
    return out.returncode == 0


@pytest.fixture(autouse=True)
def _git_checkout():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")


@pytest.mark.parametrize("name", ["checkpoints/step_002500/model.safetensors", "resume.safetensors",
                                  "model.safetensors", "split.json", "results.json.tmp"])
def test_weights_checkpoints_split_and_temporary_files_of_a_point_are_not_committed(name):
    assert ignored(f"{POINT}/{name}")


def test_the_lock_beside_a_point_is_not_committed():
    assert ignored(f"{POINT}.lock")


@pytest.mark.parametrize("path", [f"{POINT}/config.json", f"{POINT}/metrics.jsonl", f"{POINT}/results.json",
                                  "experiments/results/sweeps/f/sweep.json",
                                  "experiments/results/sweeps/f/.compose-lens",
                                  "experiments/results/sweeps/f/results.csv",
                                  "experiments/results/sweeps/f/fit.json"])
def test_what_makes_a_point_finished_and_the_sweep_recognisable_is_committed(path):
    assert not ignored(path)


def test_the_rules_do_not_reach_outside_the_sweeps_folder():
    assert not ignored("experiments/results/circuit/split.json")
