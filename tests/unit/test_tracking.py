"""Experiment tracking (compose_lens.core.tracking): TensorBoard and wandb beside metrics.jsonl; the tests of DAS and
the LLC are in their folders (compose_lens/registry/das/, compose_lens/registry/llc/)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from compose_lens.cli import main
from compose_lens.core.errors import ComposeLensError

ROOT = Path(__file__).resolve().parents[2]
needs_tensorboard = pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None,
                                       reason="tensorboard is not installed (pip install -e '.[methods]')")


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


