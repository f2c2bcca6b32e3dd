"""The LLC analysis's tests: the estimator on quadratics of known learning coefficient, its sanity checks, the
paper model's sampled module, per-component masks, the command's refusals and a run's checkpoints, and its figure."""

from __future__ import annotations

import importlib.util
import json

import pandas as pd
import pytest
import torch
from matplotlib import pyplot as plt

from compose_lens.cli import main
from compose_lens.core.errors import ComposeLensError
from compose_lens.registry.llc import estimate as llc
from compose_lens.registry.llc.figure import llc_figure

needs_devinterp = pytest.mark.skipif(importlib.util.find_spec("devinterp") is None,
                                     reason="devinterp is not installed (pip install -e '.[methods]')")


class Quadratic(torch.nn.Module):
    """Loss = sum of the first ``rank`` squared weights of 12: a minimum at 0 whose learning
    coefficient is rank / 2 (each direction with curvature counts 1/2, the flat ones nothing)."""

    def __init__(self, rank: int):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(12))
        self.rank = rank

    def forward(self, input_ids):
        return (self.w[: self.rank] ** 2).sum().expand(input_ids.shape[0], input_ids.shape[1] - 1)


@needs_devinterp
def test_llc_of_a_quadratic_is_half_its_rank():
    from datasets import Dataset

    data = Dataset.from_dict({"input_ids": [[0, 0]] * 256}).with_format("torch")
    settings = llc.LlcSettings(epsilon=1e-3, gamma=1.0, n_beta=100.0, chains=2, draws=150, burnin=50,
                               batch_size=16)
    found = {rank: llc.sample_llc(Quadratic(rank), data, lambda m, ids: m(ids), settings)
             for rank in (2, 8)}
    assert found[2]["llc_mean"] < found[8]["llc_mean"]
    for rank, estimate in found.items():
        assert 0.5 * rank / 2 < estimate["llc_mean"] < 1.5 * rank / 2, (rank, estimate["llc_mean"])
        assert estimate["check_finite"]


def test_sanity_flags_a_diverging_or_disagreeing_estimate():
    import numpy as np

    settings = llc.LlcSettings()
    level = np.concatenate([np.linspace(0, 1, 20), np.ones(80)])
    good = llc.sanity(np.stack([level, level]), np.array([5.0, 5.2]), 0.0, settings)
    assert good["healthy"], good
    climbing = llc.sanity(np.stack([np.linspace(0, 5, 100)] * 2), np.array([5.0, 5.0]), 0.0, settings)
    assert not climbing["healthy"] and "flat" in climbing["problems"]
    apart = llc.sanity(np.stack([level, level]), np.array([1.0, 9.0]), 0.0, settings)
    assert "chains_agree" in apart["problems"]
    broken = llc.sanity(np.stack([level, level * np.nan]), np.array([5.0, np.nan]), 0.0, settings)
    assert "finite" in broken["problems"]


@needs_devinterp
def test_llc_of_the_paper_model_samples_only_what_it_trained(tmp_path):
    """The sampled module holds the trained weights as parameters and the frozen ones (layer 1's
    absent MLP, the zero biases) as buffers, its loss is the answer cross-entropy, and a short
    estimate on the paper model is finite and positive."""
    import torch.nn.functional as F
    from compose_lens.model import tl
    from compose_lens.training.subject import load_model

    loaded = load_model("paper", bridge=False)
    model = llc.AnswerModel(tl.parameters(loaded.model), loaded.config.model)
    names = {n.replace("__", ".") for n, _ in model.named_parameters()}
    assert "weights.blocks.1.mlp.in.weight" in names and "weights.blocks.0.mlp.in.weight" not in names
    data = llc.training_sequences(loaded.split, 64, seed=0)
    ids = data[:64]["input_ids"]
    assert torch.allclose(llc.answer_loss(model, ids).mean(), F.cross_entropy(model(ids), ids[:, -1]))
    found = llc.estimate_llc(tl.parameters(loaded.model), loaded.config, data,
                             llc.LlcSettings(chains=2, draws=10, batch_size=32, n_sequences=64))
    assert found["check_finite"] and found["llc_mean"] > 0


@needs_devinterp
def test_a_component_llc_moves_only_the_masked_weights():
    """devinterp's weight restriction reaches the chains: on a quadratic of rank 8, SGLD restricted to two of
    its directions reads about rank 2's LLC, 1, where the whole reads 4 (issue 43: per-component LLC)."""
    from datasets import Dataset

    data = Dataset.from_dict({"input_ids": [[0, 0]] * 256}).with_format("torch")
    settings = llc.LlcSettings(epsilon=1e-3, gamma=1.0, n_beta=100.0, chains=2, draws=150, burnin=50,
                               batch_size=16)
    mask = torch.zeros_like(Quadratic(8).w)
    mask[:2] = 1.0  # two of the eight directions the loss bends in
    whole = llc.sample_llc(Quadratic(8), data, lambda m, ids: m(ids), settings)
    part = llc.sample_llc(Quadratic(8), data, lambda m, ids: m(ids), settings, param_masks={"w": mask})
    assert 0.5 < part["llc_mean"] < 1.5 < 3.0 < whole["llc_mean"] < 6.0, (part["llc_mean"], whole["llc_mean"])


def test_component_masks_pick_one_heads_slice_or_one_mlp():
    from compose_lens.core.config import ModelConfig

    cfg = ModelConfig(n_heads=2, d_head=4, d_model=8, d_mlp=16)
    state = {n: torch.randn(tuple(shape)) for n, shape in _state_shapes(cfg).items()}
    model = llc.AnswerModel(state, cfg)
    masks = llc.component_masks(model, "blocks.1.head1")
    assert set(masks) == {f"weights.blocks__1__attn__{p}__weight" for p in "qkvo"}
    q, o = masks["weights.blocks__1__attn__q__weight"], masks["weights.blocks__1__attn__o__weight"]
    assert q[4:].eq(1).all() and q[:4].eq(0).all() and o[:, 4:].eq(1).all() and o[:, :4].eq(0).all()
    assert set(llc.component_masks(model, "blocks.1.mlp")) == {"weights.blocks__1__mlp__in__weight",
                                                                "weights.blocks__1__mlp__out__weight"}
    for bad, said in (("blocks.0.mlp", "no MLP"), ("blocks.2.head0", "blocks 0..1"), ("blocks.1.head2", "heads 0..1"),
                      ("layer1", "blocks.L.headH")):
        with pytest.raises(ComposeLensError, match=said):
            llc.component_masks(model, bad)


def _state_shapes(cfg) -> dict:
    from compose_lens.model import tl

    return {n: t.shape for n, t in tl.parameters(tl.boot(cfg, "cpu")).items()}


def test_llc_cli_refuses_a_component_the_model_lacks(tmp_path, capsys):
    out = tmp_path / "llc"
    assert main(["llc", "paper", "--out", str(out), "--component", "blocks.0.mlp"]) == 2
    assert main(["llc", "paper", "--out", str(out), "--component", "mlp2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "no MLP" in err[0] and "blocks.L.headH" in err[1]
    assert not out.exists()


def test_llc_cli_refuses_bad_settings_in_one_line(tmp_path, capsys):
    out = tmp_path / "llc"
    assert main(["llc", "paper", "--out", str(out), "--chains", "1"]) == 2
    assert main(["llc", "paper", "--out", str(out), "--epsilon", "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "chains" in err[0] and "epsilon" in err[1]
    assert not out.exists()


@needs_devinterp
def test_llc_of_a_run_estimates_its_last_step_once_and_says_which_checkpoint_has_no_weights(tmp_path, capsys):
    """A run's last checkpoint and its final model are the same step and the same weights: one row,
    not two (llc.csv and the phase means counted it twice). A checkpoint folder without its
    weights is said on stderr, not skipped without a word (issue #45)."""
    from compose_lens.core.config import ModelConfig, RunConfig, TaskConfig, TrainConfig
    from compose_lens.training.train import Trainer

    task = TaskConfig(modulus=7, n_vars=6, left_forbidden=("f",), right_forbidden=("a",), f=0.8)
    config = RunConfig(task=task, model=ModelConfig.for_task(task, d_model=16, d_head=16, d_mlp=32),
                       train=TrainConfig(steps=30, batch_size=16, eval_every=10, checkpoint_every=10, pool_size=16))
    run = tmp_path / "run"
    Trainer(config, run, progress=False).run()
    (run / "checkpoints" / "step_000010" / "model.safetensors").unlink()
    sgld = ["--chains", "2", "--draws", "8", "--batch-size", "16", "--n-sequences", "64", "--quiet"]
    capsys.readouterr()
    assert main(["llc", str(run), "--out", str(tmp_path / "llc"), *sgld]) == 0
    err = capsys.readouterr().err
    import pandas as pd

    table = pd.read_csv(tmp_path / "llc" / "llc.csv")
    assert list(table["step"]) == [20, 30], table[["step", "checkpoint"]]
    assert "step_000010: no model.safetensors, so this checkpoint is left out" in err, err


def test_the_llc_line_joins_only_the_estimates_that_passed_their_checks():
    """An LLC estimate that failed a sanity check keeps its hollow marker and bar, but the line does not run
    through it (issue 43: it did, reading as a measured value)."""
    table = pd.DataFrame({"step": [100, 200, 300, 400], "llc_mean": [5.0, 9.0, -3.0, 12.0],
                          "llc_std": [0.5, 0.5, 4.0, 0.5], "healthy": [True, True, False, True],
                          "train_loss": [1.0, 0.5, 0.2, 0.1]})
    fig, _ = llc_figure(table)
    lines = [line for line in fig.axes[0].get_lines() if len(line.get_xdata()) > 1 and line.get_linestyle() != "None"]
    assert [list(line.get_xdata()) for line in lines] == [[100, 200, 400]]
    plt.close(fig)


@needs_devinterp
def test_the_llc_command_writes_its_files_quietly(tmp_path, capsys):
    llc_out = tmp_path / "llc"
    assert main(["llc", "paper", "--out", str(llc_out), "--chains", "2", "--draws", "8", "--batch-size", "16",
                 "--n-sequences", "64", "--quiet"]) == 0
    assert "llc 0/2" not in capsys.readouterr().err  # --quiet: no bar
    estimates = pd.read_csv(llc_out / "llc.csv")
    assert len(estimates) == 1 and estimates["llc_mean"].notna().all()
    assert len(pd.read_csv(llc_out / "llc_traces.csv")) == 2 * 8  # 2 chains x 8 draws
    assert json.loads((llc_out / "llc.json").read_text())["settings"]["chains"] == 2
