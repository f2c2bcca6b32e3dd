"""A plain-torch forward for any depth and head count, the last layer at the last position only.

The answer is read at the last position, so every layer but the last runs over all n positions as
TransformerLens runs it (a few (B n) x d products per layer, no hooks), and the last layer needs its keys
and values at every position but its query, attention output and MLP, and the unembedding, at the last
only: (B, d) vectors instead of (B, n, d).

It covers the architectures :mod:`compose_lens.model.fastpath` does not (3-4 layers, several heads, an
MLP in every layer, trained biases), but not normalisation (:func:`compose_lens.core.capabilities.supports`
with "lastpos"). Its heads are :mod:`compose_lens.model.heads`'s. The numbers match the TransformerLens
forward up to float rounding (tests/unit/test_model.py checks logits and gradients).
"""

from __future__ import annotations

from typing import Callable

import torch

from compose_lens.core.config import ModelConfig
from compose_lens.model import heads, weights


def attention_with_pattern(params: dict[str, torch.Tensor], cfg: ModelConfig, layer: int, resid: torch.Tensor,
                           last_only: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention output of ``blocks.{layer}`` on the residual stream (B, n, d), (B, m, d), and its pattern
    (B, H, m, n): m = 1 (the last position) if ``last_only`` else n."""
    H = cfg.n_heads
    queries = resid[:, -1:] if last_only else resid
    q, k, v = (heads.split_heads(heads.project(params, cfg, layer, kind, x), H).transpose(1, 2)
               for kind, x in (("q", queries), ("k", resid), ("v", resid)))  # (B, H, m or n, d_head)
    scores = heads.scores(q, k)  # (B, H, m, n)
    if not last_only:  # under CPU bf16 autocast these patterns have always been float32 (a float32 mask
        scores = scores.float()  # promoted them); kept so, which makes no difference in float32
    pattern = heads.pattern(scores, cfg.read_order)  # the last query sees every key
    z = pattern @ v  # (B, H, m, d_head)
    z = z.transpose(1, 2).reshape(resid.shape[0], queries.shape[1], -1)
    return heads.write(params, cfg, layer, z), pattern


def last_position_logits(params: dict[str, torch.Tensor], cfg: ModelConfig, tokens: torch.Tensor,
                         keep: Callable[[str, torch.Tensor], torch.Tensor] | None = None,
                         every_query: bool = False) -> torch.Tensor:
    """Logits (B, d_vocab_out) at the last position. ``keep(hook, activation)``, where given, sees each
    activation as it is made and returns what goes on (read, or edited:
    :meth:`compose_lens.model.forward.Forward.read`). The last layer's attention runs at the last query
    only (its activations then have one position, the last) unless ``every_query``; its MLP always
    runs at the last position only."""
    keep = keep or (lambda name, value: value)
    n, last = tokens.shape[1], cfg.n_layers - 1
    resid = keep("hook_embed", params["embed.weight"][tokens]) + keep("hook_pos_embed", params["pos_embed.weight"][:n])
    for layer in range(cfg.n_layers):
        block, last_only = f"blocks.{layer}.", layer == last and not every_query
        resid = keep(block + "hook_resid_pre", resid)
        kept = resid[:, -1:] if last_only else resid  # sliced before attention: the gradients sum in that order
        out, pattern = attention_with_pattern(params, cfg, layer, resid, last_only)
        keep(block + "attn.hook_pattern", pattern)
        resid = keep(block + "hook_resid_mid", kept + keep(block + "hook_attn_out", out))
        if layer in cfg.mlp_blocks:
            every_position = layer != last or last_only  # else: resid (B, n, d), its MLP at the last only
            mlp_in = keep(block + "mlp.hook_in", resid if every_position else resid[:, -1:])
            pre, post, mlp = weights.mlp_out(params, cfg, mlp_in, layer)
            keep(block + "mlp.hook_pre", pre), keep(block + "mlp.hook_post", post)
            mlp = keep(block + "hook_mlp_out", mlp)
            resid = resid + mlp if every_position else torch.cat([resid[:, :-1], resid[:, -1:] + mlp], 1)
        resid = keep(block + "hook_resid_post", resid)
    return weights.unembed(params, cfg, resid[:, -1])
