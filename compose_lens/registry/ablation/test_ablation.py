"""Ablation: the helpers leave the model as it was; the edited fast forward and the at-'='
shortcut for neurons and Fourier directions equal the hooked TransformerLens forward."""

from __future__ import annotations

import pytest
import torch

from compose_lens.registry.ablation import ablations as ablation
from compose_lens.core.errors import ComposeLensError
from compose_lens.model import tl
from compose_lens.data.sampler import POOL_NAMES, make_pool
from compose_lens.training.subject import Subject


@pytest.fixture
def tiny_model(tiny_config):
    torch.manual_seed(0)
    return tl.boot(tiny_config.model)


def _logits(model, tokens):
    with torch.no_grad():
        return model(tokens)[:, -1]


def test_ablation_hooks_restore_the_model(tiny_model, tiny_config, tiny_split):
    tokens = make_pool(tiny_split, "1var_train", 16).tokens
    before = _logits(tiny_model, tokens)
    ref = ablation.reference_tokens(tiny_split, 32)
    _, cache = tiny_model.run_with_cache(ref)
    for target, layer, index, name, sel in ablation.component_targets(tiny_config):
        for kind in ablation.ABLATION_KINDS:
            hook = ablation.replacement_hook(name, kind, cache[name], sel)
            with tl.hooks(tiny_model, [hook]):
                inside = _logits(tiny_model, tokens)
            assert not torch.equal(inside, before), (target, layer, kind)
    with pytest.raises(RuntimeError):
        with tl.hooks(tiny_model, [ablation.replacement_hook("blocks.0.attn.hook_z", "zero")]):
            raise RuntimeError("interrupted")
    assert torch.equal(_logits(tiny_model, tokens), before)


@pytest.mark.parametrize("kind", ["zero", "mean"])
def test_neuron_shortcut_equals_the_hooked_forward(tiny_model, tiny_config, tiny_split, kind):
    tokens = make_pool(tiny_split, "2var_train", 16).tokens
    ref_tokens = ablation.reference_tokens(tiny_split, 32)
    mlp = ablation.LastPositionMLP(tiny_model, tiny_config, tokens)
    ref = ablation.LastPositionMLP(tiny_model, tiny_config, ref_tokens)
    assert torch.allclose(mlp.logits(), _logits(tiny_model, tokens), atol=1e-5)
    _, cache = tiny_model.run_with_cache(ref_tokens)
    post = cache["blocks.1.mlp.hook_post"]
    # mean ablation at "=" uses the mean at "=", the hooked one the mean at each position:
    # only the last position is read, so the two must agree
    for neuron in (0, 5, 17):
        _, shortcut = next(ablation.neuron_ablation_logits(mlp, ref, [neuron], kind))
        hook = ablation.replacement_hook("blocks.1.mlp.hook_post", kind, post, (neuron,))
        hooked = ablation.ablated_logits(tiny_model, tiny_config.model, tokens, [hook], fast=False)
        assert torch.allclose(shortcut, hooked, atol=1e-5)


@pytest.mark.parametrize("kind", ablation.ABLATION_KINDS)
def test_fast_ablation_equals_the_hooked_forward(tiny_model, tiny_config, tiny_split, kind):
    """Every head, the MLP and one neuron, ablated on the edited fast forward and by TransformerLens
    hooks: the same logits; and each ablation changes them (a no-op would pass the equality)."""
    cfg = tiny_config.model
    tokens = torch.cat([make_pool(tiny_split, pool, 8).tokens for pool in POOL_NAMES])
    ref_tokens = ablation.reference_tokens(tiny_split, 32)
    post = "blocks.1.mlp.hook_post"
    names = {t[3] for t in ablation.component_targets(tiny_config)} | {post}
    fast_ref = ablation.reference_activations(tiny_model, cfg, ref_tokens, names, fast=True)
    hooked_ref = ablation.reference_activations(tiny_model, cfg, ref_tokens, names, fast=False)
    busiest = int(fast_ref[post][:, -1].var(0).argmax())  # a neuron that varies, so that ablating it shows
    targets = ablation.component_targets(tiny_config) + [("neuron", 1, busiest, post, (busiest,))]
    assert fast_ref["blocks.1.attn.hook_z"].shape[1] == 1  # layer 2 is read at "=" only
    clean = ablation.ablated_logits(tiny_model, cfg, tokens, [], fast=False)
    assert torch.allclose(ablation.ablated_logits(tiny_model, cfg, tokens, [], fast=True), clean, atol=1e-5)
    for target, layer, index, name, sel in targets:
        fast = ablation.ablated_logits(
            tiny_model, cfg, tokens, [ablation.replacement_hook(name, kind, fast_ref[name], sel, seed=1)],
            chunk=20, fast=True)  # several chunks: resample draws its rows chunk by chunk
        hooked = ablation.ablated_logits(
            tiny_model, cfg, tokens, [ablation.replacement_hook(name, kind, hooked_ref[name], sel, seed=1)],
            fast=False)
        assert (hooked - clean).abs().max() > 1e-3, (target, layer, kind)
        assert torch.allclose(fast, hooked, atol=1e-5), (target, layer, kind, (fast - hooked).abs().max())


def test_the_fast_forward_refuses_hooks_it_does_not_have(tiny_model, tiny_config, tiny_split):
    tokens = make_pool(tiny_split, "0var_train", 4).tokens
    hook = ablation.replacement_hook("blocks.0.hook_resid_mid", "zero")
    with pytest.raises(ComposeLensError, match="cannot edit blocks.0.hook_resid_mid"):
        ablation.ablated_logits(tiny_model, tiny_config.model, tokens, [hook], fast=True)


def _random_mlp(seed: int, rows: int = 300, d_mlp: int = 48, classes: int = 7) -> ablation.LastPositionMLP:
    """MLP2 at "=" with random activations and readout, strong enough that single neurons move answers
    (at initialisation a model's neurons barely do)."""
    g = torch.Generator().manual_seed(seed)
    mlp = object.__new__(ablation.LastPositionMLP)
    mlp.post = torch.randn(rows, d_mlp, generator=g).relu()
    mlp.W_logit = torch.randn(d_mlp, classes, generator=g)
    mlp.direct = 4 * torch.randn(rows, classes, generator=g)
    return mlp


@pytest.mark.parametrize("kind", ablation.ABLATION_KINDS)
def test_neuron_predictions_are_the_argmax_of_the_ablated_logits(kind):
    """The shortcut that skips rows whose answer cannot change gives every row's argmax."""
    mlp, ref = _random_mlp(0), _random_mlp(1)
    neurons = list(range(mlp.post.shape[1]))
    unablated = mlp.logits().argmax(-1)
    changed = 0
    for (n, answers), (m, logits) in zip(ablation.neuron_ablation_predictions(mlp, ref, neurons, kind, seed=2),
                                         ablation.neuron_ablation_logits(mlp, ref, neurons, kind, seed=2)):
        assert n == m and torch.equal(answers, logits.argmax(-1)), (kind, n)
        changed += int((answers != unablated).sum())
    assert changed > 0  # ablations move answers: a shortcut that kept every answer would fail


def test_removing_every_frequency_removes_the_mlp(tiny_model, tiny_config, tiny_split):
    tokens = make_pool(tiny_split, "0var_train", 16).tokens
    mlp = ablation.LastPositionMLP(tiny_model, tiny_config, tokens)
    every = list(range(tiny_config.task.modulus // 2 + 1))
    logits = ablation.fourier_ablation_logits(mlp, mlp, every, "zero")
    assert torch.allclose(logits, mlp.direct, atol=1e-5)


def test_ablation_table_covers_every_pool(tiny_model, tiny_config, tiny_split):
    table = ablation.ablation_table(Subject(tiny_model, tiny_config, tiny_split, "test"), pool_size=16, reference_size=32)
    assert set(table["pool"].astype(str)) == set(POOL_NAMES)
    assert {"head", "mlp", "neuron", "none"} <= set(table["target"])
    assert (table[table.target == "none"]["accuracy_drop"] == 0).all()
    neurons = table[(table.target == "neuron") & (table.kind == "zero")]
    assert neurons["index"].nunique() == tiny_config.model.d_mlp
