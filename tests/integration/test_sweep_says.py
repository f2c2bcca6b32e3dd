"""Sweeps say enough (issue #30): a failed point's message goes to stderr with a non-zero
exit, not only to stdout. (A refused sweep rewriting nothing is in ``test_bad_input.py``.)"""

from __future__ import annotations

from compose_lens.cli import main
from compose_lens.core.config import ModelConfig, RunConfig, TaskConfig, TrainConfig

TASK = TaskConfig(modulus=7, n_vars=6, left_forbidden=("f",), right_forbidden=("a",), f=0.8)
TINY = RunConfig(task=TASK, model=ModelConfig.for_task(TASK, d_model=16, d_head=16, d_mlp=32),
                 train=TrainConfig(steps=4, batch_size=16, eval_every=2, checkpoint_every=2,
                                   pool_size=16, threads=1))


def test_a_failed_point_is_said_on_stderr_with_a_non_zero_exit(tmp_path, capsys):
    config = tmp_path / "tiny.json"
    config.write_text(TINY.to_json())
    status = main(["sweep", "--config", str(config), "--param", "lr", "--values", "1e30", "--out",
                   str(tmp_path / "sw"), "--quiet", "--workers", "1", "--threads", "1"])
    captured = capsys.readouterr()
    assert status == 1
    assert "lr=1e+30 seed 0 failed" in captured.err and "diverged" in captured.err, captured.err
    assert "Traceback" not in captured.err
