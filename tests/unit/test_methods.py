"""DAS and experiment tracking (compose_lens.analysis.das, compose_lens.core.tracking); the LLC's own tests are
compose_lens/registry/llc/test_llc.py."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from compose_lens.analysis import das
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
