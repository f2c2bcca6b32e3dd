"""The GPU path: training, evaluation and the analyses' forwards on ``device=cuda``.

These tests skip cleanly where torch sees no CUDA device (every CI machine of this project);
``experiments/gpu_check.sh`` runs them on a machine with one.
"""

from __future__ import annotations

import pytest
import torch

from compose_lens.config import RunConfig
from compose_lens.evaluate import exhaustive_accuracies
from compose_lens.model import fastpath, tl
from compose_lens.runs import load_model
from compose_lens.train import Trainer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def test_a_small_run_trains_on_the_gpu_in_bf16_and_evaluates(tmp_path, tiny_config):
    config = tiny_config.with_overrides(["device=cuda", "precision=bf16", "steps=60", "lr=0.01"])
    results = Trainer(config, tmp_path / "run", progress=False).run()
    assert results["steps"] == 60
    assert all(0.0 <= v <= 1.0 for v in results["pools"].values())
    loaded = load_model(tmp_path / "run", device="cuda")
    assert next(iter(tl.parameters(loaded.model).values())).device.type == "cuda"


def test_gpu_and_cpu_forwards_agree_in_fp32():
    cpu = load_model("paper", bridge=False)
    gpu = load_model("paper", bridge=False, device="cuda")
    tokens = torch.randint(0, 59, (64, 16))
    tokens[:, -1] = cpu.config.task.equals_token
    a = fastpath.last_position_logits(tl.parameters(cpu.model), cpu.config.model, tokens)
    b = fastpath.last_position_logits(tl.parameters(gpu.model), gpu.config.model, tokens.cuda())
    torch.testing.assert_close(b.cpu(), a, atol=2e-3, rtol=1e-3)


def test_paper_model_exhaustive_accuracy_is_the_same_on_the_gpu():
    cpu = load_model("paper", bridge=False)
    gpu = load_model("paper", bridge=False, device="cuda")
    a = exhaustive_accuracies(cpu.model, cpu.config, cpu.split)
    b = exhaustive_accuracies(gpu.model, gpu.config, gpu.split)
    for name in a:
        assert abs(a[name]["accuracy"] - b[name]["accuracy"]) < 2e-3, name
