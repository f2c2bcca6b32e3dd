"""model/weights.py: the shared circuits and readout agree with the model's own forward; streams are distinct."""

from __future__ import annotations

import re

import torch

from compose_lens.data import streams
from compose_lens.data.sampler import make_pool
from compose_lens.model import tl, weights


def test_stream_ids_are_distinct_and_the_docstring_table_lists_each_one():
    table = dict(re.findall(r"^``([A-Z_]+)``\s+(\d+)", streams.__doc__, re.M))
    constants = {name: value for name, value in vars(streams).items()
                 if name.isupper() and isinstance(value, int) and name != "PROBE_POOL_SEED_OFFSET"}
    assert {name: int(value) for name, value in table.items()} == constants
    assert len(set(constants.values())) == len(constants)


def test_head_slices_add_up_to_the_layer(tiny_config):
    cfg = tiny_config.model.replace(n_heads=2, d_head=16)
    model = tl.boot(cfg)
    every = weights.head_weights(model, 1, head=None)
    total = sum(weights.ov_matrix(model, 1, h) for h in range(cfg.n_heads))
    assert torch.allclose(every.W_V @ every.W_O, total, atol=1e-5)
    q = tl.parameters(model)["blocks.0.attn.q.weight"].detach()
    assert torch.equal(weights.head_weights(model, 0, 1).W_Q, q[16:32].T)


def test_mlp_readout_is_the_forward_at_the_last_position(tiny_config, tiny_split):
    for cfg in (tiny_config.model, tiny_config.model.replace(trained_biases=True)):
        model = tl.boot(cfg)
        with torch.no_grad():
            for p in tl.trainable_parameters(model):
                p.add_(0.01)  # non-zero biases where they are trained
            tokens = make_pool(tiny_split, "1var_train", 8).tokens
            logits, cache = tl.run_with_cache(model, tokens)
            pre, post, out = weights.mlp_readout(tl.parameters(model), cfg, cache["blocks.1.hook_resid_mid"][:, -1])
            readout = weights.linear_readout(model)
            linear = readout.logits(cache["blocks.1.hook_resid_mid"][:, -1], post)
        assert torch.allclose(post, cache["blocks.1.mlp.hook_post"][:, -1], atol=1e-5)
        assert torch.allclose(out, logits[:, -1], atol=1e-4)
        assert torch.allclose(linear, logits[:, -1], atol=1e-4)


def test_saved_weights_are_as_readable_as_every_other_file(tmp_path):
    """model.safetensors gets the mode config.json gets (the umask's, 0644 usually): safetensors wrote 0600."""
    import os
    import stat

    from compose_lens.training.runs import CONFIG_FILE, WEIGHTS_FILE, save_model
    from compose_lens.training.subject import load_model

    loaded = load_model("paper", bridge=False)
    save_model(loaded.model, loaded.config, tmp_path / "m")
    modes = {name: stat.S_IMODE(os.stat(tmp_path / "m" / name).st_mode) for name in (WEIGHTS_FILE, CONFIG_FILE)}
    assert modes[WEIGHTS_FILE] == modes[CONFIG_FILE], {k: oct(v) for k, v in modes.items()}
