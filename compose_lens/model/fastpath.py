"""The fast path: the paper model's logits at the ``=`` position, without (B, n, d) tensors.

Loss and accuracy are read at the last position only, and the model is small in a way that lets the
forward pass be rewritten exactly (up to float rounding) in terms of *tables* over the vocabulary and
the positions:

* **Layer 1 (``blocks.0``) sees only embeddings.** Its residual input at position
  i is ``E[t_i] + P[i]``, so every query-key score is a sum of four small tables,
  ``(E Wq)(E Wk)^T`` (V x V), ``(E Wq)(P Wk)^T``, ``(P Wq)(E Wk)^T`` and
  ``(P Wq)(P Wk)^T``, gathered at the tokens: the (B, n, n) attention pattern
  A0 costs gathers, not matrix products. Its output at i is
  ``sum_j A0[i, j] (E OV0 [t_j] + P OV0 [j])``.
* **Layer 2 (``blocks.1``) is needed at the last position only.** Its query is
  one vector per sequence; its scores against every key are that query dotted
  with the same tables pushed through ``W_K``, combined by one (B, n, n) x (B, n)
  product with A0. Its output is a token histogram of the attention weights
  (``scatter_add`` over the vocabulary) times a (V, d) table, plus a positional
  term.
* The MLP and the unembedding act on one (B, d) vector per sequence.

No (batch, positions, d_model) tensor is ever made, so a training step costs a few small matrix products
and gathers; the baseline forward makes a dozen (B n) x d x d products. It is exact for the paper
architecture (two layers, one head each, an MLP only in the last layer, no normalisation, frozen zero
biases; :func:`compose_lens.core.capabilities.why_not` says why it declines any other).
:class:`compose_lens.model.forward.Forward` chooses among the forwards; every head goes through
:mod:`compose_lens.model.heads`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from compose_lens.core.config import ModelConfig
from compose_lens.model import heads, weights

@dataclass
class AnswerActivations:
    """What the forward computes on the way to the answer (TransformerLens hook in brackets)."""

    pattern0: torch.Tensor  # (B, n, n) layer-1 attention [blocks.0.attn.hook_pattern, head 0]
    resid_mid0_last: torch.Tensor  # (B, d) residual after layer 1 at "=" [blocks.0.hook_resid_mid]
    pattern1_last: torch.Tensor  # (B, n) layer-2 attention from "=" [blocks.1.attn.hook_pattern]
    resid_mid1_last: torch.Tensor  # (B, d) the MLP2 input at "=" [blocks.1.hook_resid_mid]
    mlp_pre: torch.Tensor  # (B, d_mlp) [blocks.1.mlp.hook_pre]
    mlp_post: torch.Tensor  # (B, d_mlp) [blocks.1.mlp.hook_post]
    logits: torch.Tensor  # (B, d_vocab_out) at "="


def last_position_logits(params: dict[str, torch.Tensor], cfg: ModelConfig, tokens: torch.Tensor) -> torch.Tensor:
    """Logits (B, d_vocab_out) at the last position, as the TransformerLens forward gives them; ``params``
    are the live parameters (:func:`compose_lens.model.tl.parameters`), so gradients reach the model."""
    return forward_at_answer(params, cfg, tokens).logits


def layer1_rows(params: dict[str, torch.Tensor], n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``X = [E; P[:n]]`` (V + n, d) and what each row writes through layer 1's OV."""
    X = torch.cat([params["embed.weight"], params["pos_embed.weight"][:n]])
    return X, heads.write(params, None, 0, heads.project(params, None, 0, "v", X, bias=False), bias=False)


def resid_after_layer1(params: dict[str, torch.Tensor], tokens: torch.Tensor, pattern0: torch.Tensor) -> torch.Tensor:
    """The residual stream after layer 1 at every position, (B, n, d) (analyses only)."""
    n = tokens.shape[1]
    X, XOV0 = layer1_rows(params, n)
    places = params["embed.weight"].shape[0] + torch.arange(n, device=tokens.device)
    return X[tokens] + X[places] + pattern0 @ (XOV0[tokens] + XOV0[places])


def layer1_scores(S0: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Layer-1 scores (B, n, n), unscaled, from the (V + n) x (V + n) table ``S0``: the sum of four entries,
    in this order: token-token (one gather from the V x V block at the pair index), token-place and
    place-token (row gathers of the V x n and n x V blocks, which compile to tighter loops than a flat
    gather: 1.8 ms against 2.4 ms fwd + bwd) and place-place (one n x n block for every sequence)."""
    n = tokens.shape[1]
    V = S0.shape[0] - n
    token_token = S0[:V, :V].flatten()[tokens.unsqueeze(2) * V + tokens.unsqueeze(1)]
    token_place = F.embedding(tokens, S0[:V, V:])  # (B, n_query, n_key)
    place_token = F.embedding(tokens, S0[V:, :V].T).transpose(1, 2)  # (B, n_key, n_query) -> (B, n_query, n_key)
    return token_token + token_place + place_token + S0[V:, V:]


def forward_at_answer(params: dict[str, torch.Tensor], cfg: ModelConfig, tokens: torch.Tensor) -> AnswerActivations:
    """The fast forward, keeping the activations on the way (see the module docstring)."""
    B, n = tokens.shape
    V = cfg.d_vocab

    def w(name: str) -> torch.Tensor:
        return params[name]

    def qkv(layer: int, kind: str, x: torch.Tensor) -> torch.Tensor:
        return heads.project(params, cfg, layer, kind, x)

    # Table rows: the V token embeddings, then the n position embeddings; and their OV0 images.
    X, XOV0 = layer1_rows(params, n)  # (V + n, d) each
    positions = torch.arange(n, device=tokens.device).expand(B, n)

    def spread(on_positions: torch.Tensor) -> torch.Tensor:
        """(B, n) weights on positions -> (B, V + n) weights on table rows (tokens, positions)."""
        return torch.cat([on_positions.new_zeros(B, V).scatter_add(1, tokens, on_positions), on_positions], dim=1)

    # ---- layer 1 (blocks.0): attention pattern from one (V+n) x (V+n) score table -----
    # S0[a, b]: query row a (a token or a position) against key row b, before scaling.
    S0 = qkv(0, "q", X) @ qkv(0, "k", X).T
    A0 = heads.pattern(heads.scale(layer1_scores(S0, tokens), cfg.d_head, reciprocal=True), cfg.read_order)  # (B, n, n)

    # Y: what each table row writes into the residual stream, directly and through layer 1's OV.
    Y = torch.cat([X, XOV0])  # (2 (V + n), d)

    # residual stream after layer 1 at the last position, as weights on the rows of Y
    # (out of place, so that torch.func.vmap can map this over stacked runs with their own tokens:
    # compose_lens.training.batched; the same 0 / 1 entries as writing the ones in place)
    rows = torch.arange(V + n, device=tokens.device)
    last = ((rows == tokens[:, -1:]) | (rows == V + n - 1)).to(X.dtype)
    resid1_last = torch.cat([last, spread(A0[:, -1])], dim=1) @ Y  # (B, d)

    # ---- layer 2 (blocks.1): query at the last position, keys from the tables --------
    q1 = qkv(1, "q", resid1_last)  # (B, d_head)
    u = q1 @ qkv(1, "k", Y).T  # (B, 2 (V + n)): q1 . key of each row
    tok_pos = torch.cat([tokens, positions + V], dim=1)  # row indices of a position's token and place
    direct = u[:, : V + n].gather(1, tok_pos).view(B, 2, n).sum(1)
    via_layer1 = u[:, V + n:].gather(1, tok_pos).view(B, 2, n).sum(1)
    scores1 = direct + torch.bmm(A0, via_layer1.unsqueeze(2)).squeeze(2)
    A1 = _last_query_pattern(scores1, cfg)  # (B, n): the last position sees every position

    through = torch.bmm(A1.unsqueeze(1), A0).squeeze(1)  # A1 routed through layer 1, on positions
    ov1 = w("blocks.1.attn.v.weight").T @ w("blocks.1.attn.o.weight").T
    resid_mid = resid1_last + torch.cat([spread(A1), spread(through)], dim=1) @ (Y @ ov1)

    # ---- MLP and unembedding at the last position ------------------------------------
    mlp_pre, mlp_post, logits = weights.mlp_readout(params, cfg, resid_mid)
    return AnswerActivations(A0, resid1_last, A1, resid_mid, mlp_pre, mlp_post, logits)


def _last_query_pattern(dots: torch.Tensor, cfg: ModelConfig) -> torch.Tensor:
    """Layer 2's pattern (B, n) from "=" of its unscaled dot products with every key (B, n)."""
    return heads.pattern(heads.scale(dots, cfg.d_head, reciprocal=True).unsqueeze(1)).squeeze(1)


# -- the answer with activations replaced (ablations) -------------------------------------------

Edits = dict[str, Callable[[torch.Tensor], torch.Tensor]]

# The hooks :func:`edited_answer_logits` can replace, and the part of each it hands to the edit: layer 2's
# at "=" only, with a position axis of length 1 so an edit written for the hooked forward works unchanged.
EDITABLE_HOOKS = {
    "blocks.0.attn.hook_z": "(B, n, 1, d_head): layer-1 head output, every position",
    "blocks.1.attn.hook_z": "(B, 1, 1, d_head): layer-2 head output at =",
    "blocks.1.mlp.hook_post": "(B, 1, d_mlp): MLP2 neurons at =",
    "blocks.1.hook_mlp_out": "(B, 1, d_model): MLP2 output at =",
}


def edited_answer_logits(params: dict[str, torch.Tensor], cfg: ModelConfig, tokens: torch.Tensor,
                         edits: Edits) -> torch.Tensor:
    """Logits (B, d_vocab_out) at "=" with ``edits[hook](act)`` written in place of ``act`` at each hook of
    :data:`EDITABLE_HOOKS` it names (the paper architecture only).

    The same model as :func:`forward_at_answer`, arranged so that every hook an ablation replaces exists
    as a tensor, still without a (B, n, d_model) tensor:

    * layer 1's output ``z0`` (B, n, d_head) is its pattern times value rows of a (V + n) x d_head table;
      the residual stream after layer 1 is ``e_j + z0_j W_O0``, ``e_j`` a token row plus a place row of ``X``;
    * layer 2's query at "=" is pulled back through ``W_K``: ``q . k_j`` splits into ``(q W_K) . e_j`` (a
      table gathered at the tokens) plus ``(q W_K W_O0) . z0_j``; its value is ``(sum_j A_j resid_j) W_V``.

    Exact up to float rounding against the TransformerLens forward with the same replacements made by
    hooks (registry/ablation/test_ablation.py checks every ablation kind).
    """
    unknown = set(edits) - set(EDITABLE_HOOKS)
    if unknown:
        raise ValueError(f"cannot edit {sorted(unknown)}: editable hooks are {list(EDITABLE_HOOKS)}")

    def edit(name: str, act: torch.Tensor) -> torch.Tensor:
        return edits[name](act) if name in edits else act

    def w(name: str) -> torch.Tensor:
        return params[name]

    B, n = tokens.shape
    V = cfg.d_vocab
    X = torch.cat([w("embed.weight"), w("pos_embed.weight")[:n]])  # (V + n, d): token rows, then places
    tok_pos = torch.cat([tokens, V + torch.arange(n, device=tokens.device).expand(B, n)], dim=1)

    # ---- layer 1 (blocks.0): the pattern from the score table, then its output z0 ----
    S0 = heads.project(params, cfg, 0, "q", X) @ heads.project(params, cfg, 0, "k", X).T
    A0 = heads.pattern(heads.scale(layer1_scores(S0, tokens), cfg.d_head, reciprocal=True), cfg.read_order)
    XV0 = heads.project(params, cfg, 0, "v", X)  # (V + n, d_head): value rows
    z0 = edit("blocks.0.attn.hook_z", (A0 @ XV0[tokens] + A0 @ XV0[V:]).unsqueeze(2)).squeeze(2)
    W_O0 = w("blocks.0.attn.o.weight")  # (d, d_head)
    resid1_last = X[tokens[:, -1]] + X[V + n - 1] + z0[:, -1] @ W_O0.T  # (B, d)

    # ---- layer 2 (blocks.1) at "=": the query pulled back through W_K and W_O0 --------
    qk = heads.project(params, cfg, 1, "q", resid1_last) @ w("blocks.1.attn.k.weight")  # (B, d)
    on_rows = (qk @ X.T).gather(1, tok_pos).view(B, 2, n).sum(1)  # (B, n): qk . e_j
    A1 = _last_query_pattern(on_rows + torch.bmm(z0, (qk @ W_O0).unsqueeze(2)).squeeze(2), cfg)
    rows = torch.zeros(B, V + n, dtype=X.dtype, device=X.device).scatter_add_(1, tok_pos, A1.repeat(1, 2))
    mixed = rows @ X + torch.bmm(A1.unsqueeze(1), z0).squeeze(1) @ W_O0.T  # sum_j A1_j resid_j
    z1 = edit("blocks.1.attn.hook_z", heads.project(params, cfg, 1, "v", mixed).view(B, 1, 1, -1)).view(B, -1)
    resid_mid = resid1_last + heads.write(params, cfg, 1, z1)

    # ---- MLP2 and the unembedding at "=" ----------------------------------------------
    _, post = weights.mlp_neurons(params, cfg, resid_mid)
    post = edit("blocks.1.mlp.hook_post", post.unsqueeze(1)).squeeze(1)
    out = edit("blocks.1.hook_mlp_out", (post @ w("blocks.1.mlp.out.weight").T).unsqueeze(1)).squeeze(1)
    return weights.unembed(params, cfg, resid_mid + out)
