"""Direct logit attribution and the logit lens at ``=``: which component writes the answer.

Without normalisation the logits at the last position (``=``) are a sum:

    logits = (E[t] + P[n-1] + sum_layers (sum_heads head_out + b_O) + sum_MLPs mlp_out) W_U + b_U

and so is any *logit difference*. With a final LayerNorm (``LN``, ``LNPre``) or RMSNorm (``RMS``,
``RMSPre``) the residual is centred (LayerNorm), divided by its scale and multiplied by the norm's weight
before ``W_U``, and the norm's bias added: linear in the residual once the scale is held at the value the
model computed for that sequence (read at ``ln_final.hook_scale``; TransformerLens's ``apply_ln_to_stack``
convention). So each component's term is its write, centred, divided by that scale and weighted
(:func:`direct_terms`), the norm's bias is one more term, and the terms still add up to the model's own
margin exactly. What the frozen scale leaves out: a component also changes the scale that divides every
other component's write, an indirect effect no direct term shows.

:func:`logit_attribution` splits the answer's margin, the correct answer's logit minus the mean
logit over the p answers (the mean removes what every answer gets alike), into one term per
component: the token and position embeddings, each attention head (its ``hook_result`` at ``=``), each
layer's output bias, each MLP (``hook_mlp_out``) and the unembedding bias, all read by the one forward
(:class:`compose_lens.model.forward.Forward`). The terms add up to the margin exactly (:func:`check_sums`;
tested), which is what makes the attribution *direct*: what a component writes straight into the answer,
not what it does through later layers (for that, see :mod:`compose_lens.registry.patching`). The study's
story predicts that the layer-2 MLP writes most of the margin for every sequence kind, and the attention
heads little directly (they move operands; the MLP adds).

:func:`logit_lens` unembeds the residual stream at ``=`` after each stage (embeddings, then each
attention and each MLP), each partial stream through the final norm with its own scale
(:meth:`compose_lens.model.forward.Forward.lens`), and reports the accuracy per sequence kind: where the
answer becomes readable. Sequence kinds are read from the tokens (how many of the two operands are
variables), so the nine pools of :func:`compose_lens.data.sampler.make_pools` collapse to ``0var``,
``1var``, ``2var``. Layers are named as the paper numbers them: ``layer 1 (blocks.0)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch

from compose_lens.core.config import RunConfig
from compose_lens.core.errors import ComposeLensError
from compose_lens.data.sampler import concat_batches, make_pools
from compose_lens.data.split import Split
from compose_lens.core import stats
from compose_lens.model.forward import ANSWER, Forward, Site
from compose_lens.model import tl
from compose_lens.training.subject import Subject
from compose_lens.views.drawing import layer_name

if TYPE_CHECKING:  # the shapes are documentation; importing jaxtyping costs start-up time
    from jaxtyping import Float, Int


def sequence_kind(tokens: Int[torch.Tensor, "batch pos"], first_var_token: int) -> Int[torch.Tensor, "batch"]:
    """(B,) 0, 1 or 2: how many of the two operands (the tokens before ``=``) are variables."""
    return (tokens[:, -3:-1] >= first_var_token).sum(1)


def components_at_answer(model, config: RunConfig, tokens: Int[torch.Tensor, "batch pos"]
                         ) -> dict[str, Float[torch.Tensor, "batch d_model"]]:
    """Each component's write into the residual stream at ``=``: {name: (B, d_model)}, in forward
    order (read by the one forward: :class:`compose_lens.model.forward.Forward`)."""
    cfg = config.model
    heads = {block: Site(f"blocks.{block}.attn.hook_result", ANSWER) for block in range(cfg.n_layers)}
    mlps = {block: Site(f"blocks.{block}.hook_mlp_out", ANSWER) for block in cfg.mlp_blocks}
    embeddings = {"token embedding": Site("hook_embed", ANSWER), "position embedding": Site("hook_pos_embed", ANSWER)}
    found = Forward(model, cfg).read(tokens, [*embeddings.values(), *heads.values(), *mlps.values()], len(tokens))
    params = tl.parameters(model)
    out = {name: found[site] for name, site in embeddings.items()}
    for block in range(cfg.n_layers):
        for h in range(cfg.n_heads):
            out[f"{layer_name(block)} head {h}"] = found[heads[block]][:, h]
        bias = params[f"blocks.{block}.attn.o.bias"].detach()
        if bias.abs().max() > 0:
            out[f"{layer_name(block)} attention bias"] = bias.float().cpu().expand(len(tokens), -1)
        if block in mlps:
            out[f"{layer_name(block)} MLP"] = found[mlps[block]]
    return out


FINAL_NORM_BIAS = "final normalisation bias"


def direct_terms(model, config: RunConfig, tokens: Int[torch.Tensor, "batch pos"]
                 ) -> dict[str, Float[torch.Tensor, "batch d_model"]]:
    """What each component of :func:`components_at_answer` puts into the final residual the unembedding
    reads: its write itself without normalisation; with a final norm its write centred (LayerNorm),
    divided by the scale the model computed at ``=`` and times the norm's weight, and the norm's bias
    as one more term (module doc). Their sum, through ``W_U`` plus ``b_U``, is the model's logits."""
    parts = components_at_answer(model, config, tokens)
    kind = config.model.normalization_type
    if kind is None:
        return parts
    site = Site("ln_final.hook_scale", ANSWER)
    scale = Forward(model, config.model).read(tokens, [site], len(tokens))[site].reshape(len(tokens), 1)
    params = tl.parameters(model)
    weight, bias = params.get("ln_final.weight"), params.get("ln_final.bias")
    out = {}
    for name, value in parts.items():
        value = value - value.mean(-1, keepdim=True) if kind.startswith("LN") else value
        value = value / scale
        out[name] = value * weight.detach().float().cpu() if weight is not None else value
    if bias is not None:
        out[FINAL_NORM_BIAS] = bias.detach().float().cpu().expand(len(tokens), -1)
    return out


def _answer_logits(model, config: RunConfig, tokens: torch.Tensor) -> torch.Tensor:
    """(B, d_vocab_out) the model's own logits at ``=``."""
    return Forward(model, config.model).logits(tokens).float().cpu()


def stage_of(component: str) -> str:
    """The logit-lens stage a component belongs to: the embeddings, a layer's attention, an MLP."""
    if component.endswith("embedding"):
        return "embeddings"
    if " head " in component or component.endswith("attention bias"):
        return component.split(") ")[0] + ") attention"
    return component


def _margins(resid: torch.Tensor, w_u: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """(B,) correct logit minus the mean logit, of the residual ``resid`` through ``W_U`` alone."""
    logits = resid @ w_u.T
    return logits.gather(1, labels[:, None])[:, 0] - logits.mean(1)


GROUPINGS = ("kind", "pool")  # what logit_attribution's rows are grouped by


def logit_attribution(subject: Subject, n: int = 600, seed: int = 0, by: str = "kind") -> pd.DataFrame:
    """One row per (group, component): its mean direct contribution to the answer margin, its share
    of the group's mean margin, and the group's mean margin and accuracy.

    The groups are the sequence kinds (``by="kind"``: ``0var``, ``1var``, ``2var``) or the pools the same
    sequences were drawn from (``by="pool"``: column ``pool``, in :func:`~compose_lens.data.sampler.pool_names`
    order, each with the ``kind`` its tokens have, and the contribution's 95 % bootstrap interval,
    ``contribution_low`` and ``contribution_high``); a kind's row is its pools' rows' mean weighted by ``n``.
    Split by pool, the memorisation signature shows (docs/sweeps.md): layer 2's head writes the answer's
    margin on the training pairs and against it on the held-out pairs, which the kinds' means hide."""
    model, config, split = subject.model, subject.config, subject.split
    if by not in GROUPINGS:
        raise ComposeLensError(f"by={by!r}: group the attribution by {' or '.join(GROUPINGS)}")
    tokens, labels, groups = _pooled_groups(split, n, seed)
    parts = direct_terms(model, config, tokens)
    params = tl.parameters(model)
    w_u, b_u = params["unembed.weight"].detach(), params["unembed.bias"].detach()
    contributions = {name: _margins(value.detach(), w_u, labels) for name, value in parts.items()}
    contributions["unembedding bias"] = (b_u[labels] - b_u.mean()).expand(len(labels)).clone()
    total = sum(contributions.values())
    correct = _answer_logits(model, config, tokens).argmax(-1) == labels
    kinds = sequence_kind(tokens, config.task.first_var_token)
    if by == "kind":
        masks = [({"kind": f"{kind}var"}, kinds == kind) for kind in (0, 1, 2)]
    else:
        masks = []
        for name, rows in groups.items():
            mask = torch.zeros(len(labels), dtype=torch.bool)
            mask[rows] = True
            kind = "+".join(f"{int(k)}var" for k in kinds[mask].unique().tolist())  # 1var, or mixed 0var+1var
            masks.append(({"pool": name, "kind": kind}, mask))
    out = []
    for group, mask in masks:
        if not mask.any():
            continue
        margin = total[mask].mean().item()
        for name, value in contributions.items():
            mean = value[mask].mean().item()
            row = {**group, "component": name, "contribution": mean,
                   "share": mean / margin if margin else float("nan"), "margin": margin,
                   "accuracy": correct[mask].float().mean().item(), "n": int(mask.sum())}
            if by == "pool":  # a pool holds a few dozen sequences: its mean with its bootstrap interval
                _, row["contribution_low"], row["contribution_high"] = stats.bootstrap_interval(
                    np.mean, value[mask].double().numpy(), seed=seed)
            out.append(row)
    return pd.DataFrame(out)


def check_sums(model, config: RunConfig, tokens: Int[torch.Tensor, "batch pos"], labels: Int[torch.Tensor, "batch"]
               ) -> float:
    """Largest |sum of the components' margins - the model's own margin| over ``tokens``: ~0."""
    parts = direct_terms(model, config, tokens)
    params = tl.parameters(model)
    w_u, b_u = params["unembed.weight"].detach(), params["unembed.bias"].detach()
    resid = sum(v.detach() for v in parts.values())
    logits = _answer_logits(model, config, tokens)
    own = logits.gather(1, labels[:, None])[:, 0] - logits.mean(1)
    summed = _margins(resid, w_u, labels) + b_u[labels] - b_u.mean()
    return (own - summed).abs().max().item()


def logit_lens(subject: Subject, n: int = 600, seed: int = 0) -> pd.DataFrame:
    """Accuracy of the residual stream at ``=`` read through the unembedding after each stage."""
    model, config, split = subject.model, subject.config, subject.split
    tokens, labels, _ = _pooled_groups(split, n, seed)
    parts = components_at_answer(model, config, tokens)
    kinds = sequence_kind(tokens, config.task.first_var_token)
    stages: dict[str, torch.Tensor] = {}
    resid = torch.zeros_like(parts["token embedding"])
    for name, value in parts.items():  # in forward order, so each stage's sum includes all before it
        resid = resid + value.detach()
        stages[stage_of(name)] = resid
    rows, forward = [], Forward(model, config.model)
    for i, (stage, r) in enumerate(stages.items()):
        predicted = forward.lens(r).argmax(-1)
        for kind in (0, 1, 2):
            mask = kinds == kind
            if mask.any():
                rows.append({"after": stage, "order": i, "kind": f"{kind}var",
                             "accuracy": (predicted[mask] == labels[mask]).float().mean().item()})
    return pd.DataFrame(rows)


def _pooled_groups(split: Split, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, dict[str, slice]]:
    """``n`` sequences drawn evenly from the nine pools, and the rows each pool's sequences hold."""
    pools = make_pools(split, max(1, n // 9), seed)
    joined, groups = concat_batches(pools)
    return joined.tokens, joined.labels, groups
