"""The GPU path: training, evaluation and the analyses' forwards on ``device=cuda``.

These tests skip cleanly where torch sees no CUDA device (every CI machine of this project);
``experiments/gpu_check.sh`` runs them on a machine with one.
"""

from __future__ import annotations

import json
import os

import pytest
import torch

from compose_lens.core.config import RunConfig
from compose_lens.training.evaluate import exhaustive_accuracies
from compose_lens.model import fastpath, tl
from compose_lens.training.subject import load_model
from compose_lens.training.train import Trainer

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
    a = exhaustive_accuracies(cpu)
    b = exhaustive_accuracies(gpu)
    for name in a:
        assert abs(a[name]["accuracy"] - b[name]["accuracy"]) < 2e-3, name


def test_deterministic_gpu_runs_repeat_bit_for_bit(tmp_path, tiny_config):
    """`train --deterministic` on a GPU: the same seed twice gives the same weights, bit for bit
    (docs/cluster.md, 'Bit for bit on a GPU'). Each run is its own process, as a user's would be,
    so CUBLAS_WORKSPACE_CONFIG is set before that process first uses cuBLAS."""
    import subprocess
    import sys

    from safetensors.torch import load_file

    config = tmp_path / "tiny.json"
    config.write_text(tiny_config.with_overrides(["precision=bf16", "steps=60", "lr=0.01"]).to_json())
    env = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"}
    for name in ("a", "b"):
        done = subprocess.run([sys.executable, "-m", "compose_lens.cli", "train", "--config", str(config), "--quiet",
                               "--device", "cuda", "--deterministic", "--out", str(tmp_path / name)],
                              env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    a, b = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_stacked_runs_train_on_the_gpu(tmp_path, tiny_config):
    """--runs-per-process on a GPU: K stacked runs each end with their own weights, on the device."""
    from compose_lens.training.batched import BatchedTrainer

    configs = [tiny_config.with_overrides(["device=cuda", "precision=bf16", "steps=40", f"model.init_seed={s}",
                                           f"train.seed={s}"]) for s in range(4)]
    BatchedTrainer(configs, [tmp_path / str(s) for s in range(4)], progress=False).run()
    finals = [json.loads((tmp_path / str(s) / "results.json").read_text()) for s in range(4)]
    assert [r["steps"] for r in finals] == [40] * 4


def test_analyze_and_llc_run_on_the_gpu(tmp_path):
    """`analyze --device cuda` reads the paper model's findings as the CPU does (fp32 forwards), and
    `llc --device cuda` samples healthy-shaped chains there."""
    from compose_lens.cli import main

    for device in ("cpu", "cuda"):
        assert main(["analyze", "paper", "--skip-causal", "--quiet", "--device", device,
                     "--out", str(tmp_path / device)]) == 0
    cpu = json.loads((tmp_path / "cpu" / "summary.json").read_text())
    gpu = json.loads((tmp_path / "cuda" / "summary.json").read_text())
    for key, value in cpu.items():
        if isinstance(value, float) and value == value:
            assert abs(gpu[key] - value) <= 0.02 + 0.02 * abs(value), key
    pytest.importorskip("devinterp")
    from compose_lens.registry.llc import estimate as llc

    loaded = load_model("paper", bridge=False)
    settings = llc.LlcSettings(chains=2, draws=20, batch_size=64, n_sequences=256)
    data = llc.training_sequences(loaded.split, settings.n_sequences, settings.seed)
    found = llc.estimate_llc(tl.parameters(loaded.model), loaded.config, data, settings, device="cuda")
    assert found["check_finite"] and found["llc_mean"] > 0
