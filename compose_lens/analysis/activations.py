"""The activations the probes read, computed once per batch of sequences.

Every activation-based analysis of this package looks at the same few places of
the model (paper layer 1 = ``blocks.0``, layer 2 = ``blocks.1``):

==========================  ======================================  ==================
field                       TransformerLens hook                    shape
==========================  ======================================  ==================
``pattern0``                ``blocks.0.attn.hook_pattern`` (head 0)  (B, n, n)
``resid_mid0``              ``blocks.0.hook_resid_mid``              (B, n, d_model)
``pattern1_last``           ``blocks.1.attn.hook_pattern``, at ``=``  (B, n)
``resid_mid1_last``         ``blocks.1.hook_resid_mid``, at ``=``     (B, d_model)
``mlp_pre`` / ``mlp_post``  ``blocks.1.mlp.hook_pre`` / ``hook_post``  (B, d_mlp)
``logits``                  the output at ``=``                     (B, d_vocab_out)
==========================  ======================================  ==================

:func:`collect` reads them with the model's own ``run_with_cache``. That forward
pass is slow for the thousands of sequences a Fourier grid needs, so for the
paper's architecture (the one :func:`compose_lens.fastpath.supports` accepts:
two layers, one head each, an MLP in the last layer only, no normalisation, zero
biases) :func:`table_forward` computes the same numbers from the weights with
*tables*: layer 1 sees only ``E[t] + P[i]``, so its queries, keys and values are
rows of small (vocabulary) and (position) tables gathered at the tokens, and so
are layer 2's keys and values once layer 1's pattern is known. Only the last
position's query, MLP and unembedding are computed per sequence. The test suite
checks that both give the same activations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from compose_lens import fastpath, lens
from compose_lens.config import ModelConfig

CACHED_HOOKS = (
    "blocks.0.attn.hook_pattern",
    "blocks.0.hook_resid_mid",
    "blocks.1.attn.hook_pattern",
    "blocks.1.hook_resid_mid",
    "blocks.1.mlp.hook_pre",
    "blocks.1.mlp.hook_post",
)

_ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
}


@dataclass
class Activations:
    """The activations of :data:`CACHED_HOOKS` for a batch of token sequences (see the module doc)."""

    tokens: torch.Tensor  # (B, n) int
    pattern0: torch.Tensor  # (B, n, n): layer-1 attention, query x key
    resid_mid0: torch.Tensor | None  # (B, n, d_model): after layer-1 attention (None if skipped)
    pattern1_last: torch.Tensor  # (B, n): layer-2 attention from the last position (=)
    resid_mid1_last: torch.Tensor  # (B, d_model): the MLP2 input at =
    mlp_pre: torch.Tensor  # (B, d_mlp)
    mlp_post: torch.Tensor  # (B, d_mlp)
    logits: torch.Tensor  # (B, d_vocab_out)

    def __len__(self) -> int:
        return len(self.tokens)


def activation_fn(cfg: ModelConfig):
    return _ACTIVATIONS[cfg.act_fn]


@torch.no_grad()
def table_forward(params: dict[str, torch.Tensor], cfg: ModelConfig, tokens: torch.Tensor,
                  resid: bool = True) -> Activations:
    """The activations of the paper architecture from weight tables (exact up to rounding).

    Table rows are the V token embeddings then the n position embeddings, ``X = [E; P]``
    (R = V + n rows). Layer 1's input at position i is ``X[t_i] + X[V + i]``, so

    * its score i -> j is a sum of four entries of the (R, R) table ``(X Wq)(X Wk)^T``;
    * its output at j is ``sum_i A0[j, i] (XOV0[t_i] + XOV0[V + i])``;
    * layer 2's score from ``=`` to j is the query dotted with those same rows, pushed
      through ``W_K``: one (B, 2R) table ``u`` of scalars gathered at the tokens;
    * layer 2's output is a weighting of the rows ``[X; XOV0]`` through ``OV``.

    ``resid=False`` skips ``resid_mid0`` at every position (the Fourier grids need only ``=``).
    """
    B, n = tokens.shape
    V = params["embed.weight"].shape[0]
    R = V + n
    scale = 1.0 / math.sqrt(cfg.d_head)

    def w(name: str) -> torch.Tensor:
        return params[name].float()

    X = torch.cat([w("embed.weight"), w("pos_embed.weight")[:n]])  # (R, d)
    pos_rows = V + torch.arange(n, device=tokens.device)  # (n,)

    def spread(weights: torch.Tensor) -> torch.Tensor:
        """(B, n) weights on positions -> (B, R) weights on table rows (their tokens and places)."""
        on_tokens = weights.new_zeros(B, V).scatter_add(1, tokens, weights)
        return torch.cat([on_tokens, weights], dim=1)

    # ---- layer 1 (blocks.0) -------------------------------------------------------------
    S0 = (X @ w("blocks.0.attn.q.weight").T) @ (X @ w("blocks.0.attn.k.weight").T).T  # (R, R)
    ti, tj = tokens.unsqueeze(2), tokens.unsqueeze(1)
    pi, pj = pos_rows.view(1, n, 1), pos_rows.view(1, 1, n)
    scores0 = S0[ti, tj] + S0[ti, pj] + S0[pi, tj] + S0[pi, pj]  # (B, n, n)
    causal = torch.ones(n, n, dtype=torch.bool, device=tokens.device).triu(1)
    pattern0 = (scores0 * scale).masked_fill(causal, float("-inf")).softmax(-1)

    XOV0 = X @ w("blocks.0.attn.v.weight").T @ w("blocks.0.attn.o.weight").T  # (R, d)
    Y = torch.cat([X, XOV0])  # (2R, d): what a row writes directly and through layer 1
    at_last = torch.zeros(B, R, device=X.device)
    at_last[:, V + n - 1] = 1.0
    at_last.scatter_(1, tokens[:, -1:], 1.0)
    last = torch.cat([at_last, spread(pattern0[:, -1])], dim=1) @ Y  # resid_mid0 at "=": (B, d)
    resid_mid0 = None
    if resid:
        resid_mid0 = X[tokens] + X[pos_rows] + pattern0 @ (XOV0[tokens] + XOV0[pos_rows])

    # ---- layer 2 (blocks.1), at the last position ----------------------------------------
    q1 = last @ w("blocks.1.attn.q.weight").T  # (B, dh)
    u = q1 @ (Y @ w("blocks.1.attn.k.weight").T).T  # (B, 2R): the query against each row's key
    direct = u[:, :R].gather(1, tokens) + u[:, pos_rows]
    via_layer1 = u[:, R:].gather(1, tokens) + u[:, R + pos_rows]
    scores1 = direct + (pattern0 @ via_layer1.unsqueeze(2)).squeeze(2)
    pattern1_last = (scores1 * scale).softmax(-1)  # (B, n)
    ov1 = w("blocks.1.attn.v.weight").T @ w("blocks.1.attn.o.weight").T
    through = (pattern1_last.unsqueeze(1) @ pattern0).squeeze(1)  # layer-2 weights routed via layer 1
    resid_mid1 = last + torch.cat([spread(pattern1_last), spread(through)], dim=1) @ (Y @ ov1)

    mlp_pre = resid_mid1 @ w("blocks.1.mlp.in.weight").T
    mlp_post = activation_fn(cfg)(mlp_pre)
    logits = (resid_mid1 + mlp_post @ w("blocks.1.mlp.out.weight").T) @ w("unembed.weight").T
    return Activations(tokens, pattern0, resid_mid0, pattern1_last, resid_mid1, mlp_pre, mlp_post, logits)


@torch.no_grad()
def cached_forward(model: lens.Model, tokens: torch.Tensor) -> Activations:
    """The same activations read from the model's own ``run_with_cache`` (any architecture)."""
    logits, cache = model.run_with_cache(tokens, names_filter=lambda name: name in CACHED_HOOKS)
    return Activations(
        tokens=tokens,
        pattern0=cache["blocks.0.attn.hook_pattern"][:, 0].float(),
        resid_mid0=cache["blocks.0.hook_resid_mid"].float(),
        pattern1_last=cache["blocks.1.attn.hook_pattern"][:, 0, -1].float(),
        resid_mid1_last=cache["blocks.1.hook_resid_mid"][:, -1].float(),
        mlp_pre=cache["blocks.1.mlp.hook_pre"][:, -1].float(),
        mlp_post=cache["blocks.1.mlp.hook_post"][:, -1].float(),
        logits=logits[:, -1].float(),
    )


def collect(model: lens.Model, cfg: ModelConfig, tokens: torch.Tensor, *, chunk: int = 4096,
            fast: bool | None = None, resid: bool = True) -> Activations:
    """Activations of ``tokens`` (N, n) on CPU in float32; the table forward where it is exact.

    ``resid=False`` lets the table forward skip ``resid_mid0`` (set to None).
    """
    use_tables = fastpath.supports(cfg) if fast is None else fast
    params = lens.parameters(model)
    device = params["embed.weight"].device
    parts = []
    for start in range(0, len(tokens), chunk):
        part = tokens[start: start + chunk].to(device)
        acts = table_forward(params, cfg, part, resid) if use_tables else cached_forward(model, part)
        parts.append(acts)
    if not resid:
        for acts in parts:
            acts.resid_mid0 = None

    def join(name: str):
        if getattr(parts[0], name) is None:
            return None
        tensors = [getattr(a, name).detach().cpu() for a in parts]
        return torch.cat([t if name == "tokens" else t.float() for t in tensors])

    return Activations(**{name: join(name) for name in Activations.__dataclass_fields__})
