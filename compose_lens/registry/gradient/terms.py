"""The theory's gradient claim, measured: how much of the gradient that builds binding and
routing is the one associative-memory term the theory keeps (docs/idealised.md derives every term).

**The matrices.** The paper model's binding and routing live in three d_model x d_model
products of one head's projections (:mod:`compose_lens.model.weights`, row-vector
convention, TransformerLens orientation):

* ``W_QK0 = W_Q0 W_K0^T``: where layer 1 looks (each value finds its variable);
* ``W_OV0 = W_V0 W_O0``: what layer 1 moves (the variable into the value's stream);
* ``W_QK1 = W_Q1 W_K1^T``: where layer 2 looks (``=`` finds the operands' values).

The theory (gradient flow on a disentangled transformer with orthogonal embeddings) treats
each product as the parameter and keeps, of its gradient, one outer product of embeddings
per pair of positions the circuit uses. :func:`decompose` writes the whole gradient of the
loss with respect to each product as a sum of named terms that sum to it exactly (up to float
rounding; the test checks it against autograd); the projections' gradients follow by the chain rule
(``dL/dW_Q0 = (dL/dW_QK0) W_K0``), so a share of the product's gradient is what the
projections see through it. With ``x = e + p`` (token plus position embedding) and ``o`` layer 1's output:

* ``qk0``: ``kept`` (``e_i^T e_j`` over the binding pairs: i a value, j = i - 1 its variable),
  ``token_token_other`` (the same product over every other pair), ``positional`` (every product with ``p``);
* ``ov0``: ``kept`` (the variable's token embedding moved to its value), ``token_other``, ``positional``;
* ``qk1`` (only ``=``'s scores carry a gradient): ``kept`` (``=``'s token embedding against the token
  embedding at the keys holding the operands' values), ``token_token_other``, ``positional`` (with ``p``,
  no ``o``) and ``through_layer1`` (every product with ``o``: where routing by the variable that layer 1
  moved would show).

:func:`shares` reports, per matrix and term, ``||term|| / ||full||`` (Frobenius) and the cosine
with the full gradient; the kept term's cosine near 1 is the claim holding, near 0 its failing.
Covers the paper layout with one head per layer, no normalisation and untrained biases
(:func:`problem` says why not, in one line), with either residual and embeddings.

:func:`shares_of_model` (one model) is the registered analysis ``gradient``, beside :func:`idealisation`;
:func:`shares_over_training` (a run's checkpoints) is the report's figure and ``experiments/idealised.py``'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import torch
import torch.nn.functional as F
from compose_lens.core import capabilities
from compose_lens.core import progress as progress_lines
from compose_lens.training import runs
from compose_lens.core.config import ModelConfig, RunConfig, TaskConfig
from compose_lens.core.errors import ComposeLensError
from compose_lens.data.sampler import TrainingSampler
from compose_lens.model import heads, tl, weights
from compose_lens.training.subject import Subject, load_model

if TYPE_CHECKING:  # the shapes are documentation; importing jaxtyping costs start-up time
    from jaxtyping import Bool, Int

MATRICES = ("qk0", "ov0", "qk1")
KEPT = "kept"


def problem(cfg: ModelConfig) -> str | None:
    """Why the decomposition does not cover ``cfg`` (one line), or None."""
    if not capabilities.supports(cfg, "tables"):  # the decomposition is the table forward's algebra
        return ("the gradient decomposition needs the paper layout (2 layers, 1 head each, an MLP in "
                "blocks.1 only, no normalisation, untrained biases)")
    return None


@dataclass(frozen=True)
class Products:
    """The three products as float64 leaves (TransformerLens orientation)."""

    qk0: torch.Tensor
    ov0: torch.Tensor
    qk1: torch.Tensor

    @classmethod
    def of(cls, params: dict[str, torch.Tensor]) -> "Products":
        p = {k: v.detach().double() for k, v in params.items()}
        qk = lambda L: p[f"blocks.{L}.attn.q.weight"].T @ p[f"blocks.{L}.attn.k.weight"]  # noqa: E731
        ov = lambda L: p[f"blocks.{L}.attn.v.weight"].T @ p[f"blocks.{L}.attn.o.weight"].T  # noqa: E731
        return cls(*(m.clone().requires_grad_(True) for m in (qk(0), ov(0), qk(1))))


@dataclass
class Forward:
    """What the decomposition reads of one forward pass (float64)."""

    e: torch.Tensor  # (B, n, d) token embeddings
    p: torch.Tensor  # (B, n, d) position embeddings
    pattern0: torch.Tensor  # (B, n, n)
    scores0: torch.Tensor  # (B, n, n), its .grad after backward
    out0: torch.Tensor  # (B, n, d) layer-1 output o, its .grad after backward
    scores1: torch.Tensor  # (B, n) layer-2 scores from "=", its .grad after backward
    logits: torch.Tensor  # (B, d_vocab_out)


def forward(params: dict[str, torch.Tensor], cfg: ModelConfig, tokens: Int[torch.Tensor, "batch pos"],
            w: Products) -> Forward:
    """The paper model's forward at ``=`` in terms of the three products (float64)."""
    p64 = {k: v.detach().double() for k, v in params.items()}
    B, n = tokens.shape
    c = 1.0 / math.sqrt(cfg.d_head)
    e = p64["embed.weight"][tokens]
    pos = p64["pos_embed.weight"][:n].expand(B, n, -1)
    x = e + pos
    scores0 = c * (x @ w.qk0 @ x.transpose(1, 2))
    scores0.retain_grad()
    pattern0 = heads.pattern(scores0, cfg.read_order)
    out0 = pattern0 @ x @ w.ov0
    out0.retain_grad()
    r = x + out0
    scores1 = c * torch.einsum("bd,de,bje->bj", r[:, -1], w.qk1, r)
    scores1.retain_grad()
    ov1 = p64["blocks.1.attn.v.weight"].T @ p64["blocks.1.attn.o.weight"].T
    mid = r[:, -1] + (heads.pattern(scores1.unsqueeze(1)) @ r).squeeze(1) @ ov1
    logits = weights.mlp_readout(p64, cfg, mid)[2]
    return Forward(e, pos, pattern0, scores0, out0, scores1, logits)


def circuit_pairs(task: TaskConfig, tokens: Int[torch.Tensor, "batch pos"]
                  ) -> tuple[Bool[torch.Tensor, "batch query key"], Bool[torch.Tensor, "batch key"]]:
    """Masks of the pairs the circuit uses: ``binding`` (B, n, n), True at (value position i,
    its variable i - 1); ``routing`` (B, n), True at the keys holding the operands' values."""
    B, n = tokens.shape
    ctx = task.context_len
    binding = torch.zeros(B, n, n, dtype=torch.bool)
    is_value = (tokens[:, :ctx] >= 0) & (tokens[:, :ctx] < task.modulus)
    b, i = is_value.nonzero(as_tuple=True)
    binding[b, i, i - 1] = True
    routing = torch.zeros(B, n, dtype=torch.bool)
    for place in (ctx + 1, ctx + 2):  # LHS and RHS of "+ LHS RHS ="
        operand = tokens[:, place]
        constant = operand < task.modulus
        routing[constant, place] = True
        # a variable operand: the value right after that variable in the context
        assigned = (tokens[:, : ctx - 1] == operand.unsqueeze(1)) & ~constant.unsqueeze(1)
        sb, sk = assigned.nonzero(as_tuple=True)
        routing[sb, sk + 1] = True
    return binding, routing


def decompose(params: dict[str, torch.Tensor], config: RunConfig, tokens: Int[torch.Tensor, "batch pos"],
              labels: Int[torch.Tensor, "batch"]
              ) -> tuple[dict[str, torch.Tensor], dict[str, dict[str, torch.Tensor]]]:
    """``(full, terms)``: the autograd gradient of the mean cross-entropy at ``=`` with respect to
    each product (:data:`MATRICES`), and per product its named terms (``kept`` first), which sum
    to it (module doc)."""
    why = problem(config.model)
    if why:
        raise ComposeLensError(why)
    w = Products.of(params)
    fw = forward(params, config.model, tokens, w)
    F.cross_entropy(fw.logits, labels).backward()
    full = {name: getattr(w, name).grad for name in MATRICES}
    binding, routing = circuit_pairs(config.task, tokens.cpu())
    binding, routing = binding.to(tokens.device), routing.to(tokens.device)
    c = 1.0 / math.sqrt(config.model.d_head)
    e, p, o = fw.e, fw.p, fw.out0.detach()
    g0, g1, A0, delta = fw.scores0.grad, fw.scores1.grad, fw.pattern0.detach(), fw.out0.grad

    def outer0(g: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # sum g_ij a_i^T b_j
        return torch.einsum("bij,bid,bje->de", g, a, b)

    qk0 = {KEPT: c * outer0(g0 * binding, e, e),
           "token_token_other": c * outer0(g0 * ~binding, e, e),
           "positional": c * (outer0(g0, e, p) + outer0(g0, p, e) + outer0(g0, p, p))}
    moved = lambda weight, source: torch.einsum("bij,bjd,bie->de", weight, source, delta)  # noqa: E731
    ov0 = {KEPT: moved(A0 * binding, e), "token_other": moved(A0 * ~binding, e), "positional": moved(A0, p)}

    def outer1(g: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:  # sum g_j q^T k_j
        return torch.einsum("bj,bd,bje->de", g, q[:, -1], k)

    qk1 = {KEPT: c * outer1(g1 * routing, e, e),
           "token_token_other": c * outer1(g1 * ~routing, e, e),
           "positional": c * (outer1(g1, e, p) + outer1(g1, p, e) + outer1(g1, p, p)),
           "through_layer1": c * (outer1(g1, e + p, o) + outer1(g1, o, e + p) + outer1(g1, o, o))}
    return full, {"qk0": qk0, "ov0": ov0, "qk1": qk1}


def shares(params: dict[str, torch.Tensor], config: RunConfig, tokens: Int[torch.Tensor, "batch pos"],
           labels: Int[torch.Tensor, "batch"]) -> pd.DataFrame:
    """One row per (matrix, term): ``share`` = ||term|| / ||full|| and ``cosine`` with the full
    gradient (Frobenius), plus ``full_norm``."""
    full, terms = decompose(params, config, tokens, labels)
    rows = []
    for matrix in MATRICES:
        total = full[matrix]
        norm = float(total.norm())
        for term, value in terms[matrix].items():
            cos = float((value * total).sum() / (value.norm() * norm)) if value.norm() > 0 and norm > 0 else 0.0
            rows.append({"matrix": matrix, "term": term, "share": float(value.norm()) / norm if norm else 0.0,
                         "cosine": cos, "full_norm": norm})
    return pd.DataFrame(rows)


def shares_of_model(subject: Subject, n: int = 512, seed: int = 0) -> pd.DataFrame:
    """:func:`shares` of one model on a batch of ``n`` training sequences
    (:class:`~compose_lens.data.sampler.TrainingSampler`, ``seed``: the same batch for every model of a run)."""
    model, config, split = subject.model, subject.config, subject.split
    batch = TrainingSampler(split, n, seed).batch(0)
    with torch.enable_grad():
        return shares(tl.parameters(model), config, batch.tokens, batch.labels)


def shares_over_training(run_dir: str | Path, n: int = 512, seed: int = 0, progress: bool = False,
                         most: int | None = None) -> pd.DataFrame:
    """:func:`shares_of_model` at the initial weights (step 0) and at the run's checkpoints
    (:func:`compose_lens.training.runs.find_checkpoints`; with ``most``, every k-th so that at most ``most``
    remain besides the last, which :func:`compose_lens.training.runs.select_checkpoints` always keeps), on one
    batch; a ``step`` column."""
    run_dir = Path(run_dir)
    checkpoints, config, split = runs.find_checkpoints(run_dir)
    if most is not None:
        checkpoints = runs.select_checkpoints(checkpoints, stride=math.ceil(len(checkpoints) / max(most, 1)))
    # step 0: the initial weights, booted again from the run's config (its init_seed)
    booted = Subject(tl.boot(config.model), config, split, f"{run_dir} (step 0)")
    tables = [shares_of_model(booted, n, seed).assign(step=0)]
    for checkpoint in progress_lines.bar(checkpoints, wanted=progress, desc=f"gradient terms {run_dir.name}"):
        loaded = load_model(checkpoint.path, bridge=False)
        tables.append(shares_of_model(loaded, n, seed).assign(step=checkpoint.step))
    return pd.concat(tables, ignore_index=True)


def idealisation(model: tl.Model | tl.Weights, cfg: ModelConfig) -> dict:
    """How far a model is from the theory's idealisation, measured on its weights: the mean cosine
    between distinct token embeddings (0 for one-hot orthogonal embeddings, ``embedding_overlap``
    with the knob, and whatever training made of learned ones); the largest change of a frozen
    embedding from the one the config fixes (None: learned embeddings); the largest entry a
    disentangled residual forbids (None: additive residual). Loading refuses a model whose frozen
    or forbidden entries moved, so the last two read 0 on any model the toolkit loaded."""
    params = tl.parameters(model)
    E = params["embed.weight"].detach().float().cpu()
    unit = E / E.norm(dim=1, keepdim=True).clamp_min(1e-12)
    cos = unit @ unit.T
    off = ~torch.eye(len(E), dtype=torch.bool)
    fixed, masks = tl.fixed_embeddings(cfg), tl.absent_masks(cfg)
    moved = max((float((params[k].detach().float().cpu() - v).abs().max()) for k, v in fixed.items()), default=None)
    forbidden = max((float(params[k].detach().float().cpu()[m].abs().max()) for k, m in masks.items() if m.any()),
                    default=None)
    return {"embeddings": cfg.embeddings, "residual": cfg.residual, "embedding_overlap": cfg.embedding_overlap,
            "token_mean_cosine": float(cos[off].mean()), "frozen_embedding_change": moved,
            "forbidden_entry_max": forbidden}
