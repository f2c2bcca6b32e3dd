"""Automatic circuit discovery on the edge graph of a model, scored against a circuit we know.
The study's readings (every method on both models, with and without positions) are in
docs/circuit-discovery.md.

**The graph.** The residual stream is a plain sum, so every component reads the *sum of the
outputs of every component before it*, through its own normalisation where the model has one (a
head's ``ln1``, an MLP's ``ln2``, the logits' ``ln_final``: corrupting an edge into one receiver
moves that receiver's norm only). Split that sum into its terms and the model is a graph (Elhage
et al.; Conmy et al.'s ACDC):

* **senders** write into the residual stream: ``embed`` (token + position embedding, one node),
  each head ``a{L}.h{H}`` (its output through its rows of W_O; the layer's output bias, the same in
  every run, is folded into head 0), each MLP ``m{L}`` that exists (``cfg.mlp_blocks``);
* **receivers** read the stream: each head's query, key and value inputs ``a{L}.h{H}.q|k|v``
  separately, each MLP's input ``m{L}``, and ``logits``;
* an **edge** ``sender -> receiver`` exists when the sender comes earlier (heads of a layer feed
  that layer's MLP; an MLP feeds every later layer).

With ``positions=True`` every edge is split by position (an edge joins a sender and a receiver at
the same position), and edges that cannot reach the answer are dropped: the metric reads the
logits at the last position, so in the last layer only the keys and values are needed at every
position and the rest at the last one.

**Patching an edge.** Run the clean prompt, but let receiver ``r`` read the *corrupted* run's
output of sender ``s`` in place of the clean one (every other term of its input stays clean, and
everything downstream is recomputed). One mask ``m_e`` in [0, 1] per edge does it:
``input_r = sum_s out_s + sum_e m_e (corr_s - out_s)``. The metric is the mean logit difference
``LD = logit[clean answer] - logit[corrupted answer]`` at the last position (or another,
``metric=``: :mod:`compose_lens.analysis.metrics`; the gradient methods need a differentiable one,
so not ``accuracy``), and the score of an edge is the share of the clean-vs-corrupted difference
lost by corrupting it alone,

    score_e = (LD_clean - LD_with_e_corrupted) / (LD_clean - LD_corrupted).

* **exact** (:func:`exact_scores`; path patching of one edge at a time, all edges batched as rows):
  the ground truth.
* **EAP** (:func:`eap_scores`; Syed et al.): the first-order Taylor estimate of every edge at once
  from one backward pass, ``dLD/dm_e`` at m = 0, which is ``(corr_s - clean_s) . dLD/d input_r``.
* **EAP-IG** (``eap-ig``, :func:`eap_ig_scores`): the same gradient averaged along the straight path
  from the clean graph (all m = 0) to the fully corrupted one (all m = 1), a midpoint Riemann sum:
  integrated gradients in edge-mask space (every edge half-corrupted at the midpoint, downstream
  senders included). By completeness the scores sum to the effect of corrupting every edge, which
  EAP's do not.
* **EAP-IG on the inputs** (``eap-ig-inputs``, :func:`eap_ig_inputs_scores`; Hanna et al. 2024's
  definition): only the input embeddings move from clean to corrupted, every later sender is
  recomputed from them, and an edge scores ``(corr_s - clean_s) . mean dLD/d input_r`` along that
  path. Completeness holds for the embedding edges; later edges are read at the same points. On the
  position graph it follows exact patching more closely than the edge-mask path.
* **ACDC** (:func:`acdc`; Conmy et al.): start from the full graph, visit edges from the logits
  backwards, corrupt an edge for good where that moves the metric by less than ``threshold`` (a
  share of the clean-vs-corrupted difference).

**Prompt pairs.** :func:`circuit_pairs` mixes the three one-token corruptions of
:func:`compose_lens.data.pairs.make_prompt_pairs` (value, variable, constant) so every part of the
circuit has something to carry; :func:`resample_pairs` pairs each prompt with another prompt of
its pool whose answer differs (:func:`pool_pairs`, the resample corruption). Your own pairs
(``pairs=`` of :func:`discover`: :mod:`compose_lens.data.pairs`) go through the same methods.

**Faithfulness** of a circuit C (:func:`faithfulness`): corrupt every edge outside C;
*performance recovered* is ``(LD_C - LD_corrupted) / (LD_clean - LD_corrupted)`` and the *distance
from the full model* is the mean KL divergence of the full model's answer distribution from the
circuit's, on the clean prompts. A method's circuit is the fewest edges of largest |score| that
recover 95 %: of its own pairs (:func:`size_at`, with its bootstrap interval over the pairs,
:func:`size_with_interval`; ``circuit_edges_ci95`` in :func:`discover`'s summary), or of every evaluation pool at once (:func:`size_on_pools`, the
stricter one: a circuit found on pairs that never corrupt a binding can leave the binding out).

**The paper's circuit** (:func:`paper_labels`, for two-layer models with an MLP in layer 2 only;
SPEC section 6). Layer 1's previous-token head binds each value to its variable and its ``=``
position attends to the operands (analyses 1, 2): it needs queries, keys (positions, token kinds)
and values (the tokens) from the embeddings, so ``embed -> a0.q, a0.k, a0.v`` are in. Layer 2
routes ``=`` to the operand values (analysis 3): its keys at a value position say which variable
was bound there (``a0 -> a1.k``) and at a constant operand the token itself (``embed -> a1.k``);
its query at ``=`` carries the operands layer 1 gathered (``a0 -> a1.q``); its values are the
numbers (``embed -> a1.v``). MLP2 adds what layer 2 moved (``a1 -> m1``) and writes the answer
(``m1 -> logits``); layer 2's direct path to the logits is kept (``a1 -> logits``). ``a0 -> m1``,
the *constant path*: after layer 1 the ``=`` stream holds the gathered operand tokens, which MLP2
reads; for a constant that is the number it adds, for a variable only its name. Exact path
patching (resample pairs, 300 per pool) finds just that: 0.101 of the effect on 0-var prompts,
0.058 on 1-var, 0.003 on 2-var on the paper model; 0.006, 0.006, -0.001 on the study's final
checkpoint (the path fades over training, EAP-IG 0.12 at step 3,001 to 0.00 at 30,001).
``paper_labels(graph, constant_path=False)`` leaves it out (the first labelling).

Out: the ``=`` token's own embedding as a query or MLP input (the same token at the same position
in every prompt, so no corruption moves it), layer 1's output as a layer-2 value or a logit input,
and the embeddings' direct path to the logits and to MLP2. Every head of a layer gets its layer's
labels. **With positions** an edge is labelled where the circuit uses it (a variable can sit at
context positions 0-10, its value at 1-11; the operands at 13, 14; ``=`` at 15): layer 1's query at
the value positions, its keys and values at the variable positions (the previous token of a value)
and at the operands (what ``=`` gathers); layer 2's keys from layer 1 at the value positions and
from the embeddings at the operands, its values at the value positions and the operands;
everything into layer 2's query, MLP2 and the logits at ``=``. So the position-level circuit has as
many binding edges as there are places a binding can be.

**In other architectures** (:func:`circuit_labels`) the labelled circuit is the same edges by role,
at the components :func:`compose_lens.analysis.locate.locate` finds (:func:`located_labels`); only
the located heads are labelled, not every head of their layer. Where no component plays the
binder, the router or the adder, nothing is labelled and the summary says "none located" (no
ROC-AUC), rather than scoring against the paper's blocks.

**Why the methods are written here** (from the libraries' own source and metadata; scores not
compared numerically). TransformerLens 4.3's ``tools.analysis.attribution_patching.attribution_patch``
scores a ``TransformerBridge``'s edges by plain attribution only (``ig_steps > 1`` raises
``NotImplementedError``; no ACDC, no exact path patching, no per-position edges), at the corrupted
run (denoising) where :func:`eap_scores` linearises at the clean run as the exact scores are
defined, one forward and backward per pair where :class:`GraphModel` runs all pairs at once.
auto-circuit (1.0.1, its last release, August 2024) builds on a ``HookedTransformer``
(``isinstance`` checks in ``utils/graph_utils.py``), not a ``TransformerBridge``, and installs
``kaleido==0.2.1``, ``tracr-pypi``, ``word2word`` and ``blobfile`` with it. The graph here is small
(16 edges on the paper model), and computed from the weights alone it gives all five methods on one graph.
"""

from __future__ import annotations

import time
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from scipy.stats import rankdata

from compose_lens.core import capabilities, stats
from compose_lens.analysis import locate, metrics
from compose_lens.training.evaluate import learned
from compose_lens.core.config import CIRCUIT_METHODS, ModelConfig
from compose_lens.core.errors import ComposeLensError
from compose_lens.data.sampler import make_pool, make_pools
from compose_lens.model.forward import ANSWER, Site
from compose_lens.data.split import Split
from compose_lens.model import heads, weights
from compose_lens.data.pairs import PromptPairs, as_prompt_pairs, make_prompt_pairs
from compose_lens.training.subject import Subject

METHODS = CIRCUIT_METHODS


# -- the graph --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Edge:
    sender: str
    receiver: str
    position: int = -1  # -1: every position

    @property
    def name(self) -> str:
        return f"{self.sender}->{self.receiver}" + ("" if self.position < 0 else f"@{self.position}")

    def sites(self) -> tuple[Site, Site]:
        """The edge's two ends in the one vocabulary (:class:`compose_lens.model.forward.Site`): what the
        sender writes (the stream at the start for ``embed``, a head's ``hook_result``, an MLP's
        ``hook_mlp_out``) and what the receiver reads (a head's ``hook_q_input`` / ``k`` / ``v``, an
        MLP's ``mlp.hook_in``, the logits at ``=``), at the edge's position (every position: None)."""
        position = None if self.position < 0 else self.position
        return _node_site(self.sender, position, reads=False), _node_site(self.receiver, position, reads=True)


def _node_site(node: str, position: int | None, reads: bool) -> Site:
    """A graph node as a :class:`~compose_lens.model.forward.Site`; an MLP ``m{L}`` is its input where it
    ``reads`` (a receiver), its output where it writes (a sender)."""
    if node == "embed":
        return Site("blocks.0.hook_resid_pre", position)
    if node == "logits":
        return Site("logits", ANSWER)
    found = re.fullmatch(r"([am])(\d+)(?:\.h(\d+))?(?:\.([qkv]))?", node)
    layer = int(found[2])
    if found[1] == "m":
        return Site(f"blocks.{layer}.mlp.hook_in" if reads else f"blocks.{layer}.hook_mlp_out", position)
    if found[4] is not None:
        return Site(f"blocks.{layer}.hook_{found[4]}_input", position, int(found[3]))
    return Site(f"blocks.{layer}.attn.hook_result", position, int(found[3]))


@dataclass
class Graph:
    """Senders, receivers and edges of a model (see the module doc), in topological order."""

    cfg: ModelConfig
    positions: bool
    senders: list[str] = field(default_factory=list)
    receivers: list[str] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    depth: dict[str, int] = field(default_factory=dict)

    def into(self, receiver: str) -> list[int]:
        return [i for i, e in enumerate(self.edges) if e.receiver == receiver]

    def senders_before(self, receiver: str) -> list[str]:
        return [s for s in self.senders if self.depth[s] < self.depth[receiver]]

    def __len__(self) -> int:
        return len(self.edges)


def _live_positions(cfg: ModelConfig, receiver: str) -> list[int]:
    """Positions where a receiver can change the logits at the last position."""
    last, n = cfg.n_layers - 1, cfg.n_ctx
    if receiver == "logits":
        return [n - 1]
    layer = int(receiver[1:].split(".")[0])
    if layer == last and not receiver.endswith((".k", ".v")):
        return [n - 1]
    return list(range(n))


def build_graph(cfg: ModelConfig, positions: bool = False) -> Graph:
    """The edge graph of a model (see the module doc)."""
    g = Graph(cfg, positions)
    g.senders.append("embed")
    g.depth["embed"] = 0
    for layer in range(cfg.n_layers):
        for h in range(cfg.n_heads):
            g.senders.append(f"a{layer}.h{h}")
            g.depth[f"a{layer}.h{h}"] = 2 * layer + 1
            for kind in "qkv":
                g.receivers.append(f"a{layer}.h{h}.{kind}")
                g.depth[f"a{layer}.h{h}.{kind}"] = 2 * layer + 1
        if layer in cfg.mlp_blocks:
            g.senders.append(f"m{layer}")
            g.receivers.append(f"m{layer}")
            g.depth[f"m{layer}"] = 2 * layer + 2
    g.receivers.append("logits")
    g.depth["logits"] = 2 * cfg.n_layers + 1
    last_layer_senders = {s for s in g.senders if s != "embed" and int(s[1:].split(".")[0]) == cfg.n_layers - 1}
    for r in g.receivers:
        for s in g.senders_before(r):
            if not positions:
                g.edges.append(Edge(s, r))
            else:  # a last-layer sender only at the last position, the only one the logits read
                g.edges += [Edge(s, r, p) for p in _live_positions(cfg, r)
                            if s not in last_layer_senders or p == cfg.n_ctx - 1]
    g.edges.sort(key=lambda e: (g.depth[e.receiver], g.receivers.index(e.receiver), g.depth[e.sender]))
    return g


# -- the forward pass on the graph ------------------------------------------------------------
class GraphModel:
    """A model's weights run as the edge graph, with per-row edge masks."""

    def __init__(self, params: dict[str, torch.Tensor], cfg: ModelConfig, positions: bool = False):
        self.p = {k: v.detach().float() for k, v in params.items()}
        self.cfg, self.graph = cfg, build_graph(cfg, positions)
        n = cfg.n_ctx
        self.posmask = torch.stack([torch.ones(n) if e.position < 0 else
                                    torch.nn.functional.one_hot(torch.tensor(e.position), n).float()
                                    for e in self.graph.edges])  # (E, n)
        self._before = {r: self.graph.senders_before(r) for r in self.graph.receivers}
        # the edges from each sender into each receiver (one per position with positions=True)
        self._from = {r: {s: torch.tensor([e for e in self.graph.into(r) if self.graph.edges[e].sender == s])
                          for s in self._before[r]} for r in self.graph.receivers}

    @classmethod
    def from_model(cls, model, cfg: ModelConfig, positions: bool = False) -> "GraphModel":
        return cls(weights.detached_parameters(model), cfg, positions)

    def _input(self, r: str, outs: dict, masks, corrupt, active, last: bool = False) -> torch.Tensor:
        """Receiver ``r``'s input: every earlier sender's output, moved towards the corrupted one by
        the masks, through the receiver's normalisation where the model has one (:meth:`_normalised`).
        The edges of one sender (one per position) fold into one (R, n) weight.
        ``last``: the input at the last position only, (R, 1, d)."""
        at = slice(-1, None) if last else slice(None)
        x = sum(outs[s][:, at] for s in self._before[r])
        if masks is not None:
            for s, idx in self._from[r].items():
                idx = idx if active is None else idx[active[idx]]
                if len(idx):
                    weight = (masks[:, idx] @ self.posmask[idx][:, at])[:, :, None]
                    x = x + weight * (corrupt[s][:, at] - outs[s][:, at])
        return self._normalised(r, x)

    def _normalised(self, receiver: str, x: torch.Tensor) -> torch.Tensor:
        """``x`` through the norm the receiver reads through (module doc; ``eps`` TransformerLens's 1e-5)."""
        kind = self.cfg.normalization_type
        if kind is None:
            return x
        name = "ln_final" if receiver == "logits" else \
            f"blocks.{receiver.split('.')[0][1:]}.{'ln2' if receiver.startswith('m') else 'ln1'}"
        weight, bias = self.p.get(f"{name}.weight"), self.p.get(f"{name}.bias")
        if kind.startswith("LN"):
            return torch.nn.functional.layer_norm(x, x.shape[-1:], weight, bias, 1e-5)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)
        return x if weight is None else x * weight

    def _head(self, layer: int, h: int, q_in, k_in, v_in) -> torch.Tensor:
        """One head's output at the query positions: ``q_in`` (R, m, d) holds the last m of the
        n positions of ``k_in`` / ``v_in``."""
        q, k, v = (heads.project(self.p, self.cfg, layer, kind, x, head=h, bias=True)
                   for kind, x in (("q", q_in), ("k", k_in), ("v", v_in)))
        z = heads.attend(q, k, v, self.cfg.read_order)[0]  # query i sits at position n - m + i
        return heads.write(self.p, self.cfg, layer, z, head=h, bias=h == 0)  # the layer's b_O: head 0's

    def forward(self, tokens: torch.Tensor, masks: torch.Tensor | None = None, corrupt: dict | None = None,
                active: torch.Tensor | None = None, known: dict | None = None) -> tuple[torch.Tensor, dict]:
        """Logits at the last position (R, vocab_out) and every sender's output (R, n, d); the
        last layer's senders only at the last position, (R, 1, d), since only the logits there
        read them (as :func:`build_graph`'s edges say).

        ``masks`` (R, E): how far each edge reads the corrupted sender output ``corrupt[s]``
        (R, n, d). Speed-ups: ``active`` (E,) bool, the only edges whose masks can be non-zero;
        ``known``, layers' outputs that the masks cannot change (the clean run's, upstream of
        every active edge), used instead of recomputed."""
        p, cfg, known = self.p, self.cfg, known or {}
        outs = {"embed": p["embed.weight"][tokens] + p["pos_embed.weight"][: tokens.shape[1]]}
        for layer in range(cfg.n_layers):
            last = layer == cfg.n_layers - 1  # queries and MLP at the last position only
            for h in range(cfg.n_heads):
                name = f"a{layer}.h{h}"
                if name in known:
                    outs[name] = known[name]
                    continue
                qkv = [self._input(f"{name}.{k}", outs, masks, corrupt, active, last and k == "q") for k in "qkv"]
                outs[name] = self._head(layer, h, *qkv)
            name = f"m{layer}"
            if layer in cfg.mlp_blocks:
                outs[name] = known[name] if name in known else \
                    weights.mlp_out(p, cfg, self._input(name, outs, masks, corrupt, active, last), layer)[2]
        final = self._input("logits", outs, masks, corrupt, active, True)[:, -1]
        return weights.unembed(p, cfg, final), outs


# -- prompt pairs and the metric ----------------------------------------------------------------
def concat_pairs(parts: list[PromptPairs], name: str) -> PromptPairs:
    cat = lambda attr: torch.cat([getattr(x, attr) for x in parts])  # noqa: E731
    return PromptPairs(cat("clean"), cat("corrupted"), cat("clean_labels"), cat("corrupted_labels"), name)


def circuit_pairs(split: Split, n_pairs: int = 300, seed: int = 0) -> PromptPairs:
    """``n_pairs`` prompt pairs, a third of each corruption (value, variable, constant)."""
    if n_pairs < 6:
        raise ComposeLensError(f"n_pairs={n_pairs}: ask for at least 6 prompt pairs (two per corruption)")
    sizes = [n_pairs // 3 + (i < n_pairs % 3) for i in range(3)]
    parts = [make_prompt_pairs(split, n, c, seed) for n, c in zip(sizes, ("value", "variable", "constant"))]
    return concat_pairs(parts, "mixed")


def pool_pairs(tokens: torch.Tensor, labels: torch.Tensor, name: str, seed: int = 0) -> PromptPairs:
    """Each prompt of a pool against another prompt of the pool with another answer (resampling)."""
    g = torch.Generator().manual_seed(seed)
    partner = torch.randperm(len(labels), generator=g)
    keep = labels != labels[partner]
    return PromptPairs(tokens[keep], tokens[partner][keep], labels[keep], labels[partner][keep], name)


def _ld(logits: torch.Tensor, pairs: PromptPairs, repeat: int = 1,
        metric: metrics.Metric = metrics.logit_diff) -> torch.Tensor:
    """(R,) the metric (the logit difference by default) of R = repeat * N rows of logits."""
    return metrics.values(metric, logits, pairs.answers.repeat(repeat, 1))


@dataclass
class Baseline:
    """The two unpatched runs of a set of pairs, and the metric read on them (``ld_*``: its
    means, the logit difference by default)."""

    clean_logits: torch.Tensor
    clean_outs: dict
    corrupt_outs: dict
    ld_clean: float
    ld_corrupted: float
    metric: metrics.Metric = metrics.logit_diff
    metric_name: str = metrics.DEFAULT

    @property
    def denominator(self) -> float:
        return self.ld_clean - self.ld_corrupted


def baseline(gm: GraphModel, pairs: PromptPairs, metric: metrics.MetricLike = metrics.DEFAULT) -> Baseline:
    """The clean and corrupted runs and their mean ``metric`` (:mod:`compose_lens.analysis.metrics`)."""
    name, fn = metrics.resolve(metric)
    with torch.no_grad():
        clean_logits, clean_outs = gm.forward(pairs.clean)
        corrupt_logits, corrupt_outs = gm.forward(pairs.corrupted)
    ld_clean, ld_corr = float(_ld(clean_logits, pairs, 1, fn).mean()), float(_ld(corrupt_logits, pairs, 1, fn).mean())
    if abs(ld_clean - ld_corr) < 1e-6:
        what = "logit difference" if name == metrics.DEFAULT else name
        raise ComposeLensError(f"clean and corrupted prompts have the same mean {what}: "
                               "the model does not tell them apart, so nothing can be normalised")
    return Baseline(clean_logits, clean_outs, corrupt_outs, ld_clean, ld_corr, fn, name)


def _masked_logits(gm: GraphModel, pairs: PromptPairs, base: Baseline, masks: torch.Tensor, chunk: int = 4096):
    """Yields (block of masks, logits) for k masks (k, E), each applied to every pair, in blocks of
    about ``chunk`` rows; layers upstream of every edge a block corrupts are the clean run's."""
    N = len(pairs)
    per_chunk = max(1, chunk // N)
    with torch.no_grad():
        for start in range(0, len(masks), per_chunk):
            block = masks[start:start + per_chunk]
            b, active = len(block), block.ne(0).any(0)
            first = min((gm.graph.depth[e.receiver] for e, a in zip(gm.graph.edges, active.tolist()) if a),
                        default=gm.graph.depth["logits"])
            known = {s: v.repeat(b, 1, 1) for s, v in base.clean_outs.items()
                     if s != "embed" and gm.graph.depth[s] < first}
            corrupt = {s: v.repeat(b, 1, 1) for s, v in base.corrupt_outs.items()}
            yield block, gm.forward(pairs.clean.repeat(b, 1), block.repeat_interleave(N, 0), corrupt, active,
                                    known)[0]


def _masked_runs(gm: GraphModel, pairs: PromptPairs, base: Baseline, masks: torch.Tensor) -> torch.Tensor:
    """LD per row for R = k * N rows of masks (row block i: masks[i] on every pair), (k, N)."""
    return torch.cat([_ld(logits, pairs, len(block), base.metric).view(len(block), len(pairs))
                      for block, logits in _masked_logits(gm, pairs, base, masks)])


# -- the four methods --------------------------------------------------------------------------
def exact_scores(gm: GraphModel, pairs: PromptPairs, base: Baseline | None = None) -> torch.Tensor:
    """(E,) normalised effect of corrupting each edge alone, by a patched forward per edge."""
    base = base or baseline(gm, pairs)
    ld = _masked_runs(gm, pairs, base, torch.eye(len(gm.graph)))
    return (base.ld_clean - ld.mean(1)) / base.denominator


def _mask_gradient(gm: GraphModel, pairs: PromptPairs, masks: torch.Tensor, corrupt: dict,
                   metric: metrics.Metric = metrics.logit_diff, per_pair: bool = False) -> torch.Tensor:
    """dLD/dm_e (E,) summed over the pairs, with the edge masks at ``masks`` (E,); ``per_pair``: the
    (N, E) terms of that sum, one row per pair."""
    masks = masks.expand(len(pairs), -1).clone().requires_grad_(True)
    logits, _ = gm.forward(pairs.clean, masks, corrupt)
    value = _ld(logits, pairs, 1, metric).mean()
    if not value.requires_grad:
        raise ComposeLensError("the metric has no gradient (it does not depend on the logits differentiably); "
                               "EAP and EAP-IG need one: use --method exact or acdc, or another metric")
    (grad,) = torch.autograd.grad(value, masks)
    return grad if per_pair else grad.sum(0)


def eap_scores(gm: GraphModel, pairs: PromptPairs, base: Baseline | None = None) -> torch.Tensor:
    """(E,) edge attribution patching: the linear estimate of :func:`exact_scores` at the clean run."""
    base = base or baseline(gm, pairs)
    return -_mask_gradient(gm, pairs, torch.zeros(len(gm.graph)), base.corrupt_outs,
                           base.metric) / base.denominator


def eap_ig_scores(gm: GraphModel, pairs: PromptPairs, base: Baseline | None = None,
                  steps: int = 16) -> torch.Tensor:
    """(E,) EAP-IG: the mask gradient averaged over ``steps`` midpoints from clean to corrupted."""
    base = base or baseline(gm, pairs)
    grads = [_mask_gradient(gm, pairs, torch.full((len(gm.graph),), (i + 0.5) / steps), base.corrupt_outs,
                            base.metric) for i in range(steps)]
    return -torch.stack(grads).mean(0) / base.denominator


def eap_ig_pair_scores(gm: GraphModel, pairs: PromptPairs, base: Baseline | None = None,
                       steps: int = 16) -> torch.Tensor:
    """(N, E) :func:`eap_ig_scores` pair by pair: each pair's own attribution of every edge, whose
    mean over the pairs is the method's score (for bootstrap intervals over the pairs)."""
    base = base or baseline(gm, pairs)
    grads = [_mask_gradient(gm, pairs, torch.full((len(gm.graph),), (i + 0.5) / steps), base.corrupt_outs,
                            base.metric, per_pair=True) for i in range(steps)]
    return -torch.stack(grads).mean(0) * len(pairs) / base.denominator


def eap_ig_inputs_scores(gm: GraphModel, pairs: PromptPairs, base: Baseline | None = None,
                         steps: int = 16) -> torch.Tensor:
    """(E,) EAP-IG with the input embeddings interpolated (Hanna et al.), ``steps`` midpoints.

    At each point the embedding edges sit at ``alpha`` and every later sender is recomputed. A
    mask's gradient is ``(corrupt[s] - out_s) . dLD/d input_r``; handing the forward
    ``corrupt[s] = out_s(alpha) + corr_s - clean_s`` makes that ``(corr_s - clean_s) . dLD/d input_r``
    while the masks of the later edges stay 0, so one gradient scores every edge."""
    base = base or baseline(gm, pairs)
    embed = torch.tensor([e.sender == "embed" for e in gm.graph.edges], dtype=torch.float)
    grads = []
    for i in range(steps):
        masks = (i + 0.5) / steps * embed
        with torch.no_grad():
            outs = gm.forward(pairs.clean, masks.expand(len(pairs), -1), base.corrupt_outs)[1]
        shifted = {s: v if s == "embed" else outs[s] + v - base.clean_outs[s] for s, v in base.corrupt_outs.items()}
        grads.append(_mask_gradient(gm, pairs, masks, shifted, base.metric))
    return -torch.stack(grads).mean(0) / base.denominator


def acdc(gm: GraphModel, pairs: PromptPairs, threshold: float = 0.01,
         base: Baseline | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """ACDC's greedy pruning from the logits backwards (module doc): (kept (E,) bool, score (E,) = the
    normalised metric's change when the edge was tried)."""
    base = base or baseline(gm, pairs)
    E = len(gm.graph)
    masks, score = torch.zeros(E), torch.zeros(E)
    current = base.ld_clean
    for e in reversed(range(E)):  # edges are sorted by receiver depth: logits first when reversed
        trial = masks.clone()
        trial[e] = 1.0
        ld = float(_masked_runs(gm, pairs, base, trial[None])[0].mean())
        score[e] = (current - ld) / base.denominator
        if abs(score[e]) < threshold:
            masks, current = trial, ld
    return masks == 0, score


GRADIENT_METHODS = ("eap", "eap-ig", "eap-ig-inputs")


def check_method_metric(method: str, metric: metrics.MetricLike) -> None:
    """Refuse a gradient method with a metric that has no gradient (accuracy), before any work."""
    if method in GRADIENT_METHODS and isinstance(metric, str) and metric in metrics.WITHOUT_GRADIENT:
        raise ComposeLensError(f"the metric {metric!r} has no gradient, which {method} follows; use the method "
                               f"'exact' or 'acdc' with it, or the metric 'logit_diff' or 'prob'")


def method_scores(gm: GraphModel, pairs: PromptPairs, method: str, *, steps: int = 16,
                  threshold: float = 0.01, metric: metrics.MetricLike = metrics.DEFAULT) -> tuple[torch.Tensor, float]:
    """(E,) scores of one method and its time in seconds (the baseline runs included); ``metric`` as
    in :func:`baseline` (the gradient methods need a differentiable one)."""
    if method not in METHODS:
        raise ComposeLensError(f"method {method!r}: use one of {', '.join(METHODS)}")
    check_method_metric(method, metric)
    start = time.perf_counter()
    base = baseline(gm, pairs, metric)
    scores = {"exact": lambda: exact_scores(gm, pairs, base), "eap": lambda: eap_scores(gm, pairs, base),
              "eap-ig": lambda: eap_ig_scores(gm, pairs, base, steps),
              "eap-ig-inputs": lambda: eap_ig_inputs_scores(gm, pairs, base, steps),
              "acdc": lambda: acdc(gm, pairs, threshold, base)[1]}[method]()
    return scores.detach(), time.perf_counter() - start


# -- faithfulness ------------------------------------------------------------------------------
def _kl(full_logits: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """(R,) KL(full || circuit) of the answer distributions."""
    full = full_logits.log_softmax(-1)
    return (full.exp() * (full - logits.log_softmax(-1))).sum(-1)


def faithfulness(gm: GraphModel, pairs: PromptPairs, circuits: torch.Tensor,
                 base: Baseline | None = None, metric: metrics.MetricLike = metrics.DEFAULT) -> pd.DataFrame:
    """Performance recovered and KL from the full model of each circuit, circuits (k, E) bool.

    Recovered is read in ``metric`` (``base``'s when given); the metric's clean and corrupted means
    are the columns ``ld_clean``, ``ld_corrupted`` (another metric's: ``prob_clean``, ...)."""
    base = base or baseline(gm, pairs, metric)
    N = len(pairs)
    recovered, kl = [], []
    for block, logits in _masked_logits(gm, pairs, base, (~circuits).float()):
        ld = _ld(logits, pairs, len(block), base.metric).view(len(block), N).mean(1)
        recovered.append((ld - base.ld_corrupted) / base.denominator)
        kl.append(_kl(base.clean_logits.repeat(len(block), 1), logits).view(len(block), N).mean(1))
    short = "ld" if base.metric_name == metrics.DEFAULT else base.metric_name
    return pd.DataFrame({"n_edges": circuits.sum(1).tolist(), "recovered": torch.cat(recovered).tolist(),
                         "kl": torch.cat(kl).tolist(), f"{short}_clean": base.ld_clean,
                         f"{short}_corrupted": base.ld_corrupted, "n_pairs": N})


def top_k_circuits(scores: torch.Tensor) -> torch.Tensor:
    """(E + 1, E) bool: row k holds the k edges of largest |score|."""
    rank = torch.empty(len(scores), dtype=torch.long)
    rank[scores.abs().argsort(descending=True)] = torch.arange(len(scores))
    return rank.unsqueeze(0) < torch.arange(len(scores) + 1).unsqueeze(1)


def size_at(gm: GraphModel, pairs: PromptPairs, scores: torch.Tensor, target: float = 0.95,
            base: Baseline | None = None) -> tuple[int, pd.DataFrame]:
    """The fewest top-|score| edges recovering ``target`` of the performance, and the whole curve."""
    curve = faithfulness(gm, pairs, top_k_circuits(scores), base)
    hits = curve.index[curve["recovered"] >= target]
    return (int(curve.loc[hits[0], "n_edges"]) if len(hits) else len(scores)), curve


def bootstrap_sizes(ld: torch.Tensor, clean: torch.Tensor, corrupted: torch.Tensor, target: float = 0.95,
                    seed: int = 0, resamples: int = stats.BOOTSTRAP_RESAMPLES) -> torch.Tensor:
    """(resamples,) the circuit size on each bootstrap resample of the prompt pairs: the fewest edges
    whose share recovered, from the resampled means, reaches ``target`` (E where none does). ``ld``
    (E + 1, N): the metric per pair with circuit k (its k top edges) kept; ``clean``, ``corrupted``
    (N,): on the unpatched runs. The edges' order is held (re-scoring would run the method again)."""
    n = ld.shape[1]
    draws = torch.from_numpy(stats.bootstrap_draws(n, seed, resamples))  # (B, N) pair indices
    counts = torch.zeros(resamples, n, dtype=torch.float64).scatter_add_(1, draws, torch.ones(resamples, n,
                                                                                             dtype=torch.float64))
    share = counts.T / n  # (N, B): each resample as a weight per pair
    means, top, bottom = ld.double() @ share, clean.double() @ share, corrupted.double() @ share
    recovered = (means - bottom) / (top - bottom)  # (E + 1, B)
    hit = recovered >= target
    first = hit.double().argmax(0)
    return torch.where(hit.any(0), first, torch.full_like(first, ld.shape[0] - 1)).long()


def size_with_interval(gm: GraphModel, pairs: PromptPairs, scores: torch.Tensor, target: float = 0.95,
                       base: Baseline | None = None, seed: int = 0,
                       resamples: int = stats.BOOTSTRAP_RESAMPLES) -> tuple[int, list[int]]:
    """:func:`size_at`'s circuit size (from the same patched runs) and its 95 % bootstrap interval over
    the prompt pairs (:func:`bootstrap_sizes`), its ends rounded outwards to whole edges."""
    base = base or baseline(gm, pairs)
    ld = _masked_runs(gm, pairs, base, (~top_k_circuits(scores)).float())  # (E + 1, N)
    recovered = ((ld.mean(1) - base.ld_corrupted) / base.denominator).tolist()
    size = next((k for k, share in enumerate(recovered) if share >= target), len(scores))
    with torch.no_grad():
        corrupted = _ld(gm.forward(pairs.corrupted)[0], pairs, 1, base.metric)
    clean = _ld(base.clean_logits, pairs, 1, base.metric)
    sizes = bootstrap_sizes(ld, clean, corrupted, target, seed, resamples)
    low, high = stats.percentile_interval(sizes.double().numpy())
    return size, [int(np.floor(low)), int(np.ceil(high))]


def evaluation_pairs(split: Split, size: int = 500, seed: int = 0) -> dict[str, PromptPairs]:
    """Resample pairs (:func:`pool_pairs`) on every evaluation pool with at least two of them."""
    found = {name: pool_pairs(batch.tokens, batch.labels, name, seed)
             for name, batch in make_pools(split, size, seed).items()}
    return {name: pairs for name, pairs in found.items() if len(pairs) >= 2}


def pool_faithfulness(gm: GraphModel, split: Split, circuit: torch.Tensor, size: int = 500,
                      seed: int = 0, metric: metrics.MetricLike = metrics.DEFAULT) -> pd.DataFrame:
    """:func:`faithfulness` of one circuit (E,) bool on every evaluation pool (resample pairs)."""
    rows = [{"pool": name, **faithfulness(gm, pairs, circuit[None], metric=metric).iloc[0].to_dict()}
            for name, pairs in evaluation_pairs(split, size, seed).items()]
    return pd.DataFrame(rows)


def size_on_pools(gm: GraphModel, split: Split, scores: torch.Tensor, target: float = 0.95, size: int = 500,
                  seed: int = 0, metric: metrics.MetricLike = metrics.DEFAULT) -> tuple[int, pd.DataFrame]:
    """The fewest top-|score| edges recovering ``target`` on *every* evaluation pool at once, and the
    curves (one row per pool and circuit size). The goal's circuit: :func:`size_at` asks it of one
    set of pairs only, where a circuit can leave out what another pool needs."""
    circuits = top_k_circuits(scores)
    curves = pd.concat([faithfulness(gm, pairs, circuits, metric=metric).assign(pool=name)
                        for name, pairs in evaluation_pairs(split, size, seed).items()], ignore_index=True)
    worst = curves.groupby("n_edges")["recovered"].min()
    hits = worst.index[worst >= target]
    return (int(hits[0]) if len(hits) else len(scores)), curves


# -- the known circuit and the scores against it ----------------------------------------------

_PAPER_IN = {("embed", 0, "q"), ("embed", 0, "k"), ("embed", 0, "v"), ("embed", 1, "k"), ("embed", 1, "v"),
             ("a0", 1, "q"), ("a0", 1, "k"), ("a1", None, "m1"), ("a1", None, "logits"), ("m1", None, "logits"),
             ("a0", None, "m1")}
CONSTANT_PATH = ("a0", None, "m1")  # layer 1's gathered constant operands read by MLP2 at "=" (module doc)
# where a labelled edge carries the circuit (module doc; :func:`_role_positions`' sets); any other: at "="
_PAPER_WHERE = {("embed", 0, "q"): "values", ("embed", 0, "k"): "variables+operands",
                ("embed", 0, "v"): "variables+operands", ("a0", 1, "k"): "values", ("embed", 1, "k"): "operands",
                ("embed", 1, "v"): "values+operands"}


def _paper_key(e: Edge) -> tuple:
    sender = e.sender.split(".")[0]  # a0.h3 -> a0
    if e.receiver in ("m1", "logits"):
        return (sender, None, e.receiver)
    layer, kind = int(e.receiver[1]), e.receiver[-1]
    return (sender, layer, kind)


def _role_positions(name: str, n_ctx: int) -> set[int]:
    """The positions of ``name``'s sets (``+`` joins several): a variable at ``0 .. n-6``, its value one
    later, the operands at ``n-3, n-2``, ``=`` last."""
    n = n_ctx
    sets = {"variables": set(range(n - 5)), "values": set(range(1, n - 4)), "operands": {n - 3, n - 2},
            "eq": {n - 1}}
    return set().union(*(sets[part] for part in name.split("+")))


def paper_labels(graph: Graph, constant_path: bool = True) -> torch.Tensor:
    """(E,) bool: the paper's circuit (see the module doc); two layers, an MLP in layer 2 only.

    ``constant_path=False`` gives the first labelling, without ``a0 -> m1`` (kept to compare)."""
    if not capabilities.has_paper_layout(graph.cfg):
        raise ComposeLensError("the paper's circuit is labelled for two-layer models with an MLP in layer 2 only")
    keys = _PAPER_IN if constant_path else _PAPER_IN - {CONSTANT_PATH}
    n = graph.cfg.n_ctx
    where = {key: _role_positions(name, n) for key, name in _PAPER_WHERE.items()}
    eq = _role_positions("eq", n)
    return torch.tensor([key in keys and (e.position < 0 or e.position in where.get(key, eq))
                         for e, key in zip(graph.edges, map(_paper_key, graph.edges))])


# the paper's circuit by role: (sender role, receiver role, receiver input, positions), with "embed"
# the embeddings; B binder head, G gatherer head (the paper's B), R router head, A adder MLP. Positions
# name :func:`_role_positions`' sets. In the paper (B = G = a0.h0, R = a1.h0, A = m1) these are the
# eleven edges of ``_PAPER_IN`` at ``_PAPER_WHERE`` (test_circuit.py beside it checks it).
_ROLE_EDGES = (("embed", "B", "q", "values"), ("embed", "B", "k", "variables"), ("embed", "B", "v", "variables"),
               ("embed", "G", "k", "operands"), ("embed", "G", "v", "operands"),
               ("B", "R", "k", "values"), ("embed", "R", "k", "operands"), ("embed", "R", "v", "values+operands"),
               ("G", "R", "q", "eq"), ("R", "A", "", "eq"), ("G", "A", "", "eq"), ("A", "logits", "", "eq"),
               ("R", "logits", "", "eq"))


@dataclass(frozen=True)
class CircuitRoles:
    """Where the circuit's roles sit in a model: heads as (block, head), the adder as its block;
    ``gatherer`` None: the gatherer's edges (``=`` onto the operands) are left out."""

    binder: tuple[int, int]
    router: tuple[int, int]
    adder: int
    gatherer: tuple[int, int] | None = None

    def nodes(self) -> dict[str, str]:
        head = "a{}.h{}".format
        nodes = {"embed": "embed", "logits": "logits", "B": head(*self.binder), "R": head(*self.router),
                 "A": f"m{self.adder}"}
        if self.gatherer is not None:
            nodes["G"] = head(*self.gatherer)
        return nodes

    def describe(self) -> str:
        gathers = "none" if self.gatherer is None else "blocks.{} head {}".format(*self.gatherer)
        return ("the located circuit (binder blocks.{} head {}, router blocks.{} head {}, adder blocks.{}.mlp, "
                "gatherer {})").format(*self.binder, *self.router, self.adder, gathers)


PAPER_ROLES = CircuitRoles(binder=(0, 0), router=(1, 0), adder=1, gatherer=(0, 0))


def located_labels(graph: Graph, roles: CircuitRoles, constant_path: bool = True) -> torch.Tensor:
    """(E,) bool: the paper's circuit by role (module doc), each role at the component ``roles`` names,
    in any layout; an edge the graph lacks (a sender not before its receiver) is not labelled. On the
    paper architecture with :data:`PAPER_ROLES` it is :func:`paper_labels`."""
    nodes = roles.nodes()
    wanted: dict[tuple[str, str], set[int] | None] = {}
    for sender, receiver, kind, where in _ROLE_EDGES:
        if sender not in nodes or receiver not in nodes or (not constant_path and (sender, receiver) == ("G", "A")):
            continue
        key = (nodes[sender], nodes[receiver] + (f".{kind}" if kind else ""))
        positions = _role_positions(where, graph.cfg.n_ctx)
        wanted[key] = wanted.get(key, set()) | positions
    return torch.tensor([(e.sender, e.receiver) in wanted
                         and (e.position < 0 or e.position in wanted[(e.sender, e.receiver)])
                         for e in graph.edges])


@dataclass(frozen=True)
class Labels:
    """The circuit a method's edge scores are compared with: ``labels`` (E,) bool, or None where the
    model has none to compare with (``name`` then says why: "none located: ...")."""

    labels: torch.Tensor | None
    name: str


def circuit_labels(subject: Subject, graph: Graph, seed: int = 0,
                   location=None) -> Labels:
    """The labelled circuit of a model (module doc): the paper architecture's :func:`paper_labels`, unlocated;
    any other's :func:`located_labels` (``location``: a locate result to reuse). None ("none located:
    ...") where a role is not located, or where the model does not bind
    (:func:`compose_lens.training.evaluate.learned`), the paper architecture included."""
    knows = location.learned if location is not None and location.learned is not None else None
    if knows is None:
        knows = learned(subject, seed=seed)
    if not knows.binds:  # no circuit that binds to score against (locate's binding gate)
        return Labels(None, "none located: " + knows.missing())
    if capabilities.is_paper_architecture(subject.config.model):
        return Labels(paper_labels(graph), "the paper's circuit")
    if location is None:
        location = locate.locate(subject, seed)
    missing = [role.line() for role in location.roles() if role.component is None]
    if missing:
        return Labels(None, "none located: " + "; ".join(missing))
    gatherer = location.gatherer
    roles = CircuitRoles((location.binder.layer, location.binder.head), (location.router.layer, location.router.head),
                         location.adder.layer, None if gatherer is None or gatherer.component is None
                         else (gatherer.layer, gatherer.head))
    return Labels(located_labels(graph, roles), roles.describe())


def _ranks(x: torch.Tensor) -> torch.Tensor:
    """Average ranks (ties share their mean rank), from 1."""
    return torch.from_numpy(rankdata(x.detach().double().cpu().numpy()))


def roc_auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """Probability that a labelled edge outranks an unlabelled one by |score| (Mann-Whitney,
    :func:`compose_lens.core.stats.roc_auc`): with ``pos`` labelled and ``neg`` unlabelled edges it moves
    in steps of 1 / (pos neg), e.g. 1/55 on the paper graph's 11 and 5."""
    return stats.roc_auc(scores.abs().double().numpy(), labels.bool().numpy())


def roc_auc_interval(scores: torch.Tensor, labels: torch.Tensor, seed: int = 0) -> list[float] | None:
    """The 95 % percentile bootstrap interval of :func:`roc_auc` over the graph's edges (None when a
    class is empty)."""
    if not labels.any() or labels.all():
        return None
    _, low, high = stats.auc_interval(scores.abs().double().numpy(), labels.bool().numpy(), seed=seed)
    return [low, high]


def spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    """Spearman's rank correlation of two score vectors."""
    ra, rb = _ranks(a), _ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denom = float(ra.norm() * rb.norm())
    return float((ra @ rb) / denom) if denom > 0 else float("nan")


def edge_table(gm: GraphModel, scores: torch.Tensor, method: str, found: torch.Tensor,
               labels: torch.Tensor | None = None) -> pd.DataFrame:
    """One row per edge: sender, receiver, position, score, rank (by |score|), in the found circuit,
    [in the labelled circuit]."""
    g = gm.graph
    table = pd.DataFrame({
        "edge": [e.name for e in g.edges], "sender": [e.sender for e in g.edges],
        "receiver": [e.receiver for e in g.edges], "position": [e.position for e in g.edges],
        "sender_site": [str(e.sites()[0]) for e in g.edges], "receiver_site": [str(e.sites()[1]) for e in g.edges],
        "score": scores.tolist(), "rank": (len(scores) + 1 - _ranks(scores.abs())).tolist(),
        "in_circuit": found.tolist(), "method": method})
    if labels is not None:
        table["labelled"] = labels.tolist()
    return table


def resample_pairs(split: Split, n_pairs: int = 300, seed: int = 0) -> PromptPairs:
    """About ``n_pairs`` pairs from the 0-, 1- and 2-var training pools, each prompt against
    another prompt of its pool with another answer (the resample corruption ACDC uses)."""
    if n_pairs < 6:
        raise ComposeLensError(f"n_pairs={n_pairs}: ask for at least 6 prompt pairs (two per pool)")
    parts = []
    for i, name in enumerate(("0var_train", "1var_train", "2var_train")):
        size = wanted = n_pairs // 3 + (i < n_pairs % 3)
        while True:  # a prompt resampled onto itself, or onto its own answer, makes no pair: with
            batch = make_pool(split, name, size, seed)  # few prompts none may be left, so draw more
            found = pool_pairs(batch.tokens, batch.labels, name, seed)
            if len(found) >= 2 or size >= 64 * wanted:
                break
            size *= 2
        if len(found) < 2:
            raise ComposeLensError(f"the {name} pool gives no two prompts with different answers; "
                                   f"use --pairs mixed")
        parts.append(found)
    return concat_pairs(parts, "resample")


PAIRS = {"resample": resample_pairs, "mixed": circuit_pairs}


@dataclass
class Discovery:
    """What one circuit-discovery method finds on one model: every edge scored (``edges``, with
    ``in_circuit`` and the paper's label), the found circuit's faithfulness on every pool
    (``pools``), and a summary (method, edges, circuit size and its bootstrap interval, seconds, ROC-AUC)."""

    edges: pd.DataFrame
    pools: pd.DataFrame
    summary: dict
    title: str


def discover(subject: Subject, method: str = "eap-ig", n_pairs: int = 300,
             seed: int = 0, pairs_kind: str = "resample", positions: bool = False, target: float = 0.95,
             threshold: float = 0.01, *, pairs=None, metric: metrics.MetricLike = metrics.DEFAULT,
             location=None) -> Discovery:
    """Score every edge with ``method`` and take the circuit: ACDC's pruned graph, or for the
    other methods the smallest top-k set that recovers ``target`` of the metric.

    ``pairs``: your own prompt pairs in place of ``n_pairs`` of ``pairs_kind`` (a pairs file, a
    DataFrame or a list of (clean, corrupted): :func:`compose_lens.data.pairs.as_prompt_pairs`).
    ``metric``: ``logit_diff`` (default), ``prob``, ``accuracy`` (exact and ACDC only) or a function
    ``metric(logits, answers) -> (N,)`` (:mod:`compose_lens.analysis.metrics`); the pools'
    faithfulness is read in it too. The edges are scored against :func:`circuit_labels` (``location``:
    a :func:`compose_lens.analysis.locate.locate` result to reuse); ``summary["labelled"]`` names it."""
    model, config, split = subject.model, subject.config, subject.split
    check_method_metric(method, metric)
    metric_name = metrics.resolve(metric)[0]
    gm = GraphModel.from_model(model, config.model, positions)
    if pairs is None:
        pairs = PAIRS[pairs_kind](split, n_pairs, seed)
    else:
        pairs = as_prompt_pairs(split.task, pairs)
        pairs_kind = pairs.corruption
    scores, seconds = method_scores(gm, pairs, method, threshold=threshold, metric=metric)
    base = baseline(gm, pairs, metric)
    if method == "acdc":
        found = acdc(gm, pairs, threshold, base)[0]
        size, size_ci = int(found.sum()), None  # ACDC prunes to its threshold: no recovery curve to resample
    else:
        size, size_ci = size_with_interval(gm, pairs, scores, target, base, seed)
        found = top_k_circuits(scores)[size]
    labelled = circuit_labels(subject, gm.graph, seed, location)
    labels = labelled.labels
    summary = {"method": method, "edges": len(gm.graph), "circuit_edges": size, "circuit_edges_ci95": size_ci,
               "seconds": round(seconds, 3),
               "roc_auc": roc_auc(scores, labels) if labels is not None else None,
               "roc_auc_ci95": roc_auc_interval(scores, labels, seed) if labels is not None else None,
               "labelled_edges": None if labels is None else [int(labels.sum()), int((~labels).sum())],
               "metric": metric_name,
               "labelled": labelled.name}
    in_metric = "" if metric_name == metrics.DEFAULT else f", metric {metric_name}"
    return Discovery(edge_table(gm, scores, method, found, labels),
                     pool_faithfulness(gm, split, found, seed=seed, metric=metric), summary,
                     f"{method}: {size} of {len(gm.graph)} edges ({pairs_kind} pairs{in_metric})")
