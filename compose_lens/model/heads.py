"""One attention head, once: its queries, keys and values, its scores, the causal mask, its pattern
and its output. Every forward of compose-lens that is not TransformerLens's own goes through here.

A head of ``blocks.L`` reads residual vectors x (..., d_model) and, in the ``nn.Linear`` layout
the parameters are stored in (:mod:`compose_lens.model.weights` explains it),

    q = x W_Q (+ b_Q),  k = x W_K (+ b_K),  v = x W_V (+ b_V)         (..., d_head)   :func:`project`
    scores[i, j] = q_i . k_j / sqrt(d_head)                           (..., m, n)     :func:`scores`
    pattern = softmax_j(scores, with key j > query i set to -inf)     (..., m, n)     :func:`pattern`
    z = pattern v;  out = z W_O (+ b_O)                               (..., m, d_head), (..., m, d_model)

The **query positions are the last m of the n key positions**: m = n is the whole sequence, m = 1 the
answer position ``=`` alone (which sees every key, so it needs no mask). The faster forwards differ only
in where their vectors come from, never in these steps: the table path (:mod:`compose_lens.model.fastpath`)
gathers its scores from tables, :mod:`compose_lens.model.lastpos` projects the last layer's query at
``=`` only, the patching engine (:mod:`compose_lens.model.patch_engine`) swaps one row or column of the
corrupted scores per patched site, and the circuit graph
(:class:`compose_lens.registry.circuit.discovery.GraphModel`) projects each head from its own masked
input (:func:`project` with ``head=``).

**Scaling.** TransformerLens divides the dot products by ``sqrt(d_head)``, and so does :func:`scores`.
The table path was trained multiplying by ``1 / sqrt(d_head)`` (``reciprocal=True``); the two round
differently in the last bit, so each keeps its own and every trained paper run stays reproducible.

>>> import torch
>>> q, k = torch.randn(2, 3, 4), torch.randn(2, 3, 4)
>>> A = pattern(scores(q, k))
>>> bool(A[0, 0, 1:].eq(0).all()), torch.allclose(A.sum(-1), torch.ones(2, 3))
(True, True)
>>> causal_mask(1, 5).any().item()  # the last position sees every key
False
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Bool, Float

from compose_lens.core.config import ModelConfig


def causal_mask(n_query: int, n_key: int, device: torch.device | str | None = None,
                read_order: tuple[int, ...] | None = None) -> Bool[torch.Tensor, "query key"]:
    """True where a query may *not* look: query i sits at position ``n_key - n_query + i`` and
    sees the keys up to it, or, with a ``read_order`` (:attr:`ModelConfig.read_order`), the keys
    read before it.

    >>> causal_mask(3, 3, read_order=(1, 0, 2)).int().tolist()  # position 0 is read second
    [[0, 0, 1], [1, 0, 1], [0, 0, 0]]
    """
    if read_order is None:
        return torch.ones(n_query, n_key, dtype=torch.bool, device=device).triu(n_key - n_query + 1)
    order = torch.tensor(read_order, device=device)
    return order[None, :] > order[n_key - n_query:, None]


def scale(dots: Float[torch.Tensor, "*batch"], d_head: int, reciprocal: bool = False) -> Float[torch.Tensor, "*batch"]:
    """Dot products ``q . k`` to scores: ``/ sqrt(d_head)`` (TransformerLens's way), or with
    ``reciprocal`` ``* (1 / sqrt(d_head))`` (the table path's; see the module doc)."""
    return dots * (1.0 / math.sqrt(d_head)) if reciprocal else dots / math.sqrt(d_head)


def scores(q: Float[torch.Tensor, "*batch query d_head"],
           k: Float[torch.Tensor, "*batch key d_head"]) -> Float[torch.Tensor, "*batch query key"]:
    """``q_i . k_j / sqrt(d_head)`` for every query and key."""
    return scale(q @ k.transpose(-1, -2), q.shape[-1])


def pattern(scores: Float[torch.Tensor, "*batch query key"], read_order: tuple[int, ...] | None = None
            ) -> Float[torch.Tensor, "*batch query key"]:
    """The attention pattern of scaled scores: the causal mask (:func:`causal_mask`; none for a single
    query), then the softmax over the keys."""
    m, n = scores.shape[-2:]
    if m > 1:
        scores = scores.masked_fill(causal_mask(m, n, scores.device, read_order), float("-inf"))
    return scores.softmax(dim=-1)


def attend(q: Float[torch.Tensor, "*batch query d_head"], k: Float[torch.Tensor, "*batch key d_head"],
           v: Float[torch.Tensor, "*batch key d_head"], read_order: tuple[int, ...] | None = None
           ) -> tuple[Float[torch.Tensor, "*batch query d_head"], Float[torch.Tensor, "*batch query key"]]:
    """``(z, pattern)`` of a head (or of heads side by side on a batch axis)."""
    A = pattern(scores(q, k), read_order)
    return A @ v, A


def _rows(cfg: ModelConfig | None, head: int | None) -> slice:
    return slice(None) if head is None else slice(head * cfg.d_head, (head + 1) * cfg.d_head)


def project(params: dict[str, torch.Tensor], cfg: ModelConfig | None, layer: int, kind: str,
            x: Float[torch.Tensor, "*batch d_model"], head: int | None = None,
            bias: bool | None = None) -> Float[torch.Tensor, "*batch heads_d_head"]:
    """``kind`` (``q``, ``k`` or ``v``) of ``blocks.{layer}`` on residual vectors: every head side by side
    (..., n_heads d_head), or head ``head``'s (..., d_head) from its rows alone. ``bias``: add the bias
    (None: where it is trained; leaving out an untrained one, an exact zero, keeps the dtype under autocast)."""
    name, rows = f"blocks.{layer}.attn.{kind}", _rows(cfg, head)
    out = x @ params[f"{name}.weight"][rows].T
    return out + params[f"{name}.bias"][rows] if (cfg.trained_biases if bias is None else bias) else out


def split_heads(x: Float[torch.Tensor, "*batch heads_d_head"], n_heads: int
                ) -> Float[torch.Tensor, "*batch heads d_head"]:
    """(..., n_heads d_head) -> (..., n_heads, d_head)."""
    return x.unflatten(-1, (n_heads, -1))


def write(params: dict[str, torch.Tensor], cfg: ModelConfig | None, layer: int,
          z: Float[torch.Tensor, "*batch heads_d_head"], head: int | None = None,
          bias: bool | None = None) -> Float[torch.Tensor, "*batch d_model"]:
    """What the heads (or head ``head``, from its columns of W_O) write into the residual stream:
    ``z W_O (+ b_O)``; ``bias`` as in :func:`project`."""
    name = f"blocks.{layer}.attn.o"
    out = z @ params[f"{name}.weight"][:, _rows(cfg, head)].T
    return out + params[f"{name}.bias"] if (cfg.trained_biases if bias is None else bias) else out
