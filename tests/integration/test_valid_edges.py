"""Valid input at the edge of its range runs (issue #30): the documented minimum of
``circuit --n-pairs`` and the largest seed. The refusals just past them are in
``test_bad_input.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compose_lens.cli import main
from compose_lens.core.config import MAX_SEED, ModelConfig, RunConfig, TaskConfig, TrainConfig
from compose_lens.training.train import Trainer

TASK = TaskConfig(modulus=7, n_vars=6, left_forbidden=("f",), right_forbidden=("a",), f=0.8)
TINY = RunConfig(task=TASK, model=ModelConfig.for_task(TASK, d_model=16, d_head=16, d_mlp=32),
                 train=TrainConfig(steps=20, batch_size=16, eval_every=10, checkpoint_every=10,
                                   pool_size=16, threads=1))


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("edges") / "run"
    Trainer(TINY, directory, progress=False).run()
    return directory


@pytest.mark.parametrize("pairs", ["resample", "mixed"])
def test_circuit_runs_at_its_documented_minimum_of_pairs(run, tmp_path, pairs):
    out = tmp_path / "c"
    assert main(["circuit", str(run), "--n-pairs", "6", "--pairs", pairs, "--method", "eap", "--out", str(out),
                 "--quiet"]) == 0
    assert (out / "circuit.csv").exists()


def test_the_largest_seed_trains(tmp_path):
    config = TINY.with_overrides([f"init_seed={MAX_SEED}", f"seed={MAX_SEED}", f"task.seed={MAX_SEED}",
                                  "steps=2", "eval_every=1", "checkpoint_every=2"])
    Trainer(config, tmp_path / "run", progress=False).run()
    assert json.loads((tmp_path / "run" / "results.json").read_text())["steps"] == 2


def test_analyze_reads_a_valid_one_layer_run(tmp_path, capsys):
    """One block, its MLP the adder: no blocks.1 to read heads from (issue #45: the Fourier grid
    asked for blocks.1's attention pattern, which it never uses, and analyze ended in a KeyError)."""
    config = RunConfig(task=TASK, model=ModelConfig.for_task(TASK, d_model=16, d_head=16, d_mlp=32, n_layers=1,
                                                             mlp_blocks=(0,)),
                       train=TINY.train)
    Trainer(config, tmp_path / "one", progress=False).run()
    capsys.readouterr()
    assert main(["analyze", str(tmp_path / "one"), "--out", str(tmp_path / "a"), "--quiet"]) == 0, \
        capsys.readouterr().err
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary and (tmp_path / "a" / "fourier").is_dir()


def test_dla_on_all_zero_weights_says_there_is_no_margin_to_share(run, tmp_path, capsys):
    """Degenerate but valid weights: every answer margin is 0, so no component has a share of it. The
    command says so (issue #45: it ended in a pandas error after its output folder was committed)."""
    import shutil

    from safetensors.torch import load_file, save_file

    zero = tmp_path / "zero"
    zero.mkdir()
    shutil.copy(run / "config.json", zero / "config.json")
    save_file({k: v * 0 for k, v in load_file(str(run / "model.safetensors")).items()}, str(zero / "model.safetensors"))
    capsys.readouterr()
    assert main(["dla", str(zero), "--out", str(tmp_path / "d"), "--quiet"]) == 0, capsys.readouterr().err
    assert "its mean answer margin is 0, so no component has a share of it" in capsys.readouterr().out
