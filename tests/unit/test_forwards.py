"""Every forward of compose-lens against TransformerLens's ``run_with_cache``, on every architecture.

compose-lens computes a model five ways (:mod:`compose_lens.core.capabilities`): the table forward,
its ablation form, the last-position forward, the patching engine and the edge graph, each written
in terms of the weights with its heads from :mod:`compose_lens.model.heads`. Here each is run on
the same model and tokens as the TransformerLens bridge, per architecture:

* where the forward covers the architecture, its logits at ``=`` (and its attention patterns,
  where it exposes them) equal the bridge's: float32, ``atol = rtol = 1e-4`` on the logits
  and ``atol = 1e-5`` on the patterns (largest differences seen: 6.1e-5 on the paper model's
  logits, which reach 59.5; 5.5e-6 on the tiny models'; 6e-7 on any pattern);
* where it declines it, :func:`compose_lens.core.capabilities.why_not` names the failing conditions,
  the code that picks the forward takes another, and the declined forward run anyway either
  refuses or is wrong (the decline is not over-cautious).
"""

from __future__ import annotations

import pytest
import torch

from compose_lens.core import capabilities
from compose_lens.registry.circuit import discovery as circuit
from compose_lens.core.config import RunConfig
from compose_lens.core.errors import ComposeLensError
from compose_lens.data.sampler import TrainingSampler
from compose_lens.data.split import Split
from compose_lens.model import fastpath, lastpos, patch_engine, tl
from compose_lens.training.subject import load_model
from compose_lens.training.train import use_fast_path

LOGITS = dict(atol=1e-4, rtol=1e-4)
PATTERNS = dict(atol=1e-5, rtol=0)

# architecture -> (changes to the tiny config, or "paper" for the shipped model;
#                  forward -> the conditions its decline names)
ARCHITECTURES = {
    "paper": ("paper", {}),
    "3x2_mlps": (dict(n_layers=3, n_heads=2, d_head=16, mlp_blocks=(0, 1, 2)),
                 {"tables": ["n_layers=3 (needs 2)", "n_heads=2 (needs 1)", "mlp_blocks=[0, 1, 2] (needs [1])"],
                  "patching": ["n_layers=3 (needs 2)", "mlp_blocks=[0, 1, 2] (needs [1])"]}),
    "2x4": (dict(n_heads=4, d_head=8), {"tables": ["n_heads=4 (needs 1)"]}),
    "orthogonal": (dict(embeddings="orthogonal"), {}),
    "disentangled": (dict(residual="disentangled"), {}),
    "trained_biases": (dict(trained_biases=True), {"tables": ["trained_biases=true (needs false)"]}),
    "layernorm": (dict(normalization_type="LN", mlp_blocks=(0, 1)),
                  {f: ["normalization_type='LN' (needs null)"] for f in ("tables", "lastpos", "patching")}),
}
FORWARDS = ("tables", "tables_edited", "lastpos", "patching", "graph")


def capability(forward: str) -> str:
    return "tables" if forward == "tables_edited" else forward


def run(forward: str, model, cfg, tokens: torch.Tensor, cache) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    """(logits (B, vocab_out) at "=", {layer: pattern (B, H, m, n) of the last m queries}) of ``forward``."""
    params = {k: v.detach().float() for k, v in tl.parameters(model).items()}
    if forward == "tables":
        a = fastpath.forward_at_answer(params, cfg, tokens)
        return a.logits, {0: a.pattern0[:, None], 1: a.pattern1_last[:, None, None]}
    if forward == "tables_edited":
        return fastpath.edited_answer_logits(params, cfg, tokens, {}), {}
    if forward == "lastpos":  # each layer's pattern from the bridge's own residual stream
        patterns = {layer: lastpos.attention_with_pattern(params, cfg, layer, cache[f"blocks.{layer}.hook_resid_pre"],
                                                          last_only=layer == cfg.n_layers - 1)[1]
                    for layer in range(cfg.n_layers)}
        return lastpos.last_position_logits(params, cfg, tokens), patterns
    if forward == "patching":
        return patch_engine.Engine(model, cfg).run(tokens)["logits"], {}
    if forward == "graph":
        return circuit.GraphModel(params, cfg).forward(tokens)[0], {}
    raise AssertionError(forward)


def build(name: str, tiny_config: RunConfig, tiny_split: Split):
    """(bridge, config, tokens, TransformerLens logits at "=", its cache) of one architecture."""
    changes = ARCHITECTURES[name][0]
    if changes == "paper":
        loaded = load_model("paper")
        model, config = loaded.model, loaded.config
        tokens = TrainingSampler(loaded.split, 128, 0).batch(0).tokens
    else:
        config = tiny_config.replace(model=tiny_config.model.replace(**changes))
        torch.manual_seed(0)
        model = tl.boot(config.model)
        with torch.no_grad():  # less tame than at init: peaked patterns, biases away from zero
            for pname, p in tl.parameters(model).items():
                if p.requires_grad:
                    p.mul_(1.5) if not pname.endswith("bias") else p.normal_(0, 0.2)
        tokens = TrainingSampler(tiny_split, 128, 0).batch(0).tokens
    with torch.no_grad():
        logits, cache = tl.run_with_cache(model, tokens)
    return model, config, tokens, logits[:, -1].float(), cache


_BUILT: dict[str, tuple] = {}  # built once per architecture for every forward


@pytest.fixture
def architecture(request, tiny_config, tiny_split):
    name = request.param
    if name not in _BUILT:
        _BUILT[name] = build(name, tiny_config, tiny_split)
    return name, _BUILT[name]


@pytest.mark.parametrize("architecture", list(ARCHITECTURES), indirect=True)
@pytest.mark.parametrize("forward", FORWARDS)
def test_every_forward_equals_transformerlens_or_declines_with_its_reason(forward, architecture):
    name, (model, config, tokens, expected, cache) = architecture
    cfg = config.model
    declines = ARCHITECTURES[name][1].get(capability(forward))
    reason = capabilities.why_not(cfg, capability(forward))
    if declines is None:
        assert reason is None, reason
        with torch.no_grad():
            logits, patterns = run(forward, model, cfg, tokens, cache)
        torch.testing.assert_close(logits, expected, **LOGITS)
        for layer, pattern in patterns.items():
            theirs = cache[f"blocks.{layer}.attn.hook_pattern"][:, :, -pattern.shape[2]:]
            torch.testing.assert_close(pattern, theirs.float(), **PATTERNS)
        return
    assert reason is not None and all(condition in reason for condition in declines), reason
    # whoever picks the forward takes another, and says why where it is insisted on
    if capability(forward) == "tables":
        assert capabilities.answer_forward(cfg) != "tables"
        with pytest.raises(ComposeLensError, match="fast_path=on, but the table forward needs"):
            use_fast_path(config.with_overrides(["fast_path=on"]))
    elif forward == "lastpos":
        assert capabilities.answer_forward(cfg) == "transformerlens"
    elif forward == "patching":
        assert not capabilities.supports(cfg, "patching")
    # the declined forward, run anyway, refuses or is wrong
    try:
        with torch.no_grad():
            logits = run(forward, model, cfg, tokens, cache)[0]
    except (ComposeLensError, RuntimeError, KeyError):
        return
    assert not torch.allclose(logits, expected, **LOGITS), f"{forward} declines {name} but computes it"
