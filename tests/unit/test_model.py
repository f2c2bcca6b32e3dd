"""The model: TransformerLens hooks, the fast path's exactness, the study's checkpoints."""

from __future__ import annotations

import math

import pytest
import torch

from compose_lens.model import fastpath, lastpos, tl
from compose_lens.core import capabilities
from compose_lens.core.capabilities import is_paper_architecture
from compose_lens.core.config import ModelConfig
from compose_lens.core.errors import ComposeLensError
from compose_lens.training.runs import save_model
from compose_lens.training.subject import load_model, load_reference_pth, load_model_dir
from compose_lens.data.sampler import TrainingSampler


def direct_logits(sd: dict, tokens: torch.Tensor) -> torch.Tensor:
    """The study's model written out by hand from a HookedTransformer state dict (one head)."""
    x = sd["embed.W_E"][tokens] + sd["pos_embed.W_pos"][: tokens.shape[1]]
    n = tokens.shape[1]
    mask = torch.ones(n, n, dtype=torch.bool).triu(1)
    for layer in range(2):
        p = f"blocks.{layer}."
        q = x @ sd[p + "attn.W_Q"][0]
        k = x @ sd[p + "attn.W_K"][0]
        v = x @ sd[p + "attn.W_V"][0]
        scores = (q @ k.transpose(1, 2)) / math.sqrt(q.shape[-1])
        pattern = scores.masked_fill(mask, float("-inf")).softmax(-1)
        x = x + (pattern @ v) @ sd[p + "attn.W_O"][0]
        x = x + torch.relu(x @ sd[p + "mlp.W_in"]) @ sd[p + "mlp.W_out"]
    return x @ sd["unembed.W_U"]


def test_transformerlens_interface(tiny_config, tiny_split):
    model = tl.boot(tiny_config.model)
    tokens = TrainingSampler(tiny_split, 8, 0).batch(0).tokens
    logits, cache = model.run_with_cache(tokens)
    assert logits.shape == (8, tiny_config.task.seq_len, tiny_config.task.modulus)
    for name in ("blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern", "blocks.1.mlp.hook_post",
                 "blocks.0.hook_resid_mid", "blocks.1.hook_mlp_out"):
        assert name in cache
    assert torch.equal(cache["blocks.0.hook_mlp_out"], torch.zeros_like(cache["blocks.0.hook_mlp_out"]))
    assert model.W_Q.shape == (2, 1, 32, 32)
    assert model.OV.shape[-1] == 32 and model.QK.shape[-1] == 32
    # a hook really changes the computation
    patched = model.run_with_hooks(tokens, fwd_hooks=[("blocks.1.hook_attn_out", lambda t, hook: t * 0)])
    assert not torch.allclose(patched, logits)


def test_same_seed_same_weights(tiny_config):
    a, b = tl.boot(tiny_config.model), tl.boot(tiny_config.model)
    c = tl.boot(tiny_config.model.replace(init_seed=1))
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["embed.weight"], sc["embed.weight"])


def test_fast_path_matches_transformerlens(tiny_config, tiny_split):
    model = tl.boot(tiny_config.model)
    with torch.no_grad():  # make the weights less tame than at init (the output matrices 3x tl4's init)
        for name, p in tl.parameters(model).items():
            if p.requires_grad:
                p.mul_(1.5)
    tokens = TrainingSampler(tiny_split, 256, 0).batch(0).tokens
    with torch.no_grad():
        fast = fastpath.last_position_logits(tl.parameters(model), tiny_config.model, tokens)
        plain = model(tokens)[:, -1]
    assert torch.allclose(fast, plain, atol=1e-4, rtol=1e-4), (fast - plain).abs().max()


def test_fast_path_gradients_match(tiny_config, tiny_split):
    model = tl.boot(tiny_config.model)
    batch = TrainingSampler(tiny_split, 128, 0).batch(0)
    grads = []
    for use_fast in (True, False):
        model.zero_grad()
        logits = (fastpath.last_position_logits(tl.parameters(model), tiny_config.model, batch.tokens)
                  if use_fast else model(batch.tokens)[:, -1])
        torch.nn.functional.cross_entropy(logits, batch.labels).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        assert torch.allclose(grads[0][name], grads[1][name], atol=1e-5, rtol=1e-3), name


@pytest.mark.parametrize("changes", [dict(n_layers=3, mlp_blocks=(1, 2)), dict(n_heads=2, d_head=16),
                                     dict(normalization_type="LN", mlp_blocks=(0, 1)),
                                     dict(trained_biases=True)])
def test_other_architectures_build_and_take_the_exact_path(tiny_config, tiny_split, changes):
    cfg = tiny_config.model.replace(**changes)
    assert not is_paper_architecture(cfg)
    model = tl.boot(cfg)
    tokens = TrainingSampler(tiny_split, 4, 0).batch(0).tokens
    assert model(tokens).shape == (4, tiny_config.task.seq_len, tiny_config.task.modulus)


OTHER_ARCHITECTURES = [dict(n_layers=3, mlp_blocks=(0, 1, 2), n_heads=2, d_head=16),
                       dict(n_layers=4, mlp_blocks=(0, 1, 2, 3), n_heads=4, d_head=8, act_fn="gelu"),
                       dict(n_layers=2, mlp_blocks=(0, 1), trained_biases=True)]


@pytest.mark.parametrize("changes", OTHER_ARCHITECTURES)
def test_last_position_forward_matches_transformerlens(tiny_config, tiny_split, changes):
    """The last-layer-at-the-last-position forward: same logits and gradients as the full forward."""
    cfg = tiny_config.model.replace(**changes)
    assert capabilities.answer_forward(cfg) == "lastpos"
    model = tl.boot(cfg)
    params = tl.parameters(model)
    with torch.no_grad():  # biases away from zero, so the trained-bias path is tested too
        for name, p in params.items():
            if name.endswith("bias") and p.requires_grad:
                p.normal_(0, 0.2)
    batch = TrainingSampler(tiny_split, 128, 0).batch(0)
    results = []
    for forward in (lambda t: lastpos.last_position_logits(params, cfg, t),
                    lambda t: model(t)[:, -1]):
        model.zero_grad()
        logits = forward(batch.tokens)
        torch.nn.functional.cross_entropy(logits, batch.labels).backward()
        results.append((logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                                          if p.grad is not None}))
    (fast, fast_grads), (plain, plain_grads) = results
    assert torch.allclose(fast, plain, atol=1e-5, rtol=1e-4), (fast - plain).abs().max()
    assert fast_grads.keys() == plain_grads.keys()
    for name in fast_grads:
        assert torch.allclose(fast_grads[name], plain_grads[name], atol=1e-6, rtol=1e-3), name


def test_normalised_models_take_the_transformerlens_forward(tiny_config):
    cfg = tiny_config.model.replace(normalization_type="LN", mlp_blocks=(0, 1))
    assert capabilities.answer_forward(cfg) == "transformerlens"
    assert capabilities.answer_forward(tiny_config.model) == "tables"
    assert capabilities.answer_forward(tiny_config.model, "off") == "transformerlens"


def test_save_and_load_round_trip(tmp_path, tiny_config, tiny_split):
    model = tl.boot(tiny_config.model)
    save_model(model, tiny_config, tmp_path / "m")
    again, config = load_model_dir(tmp_path / "m")
    assert config == tiny_config
    tokens = TrainingSampler(tiny_split, 16, 0).batch(0).tokens
    assert torch.equal(model(tokens), again(tokens))


@pytest.mark.parametrize("changes", [{}, *OTHER_ARCHITECTURES, dict(trained_biases=True),
                                     *[dict(normalization_type=n, mlp_blocks=(0, 1), n_heads=2, d_head=8)
                                       for n in ("LN", "LNPre", "RMS", "RMSPre")]])
def test_state_shapes_are_the_bridge_state_dict(tiny_config, changes):
    cfg = tiny_config.model.replace(**changes)
    booted = {name: tuple(value.shape) for name, value in tl.boot(cfg).state_dict().items()}
    assert tl.state_shapes(cfg) == booted


def test_weights_without_the_bridge_give_the_bridge_answers(tmp_path, tiny_config, tiny_split):
    from compose_lens.training.evaluate import answer_logits

    model = tl.boot(tiny_config.model)
    with torch.no_grad():
        tl.parameters(model)["blocks.1.mlp.in.weight"].normal_()  # away from the initialisation
    save_model(model, tiny_config, tmp_path / "m")
    light = load_model(tmp_path / "m", bridge=False)
    assert isinstance(light.model, tl.Weights)
    tokens = TrainingSampler(tiny_split, 64, 0).batch(0).tokens
    assert torch.equal(answer_logits(light.model, light.config.model, tokens),
                       answer_logits(model, tiny_config.model, tokens))
    with pytest.raises(ValueError, match="booted model"):
        answer_logits(light.model, light.config.model, tokens, fast=False)
    normed = tiny_config.replace(model=tiny_config.model.replace(normalization_type="LN", mlp_blocks=(0, 1)))
    save_model(tl.boot(normed.model), normed, tmp_path / "ln")
    assert not isinstance(load_model(tmp_path / "ln", bridge=False).model, tl.Weights)  # no fast forward


def test_weights_without_the_bridge_are_checked(tmp_path, tiny_config):
    from safetensors.torch import load_file, save_file

    directory = save_model(tl.boot(tiny_config.model), tiny_config, tmp_path / "m")
    state = load_file(str(directory / "model.safetensors"))
    state["blocks.0.mlp.in.weight"] = torch.ones_like(state["blocks.0.mlp.in.weight"])
    save_file(state, str(directory / "model.safetensors"))
    with pytest.raises(ComposeLensError, match="blocks.0.mlp.in.weight is not zero"):
        load_model(directory, bridge=False)
    state["blocks.0.mlp.in.weight"] = torch.zeros(3, 3)
    save_file(state, str(directory / "model.safetensors"))
    with pytest.raises(ComposeLensError, match="has shape"):
        load_model(directory, bridge=False)


def test_evaluate_does_not_import_transformerlens(tmp_path, tiny_config):
    """``evaluate`` of a fast-path model skips the ~2 s import of TransformerLens."""
    import subprocess
    import sys

    save_model(tl.boot(tiny_config.model), tiny_config, tmp_path / "m")
    code = ("import sys; from compose_lens.cli import main; "
            f"rc = main(['evaluate', {str(tmp_path / 'm')!r}, '--pool-size', '20', '--quiet']); "
            "print(rc, 'transformer_lens' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "0 False False"


def test_corrupt_checkpoint_is_refused_without_damage(tmp_path, tiny_config):
    directory = save_model(tl.boot(tiny_config.model), tiny_config, tmp_path / "m")
    weights = directory / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(ComposeLensError, match="not a readable safetensors"):
        load_model(directory)
    assert weights.stat().st_size == 100  # nothing was rewritten
    with pytest.raises(ComposeLensError, match="no such file"):
        load_model(tmp_path / "absent")


def test_reference_checkpoint_matches_direct_computation(reference_dir):
    sd = torch.load(reference_dir / "final.pth", weights_only=True, map_location="cpu")
    loaded = load_model(reference_dir / "final.pth")
    tokens = TrainingSampler(loaded.split, 256, 0).batch(0).tokens
    expected = direct_logits(sd, tokens)
    with torch.no_grad():
        got = loaded.model(tokens)
        fast = fastpath.last_position_logits(tl.parameters(loaded.model), loaded.config.model, tokens)
    assert torch.allclose(got, expected, atol=1e-3, rtol=1e-4)
    assert torch.allclose(fast, expected[:, -1], atol=1e-3, rtol=1e-4)


def test_reference_with_a_layer1_mlp_is_refused(reference_dir, tmp_path):
    sd = torch.load(reference_dir / "final.pth", weights_only=True, map_location="cpu")
    sd["blocks.0.mlp.W_in"] = torch.ones_like(sd["blocks.0.mlp.W_in"])
    bad = tmp_path / "bad.pth"
    torch.save(sd, bad)
    with pytest.raises(ComposeLensError, match="layer-1 MLP"):
        load_reference_pth(bad)


def test_paper_model_config_is_the_spec():
    cfg = ModelConfig()
    assert (cfg.n_layers, cfg.n_heads, cfg.d_model, cfg.d_head, cfg.d_mlp, cfg.n_ctx) == (2, 1, 128, 128, 512, 16)
    assert cfg.mlp_blocks == (1,) and cfg.normalization_type is None and is_paper_architecture(cfg)


def test_parameters_are_the_live_tensors_even_after_one_is_replaced(tiny_config):
    model = tl.boot(tiny_config.model)
    first = tl.parameters(model)
    assert tl.parameters(model)["embed.weight"] is first["embed.weight"]  # kept, and live
    with torch.no_grad():
        first["embed.weight"].add_(1.0)
    assert torch.equal(tl.parameters(model)["embed.weight"], first["embed.weight"])
    new = torch.nn.Parameter(torch.zeros_like(first["embed.weight"]))
    model.tok_embed._original_component.weight = new  # the bridge's module for embed.weight
    assert tl.parameters(model)["embed.weight"] is new
    assert tl.parameters(model).keys() == first.keys()
