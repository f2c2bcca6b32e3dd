"""DAS, the LLC and experiment tracking (compose_lens.analysis.das, .llc, compose_lens.core.tracking)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from compose_lens.analysis import das, llc
from compose_lens.cli import main
from compose_lens.core.errors import ComposeLensError
from compose_lens.data.task import decode

ROOT = Path(__file__).resolve().parents[2]
needs_devinterp = pytest.mark.skipif(importlib.util.find_spec("devinterp") is None,
                                     reason="devinterp is not installed (pip install -e '.[methods]')")
needs_tensorboard = pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None,
                                       reason="tensorboard is not installed (pip install -e '.[methods]')")


# -- DAS ----------------------------------------------------------------------------------------


def test_binding_pairs_are_counterfactual(tiny_split):
    """Base and source query the same variable on the same side with another value and another
    constant; the target is the source's value plus the base's constant; the positions point at
    the queried variable's value and at the query's variable token."""
    task = tiny_split.task
    pairs = das.binding_pairs(tiny_split, 60, seed=3)
    assert len(pairs) == 60
    for i in range(len(pairs)):
        base, source = decode(task, pairs.base[i].tolist()), decode(task, pairs.source[i].tolist())
        left = isinstance(base.lhs, str)
        assert base.type == source.type and base.type in ("1var_left", "1var_right")
        variable = base.lhs if left else base.rhs
        assert variable == (source.lhs if left else source.rhs)
        b_value, b_const = (base.x, base.y) if left else (base.y, base.x)
        s_value, s_const = (source.x, source.y) if left else (source.y, source.x)
        assert s_value != b_value and s_const != b_const
        assert int(pairs.target[i]) == (s_value + b_const) % task.modulus
        for tokens, pos, value in ((pairs.base[i], pairs.base_value_pos[i], b_value),
                                   (pairs.source[i], pairs.source_value_pos[i], s_value)):
            assert int(tokens[pos]) == value
            assert int(tokens[pos - 1]) == task.first_var_token + task.var_index(variable)
        assert int(pairs.base[i, pairs.base_query_pos[i]]) == task.first_var_token + task.var_index(variable)


@pytest.fixture(scope="module")
def paper():
    from compose_lens.training.subject import load_model

    return load_model("paper")


def test_das_finds_the_bound_value_and_not_at_the_placebo_site(paper):
    """On the paper model, the subspace DAS learns at the value token carries the bound value
    (interchanging it makes the model answer source value + base constant) far more often than a
    random subspace of the same rank; at the query's variable token (the placebo site) it does not."""
    pairs = das.correct_pairs(paper.model, das.binding_pairs(paper.split, 240, seed=0))
    train, test = pairs.subset(torch.arange(160)), pairs.subset(torch.arange(160, len(pairs)))
    value_site, placebo = (next(s for s in das.SITES if s.name == name)
                           for name in ("value_after_layer1", "query_variable_after_layer1"))
    learned, losses = das.fit_binding_subspace(paper.model, value_site, train, rank=32, epochs=8)
    assert losses[-1] < losses[0]
    found = das.interchange_accuracy(paper.model, value_site, learned, test)["iia"]
    random = das.interchange_accuracy(paper.model, value_site, torch.linalg.qr(torch.randn(128, 32))[0], test)["iia"]
    assert found > 0.6 and found > random + 0.5, (found, random)
    fitted, _ = das.fit_binding_subspace(paper.model, placebo, train, rank=32, epochs=3)
    assert das.interchange_accuracy(paper.model, placebo, fitted, test)["iia"] < 0.05


def test_methods_page_gives_the_das_settings_of_the_committed_table():
    """docs/methods.md's commands and table name the ranks, pairs and epochs the committed data was made with."""
    import re

    page = (ROOT / "docs" / "methods.md").read_text()
    made = {json.dumps(json.loads(p.read_text())["settings"], sort_keys=True)
            for p in (ROOT / "experiments" / "results" / "methods").glob("das_*.json")}
    assert len(made) == 1, "the committed DAS results were made with different settings"
    settings = json.loads(made.pop())
    commands = re.findall(r"^compose-lens das .*$", page, re.M)
    assert commands
    for command in commands:
        ranks = re.search(r"--ranks ((?:\d+ ?)+)", command)
        assert ranks and [int(r) for r in ranks.group(1).split()] == settings["ranks"], command
        assert f"--n-pairs {settings['n_pairs']}" in command and f"--epochs {settings['epochs']}" in command, command
    ranks = ", ".join(map(str, settings["ranks"]))
    assert f"{settings['n_pairs']} pairs drawn, {settings['epochs']} epochs, ranks {ranks};" in page
    assert "rank " + " / ".join(map(str, settings["ranks"])) in page


def test_das_refuses_a_model_in_train_mode(paper):
    """TransformerLens's fit_das needs eval mode; the loaded model has it (a model put in train
    mode is refused by TransformerLens, not silently run with training behaviour)."""
    pairs = das.binding_pairs(paper.split, 40, seed=0)
    paper.model.train()
    try:
        with pytest.raises(ValueError, match="eval"):
            das.fit_binding_subspace(paper.model, das.SITES[0], pairs, rank=2, epochs=1)
    finally:
        paper.model.eval()


def test_das_cli_refuses_bad_input_in_one_line(tmp_path, capsys):
    out = tmp_path / "das"
    assert main(["das", "paper", "--out", str(out), "--ranks", "0"]) == 2
    assert main(["das", "paper", "--out", str(out), "--n-pairs", "5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "--ranks 0" in err[0] and "--n-pairs 5" in err[1]
    assert not out.exists()


# -- LLC ----------------------------------------------------------------------------------------


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


# -- tracking -----------------------------------------------------------------------------------


@needs_tensorboard
def test_tensorboard_logs_what_metrics_jsonl_holds(tiny_config, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from compose_lens.training.runs import foreign_in_run, read_metrics
    from compose_lens.training.train import train

    config = tiny_config.with_overrides(["log_to=tensorboard"])
    train(config, tmp_path / "run", progress=False)
    logged = read_metrics(tmp_path / "run")
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    events.Reload()
    assert {"loss/train", "lr", "accuracy/2var_var_restricted_1"} <= set(events.Tags()["scalars"])
    loss = events.Scalars("loss/train")
    assert [e.step for e in loss] == [m["step"] for m in logged]
    assert [e.value for e in loss] == pytest.approx([m["train_loss"] for m in logged], rel=1e-6)
    assert [e.value for e in events.Scalars("accuracy/0var_train")] == pytest.approx(
        [m["0var_train"] for m in logged])
    assert events.Scalars("lr")[0].value == pytest.approx(config.train.lr)
    assert foreign_in_run(tmp_path / "run") is None  # what --overwrite may delete: the SummaryWriter's files


def test_log_to_none_imports_no_tracker(tmp_path):
    """The default trains without importing tensorboard or wandb (run in a fresh interpreter)."""
    script = (
        "import sys\n"
        "from compose_lens.core.config import RunConfig, TaskConfig, ModelConfig, TrainConfig\n"
        "from compose_lens.training.train import train\n"
        "task = TaskConfig(modulus=7, n_vars=6, left_forbidden=('f',), right_forbidden=('a',), f=0.8)\n"
        "config = RunConfig(task=task, model=ModelConfig.for_task(task, d_model=16, d_head=16, d_mlp=32),\n"
        "                   train=TrainConfig(steps=4, batch_size=8, eval_every=2, checkpoint_every=2,\n"
        "                                     pool_size=8, threads=1))\n"
        f"train(config, {str(tmp_path / 'run')!r}, progress=False)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorboard', 'wandb')\n"
        "             or m == 'torch.utils.tensorboard'))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert not (tmp_path / "run" / "tensorboard").exists()


def test_a_missing_tracker_is_refused_before_the_run_directory_is_made(tiny_config, tmp_path, monkeypatch):
    from compose_lens.core import tracking
    from compose_lens.training.train import Trainer

    real = importlib.util.find_spec
    monkeypatch.setattr(tracking.importlib.util, "find_spec",
                        lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ComposeLensError, match="needs the wandb package"):
        Trainer(tiny_config.with_overrides(["log_to=wandb"]), tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()
    with pytest.raises(ComposeLensError, match="log_to='csv'"):
        tiny_config.with_overrides(["log_to=csv"])


@needs_devinterp
def test_das_and_llc_commands_write_their_files(tmp_path, capsys):
    das_out, llc_out = tmp_path / "das", tmp_path / "llc"
    assert main(["das", "paper", "--out", str(das_out), "--ranks", "2", "--n-pairs", "60", "--epochs", "1",
                 "--sites", "value_after_layer1", "query_variable_after_layer1", "--quiet"]) == 0
    assert main(["llc", "paper", "--out", str(llc_out), "--chains", "2", "--draws", "8", "--batch-size", "16",
                 "--n-sequences", "64", "--quiet"]) == 0
    captured = capsys.readouterr()
    assert "das 0/2" not in captured.err and "llc 0/2" not in captured.err  # --quiet: no bar
    import pandas as pd

    table = pd.read_csv(das_out / "das.csv")
    assert set(table["site"]) == {"value_after_layer1", "query_variable_after_layer1"}
    assert set(table["control"]) == {"learned", "random subspace", "arbitrary labels"}
    assert json.loads((das_out / "das.json").read_text())["pairs_drawn"] == 60
    assert (das_out / "figures" / "das.png").stat().st_size > 0
    estimates = pd.read_csv(llc_out / "llc.csv")
    assert len(estimates) == 1 and estimates["llc_mean"].notna().all()
    assert len(pd.read_csv(llc_out / "llc_traces.csv")) == 2 * 8  # 2 chains x 8 draws
    assert json.loads((llc_out / "llc.json").read_text())["settings"]["chains"] == 2


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


needs_wandb = pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="wandb is not installed")


@needs_wandb
@pytest.mark.parametrize("mode,fails", [("bogus", False), ("online", True)])
def test_a_tracker_that_does_not_start_leaves_no_half_made_run(mode, fails, tiny_config, tmp_path, monkeypatch,
                                                               capsys):
    """A WANDB_MODE W&B refuses is refused before the run directory is made; a W&B that fails to
    start (no network, a bad key) is one line, and the run it was to track is not left behind
    (issue #45: a traceback, and a run directory with a marker and an empty wandb/)."""
    import wandb

    monkeypatch.setenv("WANDB_MODE", mode)
    if fails:
        def no_network(*args, **kwargs):
            raise wandb.errors.CommError("Network error (ConnectionError), entering retry loop")
        monkeypatch.setattr(wandb, "init", no_network)
    config = tmp_path / "c.json"
    config.write_text(tiny_config.with_overrides(["log_to=wandb"]).to_json())
    capsys.readouterr()
    status = main(["train", "--config", str(config), "--out", str(tmp_path / "run"), "--quiet"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert ("W&B did not start" if fails else "WANDB_MODE='bogus'") in err, err
    assert not (tmp_path / "run").exists()


def test_the_das_sites_the_command_offers_are_the_ones_das_searches():
    """config.DAS_SITES names the sites for the command line without torch; analysis.das defines them."""
    from compose_lens.analysis import das
    from compose_lens.core.config import DAS_SITES

    assert das.SITE_NAMES == DAS_SITES
