"""Training: the answer-only loss learns, runs are reproducible, interruptions resume exactly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from compose_lens.model import tl
from compose_lens.config import ComposeLensError
from compose_lens.train import Trainer


def weights(run_dir):
    return load_file(str(run_dir / "model.safetensors"))


def test_run_directory_layout_and_learning(tmp_path, tiny_config):
    config = tiny_config.with_overrides(["steps=150", "lr=0.01", "eval_every=50", "checkpoint_every=50"])
    results = Trainer(config, tmp_path / "run", progress=False).run()
    run = tmp_path / "run"
    for name in ("config.json", "metrics.jsonl", "results.json", "model.safetensors", "split.json",
                 "checkpoints/step_000050/model.safetensors", "checkpoints/step_000150/config.json"):
        assert (run / name).exists(), name
    lines = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert [l["step"] for l in lines] == [50, 100, 150]
    assert lines[-1]["train_loss"] < lines[0]["train_loss"]
    assert lines[-1]["0var_train"] > 1.5 / 7  # better than chance (1/7) on the training pairs
    assert set(results["exhaustive"]) == {"zero_var_heldout", "two_var_union"}
    assert results["exhaustive"]["zero_var_heldout"]["total"] == 49 - int(0.8 * 49)


def test_layer1_mlp_and_biases_stay_exactly_zero(tmp_path, tiny_config):
    trainer = Trainer(tiny_config.with_overrides(["steps=20"]), tmp_path / "run", progress=False)
    trainer.run()
    params = tl.parameters(trainer.model)
    for name in tl.frozen_names(tiny_config.model):
        assert torch.count_nonzero(params[name]) == 0, name
    assert torch.count_nonzero(params["blocks.1.mlp.in.weight"]) > 0


def test_same_seed_same_weights(tmp_path, tiny_config):
    a = Trainer(tiny_config, tmp_path / "a", progress=False)
    a.run()
    b = Trainer(tiny_config, tmp_path / "b", progress=False)
    b.run()
    wa, wb = weights(tmp_path / "a"), weights(tmp_path / "b")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    c = Trainer(tiny_config.with_overrides(["train.seed=1"]), tmp_path / "c", progress=False)
    c.run()
    assert not torch.equal(wa["embed.weight"], weights(tmp_path / "c")["embed.weight"])


def test_interrupted_run_resumes_to_identical_weights(tmp_path, tiny_config):
    Trainer(tiny_config, tmp_path / "full", progress=False).run()

    def interrupt(trainer):
        if trainer.step == 27:  # between the checkpoints at 20 and 30
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Trainer(tiny_config, tmp_path / "cut", progress=False).run(on_step=interrupt)
    assert not (tmp_path / "cut" / "results.json").exists()
    Trainer(tiny_config, tmp_path / "cut", resume=True, progress=False).run()
    full, cut = weights(tmp_path / "full"), weights(tmp_path / "cut")
    assert all(torch.equal(full[k], cut[k]) for k in full)
    steps = [json.loads(l)["step"] for l in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [10, 20, 30, 40]


def test_existing_run_is_not_overwritten(tmp_path, tiny_config):
    Trainer(tiny_config, tmp_path / "run", progress=False).run()
    before = (tmp_path / "run" / "model.safetensors").read_bytes()
    with pytest.raises(ComposeLensError, match="already holds a run"):
        Trainer(tiny_config, tmp_path / "run", progress=False)
    with pytest.raises(ComposeLensError, match="another configuration"):
        Trainer(tiny_config.with_overrides(["lr=0.5"]), tmp_path / "run", resume=True, progress=False)
    assert (tmp_path / "run" / "model.safetensors").read_bytes() == before


def test_killed_cli_run_resumes(tmp_path, tiny_config):
    """A real SIGKILL mid-run: the checkpoint on disk is whole and the run resumes."""
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "compose_lens.cli", "train", "--out", str(run), "--quiet",
           "--set", "modulus=7", "--set", "n_vars=6", "--set", "f=0.8", "--set", "model.d_model=32",
           "--set", "model.d_head=32", "--set", "model.d_mlp=64", "--set", "steps=1000",
           "--set", "batch_size=64", "--set", "eval_every=100", "--set", "checkpoint_every=100",
           "--set", "pool_size=64", "--set", "threads=1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and not (run / "checkpoints" / "step_000200").exists():
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (run / "results.json").exists()
    resumed = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((run / "results.json").read_text())["steps"] == 1000
    steps = [json.loads(l)["step"] for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(100, 1001, 100))


def test_cli_refuses_bad_arguments(tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "compose_lens.cli", *args], capture_output=True, text=True)

    bad = run("train", "--out", str(tmp_path / "x"), "--set", "f=1.5")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "f=1.5" in bad.stderr
    assert not (tmp_path / "x").exists()
    bad = run("evaluate", str(tmp_path / "nothing"))
    assert bad.returncode == 2 and "no such file" in bad.stderr
    bad = run("train")
    assert bad.returncode == 2 and "--out" in bad.stderr


def test_compile_only_for_long_runs(tiny_config):
    from compose_lens.train import COMPILE_MIN_STEPS, use_compile

    assert not use_compile(tiny_config)  # the tests' short runs stay eager
    long = tiny_config.replace(train=tiny_config.train.replace(steps=COMPILE_MIN_STEPS))
    assert use_compile(long.replace(train=long.train.replace(compile="on")))
    assert not use_compile(long.replace(train=long.train.replace(compile="off")))


def test_thread_rule_counts_only_other_processes():
    from compose_lens.cores import ThreadGovernor, threads_for

    assert threads_for(2, 0.0) == 2 and threads_for(2, 1.0) == 1 and threads_for(4, 1.2) == 3
    governor = ThreadGovernor()
    assert 1 <= governor.first_threads(0.2) <= governor.cores
