"""experiments/stall_mechanism.py: the per-group gradient norms add up to autograd's full gradient,
every trainable parameter is in one group, and the early predictor flags a planted stall and
spares a planted routed run."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F

from compose_lens.data.sampler import TrainingSampler
from compose_lens.model import fastpath, tl

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("stall_mechanism", ROOT / "experiments" / "stall_mechanism.py")
sm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sm)


def test_group_norms_add_up_to_the_full_gradient_norm(tiny_config, tiny_split):
    model = tl.boot(tiny_config.model, "cpu", tiny_config.task)
    batch = TrainingSampler(tiny_split, 64, seed=3).batch(0)
    loss, grads = sm.group_gradients(model, tiny_config.model, batch.tokens, batch.labels)

    trainable = tl.trainable_parameters(model)
    for p in trainable:
        p.grad = None
    reference = F.cross_entropy(fastpath.last_position_logits(tl.parameters(model), tiny_config.model,
                                                              batch.tokens), batch.labels)
    reference.backward()
    full = sum(p.grad.square().sum() for p in trainable)
    assert abs(loss - reference.item()) < 1e-6
    assert sum(g.numel() for g in grads.values()) == sum(p.numel() for p in trainable)
    assert torch.isclose(sum(g.square().sum() for g in grads.values()), full, rtol=1e-5)
    # layer-2 W_Q/W_K is its own group, and it is what autograd says it is
    named = {k: v for k, v in tl.parameters(model).items() if v.requires_grad}
    l2qk = torch.cat([named[k].grad.flatten() for k in named if k.startswith("blocks.1.attn.") and k[14] in "qk"])
    assert torch.allclose(grads["L2 W_Q/W_K"], l2qk, atol=1e-7)


def test_every_parameter_name_has_one_group():
    assert sm.group_of("blocks.0.attn.q.weight") == "L1 W_Q/W_K"
    assert sm.group_of("blocks.1.attn.o.weight") == "L2 W_V/W_O"
    assert sm.group_of("blocks.1.mlp.in.weight") == "MLP"
    assert sm.group_of("pos_embed.weight") == "embeddings"
    assert sm.group_of("unembed.weight") == "unembedding"


def _curve(routing_at: int | None) -> pd.DataFrame:
    """1-var accuracy every 100 steps: a slow climb to the stalled plateau (0.55), then 0.99 from
    ``routing_at`` on (None: never)."""
    steps = range(100, 10_001, 100)
    acc = [0.99 if routing_at is not None and s >= routing_at else min(0.55, 0.3 + s / 8000) for s in steps]
    return pd.DataFrame({"step": list(steps), "1var_train": acc})


def test_the_early_predictor_flags_the_planted_stall_and_spares_the_routed_run():
    curves = {"stall": _curve(None), "late": _curve(3300), "early": _curve(2100)}
    labels = {"stall": "stalled", "late": "routed", "early": "routed"}
    table = sm.separation(curves, labels, "1var_train", steps=range(1000, 6001, 500))
    at = table.set_index("step")
    # before either routed run routes, all three look alike: the rule flags everyone
    assert at.loc[2000, "routed_flagged"] == 2 and not at.loc[2000, "separable"]
    # at 3000 one routed run is still on the plateau; from 3500 on the rule is right on all three
    assert at.loc[3000, "routed_flagged"] == 1 and not at.loc[3000, "separable"]
    assert (at.loc[3500:, "stalled_flagged"] == 1).all() and (at.loc[3500:, "routed_flagged"] == 0).all()
    assert sm.earliest_separating_step(table) == 3500
    # a run that never logged a step is not counted there
    short = {**curves, "short": _curve(None).query("step <= 2000")}
    counted = sm.separation(short, {**labels, "short": "stalled"}, "1var_train", steps=[2000, 4000])
    assert counted["stalled_runs"].tolist() == [2, 1]


def test_operand_attention_tells_a_routed_model_from_one_before_routing(reference_dir):
    """The stall's missing piece, measured: layer 1's "=" reaches a variable operand in the
    routed paper model and in the study's final checkpoint, not in the study's step 2501."""
    from compose_lens.training.subject import load_model

    def var_operand_weight(spec):
        loaded = load_model(spec, bridge=False)
        tokens = TrainingSampler(loaded.split, 512, 0).batch(0).tokens
        return sm.operand_attention(loaded.model, loaded.config, tokens)["l1_eq_on_var_operand_1var"]

    assert var_operand_weight("paper") > 0.25
    assert var_operand_weight(reference_dir / "final.pth") > 0.25
    assert var_operand_weight(reference_dir / "step_2501.pth") < 0.15
