"""The idealised variants through the command line: `train --set model.embeddings=orthogonal
--set model.residual=disentangled` trains, and `evaluate`, `fourier` and `analyze` read the run."""

from __future__ import annotations

import json

import torch
from safetensors.torch import load_file

from compose_lens.cli import main
from compose_lens.core.config import RunConfig
from compose_lens.model import tl


def test_train_and_analyse_an_idealised_model(tmp_path, capsys):
    run = tmp_path / "both"
    rc = main(["train", "--set", "modulus=7", "--set", "n_vars=6", "--set", "model.embeddings=orthogonal",
               "--set", "model.residual=disentangled", "--set", "model.d_model=128", "--set", "model.d_head=32",
               "--set", "model.d_mlp=64", "--set", "steps=30", "--set", "batch_size=64", "--set", "eval_every=10",
               "--set", "checkpoint_every=10", "--set", "pool_size=64", "--set", "threads=1",
               "--out", str(run), "--quiet"])
    assert rc == 0
    config = RunConfig.from_dict(json.loads((run / "config.json").read_text()))
    assert (config.model.embeddings, config.model.residual) == ("orthogonal", "disentangled")
    state = load_file(str(run / "model.safetensors"))
    assert torch.equal(state["embed.weight"], tl.fixed_embeddings(config.model)["embed.weight"])
    for name, mask in tl.absent_masks(config.model).items():
        assert torch.count_nonzero(state[name][mask]) == 0, name
    assert main(["evaluate", str(run), "--pool-size", "40", "--quiet"]) == 0
    assert main(["fourier", str(run), "--out", str(tmp_path / "fourier"), "--quiet"]) == 0
    assert main(["analyze", str(run), "--out", str(tmp_path / "analysis"), "--skip-causal", "--quiet"]) == 0
    summary = json.loads((tmp_path / "analysis" / "summary.json").read_text())
    assert "key_frequencies" in summary and "prev_token_attention_score" in summary
