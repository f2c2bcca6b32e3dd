"""Resume keeps its word (issue #30): the recorded config and split are what was trained.

The refusals are in ``test_bad_input.py``; here, what a resume still allows: the
same split given again, and any configuration while nothing was trained yet.
"""

from __future__ import annotations

import json

import pytest

from compose_lens.core.config import ModelConfig, RunConfig, TaskConfig, TrainConfig
from compose_lens.core.errors import ComposeLensError
from compose_lens.data.split import Split
from compose_lens.training.train import Trainer

TASK = TaskConfig(modulus=7, n_vars=6, left_forbidden=("f",), right_forbidden=("a",), f=0.8)
TINY = RunConfig(task=TASK, model=ModelConfig.for_task(TASK, d_model=16, d_head=16, d_mlp=32),
                 train=TrainConfig(steps=20, batch_size=16, eval_every=10, checkpoint_every=10,
                                   pool_size=16, threads=1))


def _stop_at(step):
    def interrupt(trainer):
        if trainer.step == step:
            raise KeyboardInterrupt
    return interrupt


def test_the_same_split_given_again_resumes(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        Trainer(TINY, run, progress=False).run(on_step=_stop_at(13))
    again = Split.load(run / "split.json", TINY.task)
    trainer = Trainer(TINY, run, split=again, resume=True, progress=False)
    assert trainer.resuming
    trainer.run()
    assert json.loads((run / "results.json").read_text())["steps"] == 20


def test_a_run_that_trained_nothing_yet_restarts_with_any_config(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        Trainer(TINY, run, progress=False).run(on_step=_stop_at(7))  # before its first resume state
    (run / "config.json").unlink()
    other = TINY.with_overrides(["lr=0.002"])
    trainer = Trainer(other, run, resume=True, progress=False)
    assert trainer.restarted
    trainer.run()
    assert RunConfig.from_dict(json.loads((run / "config.json").read_text())) == other


def test_a_trained_run_without_its_config_is_not_resumed(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        Trainer(TINY, run, progress=False).run(on_step=_stop_at(13))
    (run / "config.json").unlink()
    before = sorted(p.name for p in run.rglob("*"))
    with pytest.raises(ComposeLensError, match="cannot prove"):
        Trainer(TINY, run, resume=True, progress=False)
    assert sorted(p.name for p in run.rglob("*")) == before
