"""Attention entropy per head at '=': the analysis added through the registry's one declaration."""

from __future__ import annotations

import math

import torch

from compose_lens import registry
from compose_lens.registry.attention_entropy.entropy import attention_entropy, lowest
from compose_lens.model import tl
from compose_lens.training.subject import Subject


def test_a_head_with_no_query_attends_uniformly_and_reads_log_n(tiny_config, tiny_split):
    model = tl.boot(tiny_config.model).eval()
    params = tl.parameters(model)
    with torch.no_grad():
        params["blocks.1.attn.q.weight"].zero_()  # layer 2's scores all 0: uniform over the n positions
        params["blocks.0.attn.q.weight"].mul_(1e3)  # layer 1's scores sharp: attention on few positions
    table = attention_entropy(Subject(model, tiny_config, tiny_split, "test"), pool_size=8, n_boot=50)
    n = tiny_config.task.seq_len
    flat = table[table["layer"] == 1]
    assert all(abs(v - math.log(n)) < 1e-5 for v in flat["entropy"])
    focused = table[table["layer"] == 0]
    assert (focused["entropy"] < math.log(n) / 2).all()
    assert (table["low"] <= table["entropy"]).all() and (table["entropy"] <= table["high"]).all()
    assert set(table["kind"]) == {"all", "const", "var1", "var2"}
    assert lowest(table)["layer"] == 0  # the uniform head is never the most focused


def test_it_is_registered_once_and_analyze_runs_it():
    names = [a.name for a in registry.ANALYSES]
    assert names.count("attention_entropy") == 1
    assert registry.by_name(registry.ANALYSES, "attention_entropy").command == "entropy"
