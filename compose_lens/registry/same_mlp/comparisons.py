"""Does layer 2's MLP add a variable's value with the SAME representation and features it
uses for a constant? Three tests whose predictions differ between "shared" and "not shared", and the
correlational cosines the figure shows beside them (:func:`cosine_groups` on :func:`matched_prompts`).
The study's readings are in docs/same-mlp.md.

The model has one MLP at ``=`` (``blocks.1.mlp``, "MLP2"), so "one MLP serves both" is true by
construction, and patching the whole MLP2 input from a donor proves nothing (the output follows the
donor whatever the receiver, random tokens included). The question is narrower: does an operand's
value reach MLP2 in the same form, and get read by the same features, whether it came from a
constant token or from a variable's assignment?

**Isolating one operand.** With the attention patterns of a prompt held fixed, the layers before
MLP2 are linear in the token embeddings, so the MLP2 input at ``=`` is a sum of one term per
(token, position) plus position terms. The term of the token ``t`` at position ``s`` is ``E[t] M_s`` with

    M_s = sum_h A0_h[=, s] OV1_h + sum_g A1_g[s] OV2_g + sum_{h,g} (A1_g A0_h)[s] OV1_h OV2_g

(layer 1 at ``=`` reads s directly; layer 2 reads s directly; layer 2 reads a position whose
layer-1 head read s). The *source* of an operand is the position holding its value: 13 / 14 for a
constant, the assigned number in the context for a variable. This ``token`` isolation moves every
path the value takes, including the layer-1 path at ``=`` (a constant also arrives through ``OV1``,
a variable's value cannot). The narrower ``ov2`` isolation (``A1[s] resid_after_layer1[s] OV2``)
misses that path and also moves the position and variable-tag parts of s. Both are measured (the
``isolation`` column); the verdict uses :data:`ISOLATION`, ``token``: complete by construction and
the value's content only, which the probe of test 3 needs. On the study's final checkpoint (400
prompts per set) removing the ``token`` term of either operand leaves the answer at 1.5-2.5 %
(chance 1.7 %) for constants, 1-var and 2-var prompts; the layer-1 path is 3 % of a constant's term
(0.1 % of a variable's), and the two isolations agree (cosine 0.98-0.995, interchange within 1 %).

**1. Operand interchange.** Receiver MLP2 input ``h_r - c_r + c_d``: the receiver's operand term
replaced by the donor's. If both carry the value in the shared form, the answer becomes donor
operand + receiver's *other* operand (chance 1/p otherwise), for left and right operands, constants
into 1-var and 2-var prompts and back. Donors differ from their receiver in both operands, so this
answer is neither prompt's own. Same-type interchanges (constant -> constant, variable -> variable)
give each cross-type swap its reference. Controls that must not show the effect: a *random-token
donor* (the term of a random non-source context token of the donor moved in place of its
operand's) and a *random-token receiver* (the donor's term put in place of a random non-source
context token of the receiver, whose own operand stays).

**2. Feature transfer.** Key frequencies and their neurons are found on the p x p grid of CONSTANT
prompts (:mod:`compose_lens.analysis.fourier`). Each key frequency's output directions, each key
frequency's neurons, and each of the busiest single neurons are mean-ablated one at a time on
constant, 1-var and 2-var prompts; the damage per ablation (:func:`margin` lost) is a profile.
Shared features give the same profile (Pearson and Spearman near 1; a constants split-half gives
the reference); features specific to constants give unrelated profiles (the null: the correlation
with the units permuted, about 0).

**3. Representation transfer.** Fitted on constant operands' isolated terms, tested on held-out
constants and on variables' values: (a) a ridge probe from the term to ``cos, sin (2 pi k x / p)``
of the key frequencies, decoded to the nearest x (control: random non-source context tokens); (b)
the share of the terms' variance inside the constants' principal subspace (95 % of their variance;
a random subspace of that size holds k / d). Both must hold. (b) is the sharp one: a planted model
with variables in an orthogonal subspace still decodes at 0.95 from the small shared part, while its
subspace share is 0.004 against 0.95 for held-out constants.

**Reading an interchange against its reference.** A cross-type swap a->b (per side) is read against
the LOWER of its two same-type scores a->a and b->b (``reference``, ``reference_condition``): the
donor's operand must be read out of one type and written into the other. It is a reference, not a
ceiling (a cross-type swap can exceed it). Below ``THRESHOLDS["reference_min"]`` (0.5, 30 x chance at
p = 59) the model cannot yet do the same-type swap, so the condition is *inconclusive* and the
reason names the weak reference; else it *passes* at ``interchange_ratio`` (0.8) x the reference
with its lower CI bound at ``interchange_ci_ratio`` (0.5) x, and *fails* otherwise. The test fails
if any condition fails, is inconclusive if none fails but one has a weak reference (or a control
shows the effect), and passes otherwise.

**Verdict.** Each test ``passed`` / ``failed`` / ``inconclusive`` against :data:`THRESHOLDS`
(inconclusive: its reference too low to test anything, or a control shows the effect).
``supported`` needs all three passed, ``not supported`` follows from any failed test, else
``inconclusive``; ``verdict_reason`` says which test decided and why. Each test names its
**deciding condition** (``deciding_condition``): the failed condition furthest below its bar, else
the one with the weakest reference, else the one closest to its bar; the interchange also keeps
its lowest cross-type score (``lowest_condition``, ``lowest_value``) and weakest reference
(``weakest_reference``, ``weakest_reference_condition``). Older reports' names (``worst_condition``,
``ceiling``, ...) are read through :func:`upgrade`. Intervals are percentile bootstraps over
prompts (95 %). Gates, each leaving the verdict ``inconclusive`` with the reason named:

* **competence**: a model must answer the variable prompt sets the tests read (1-var left, 1-var
  right, 2-var; ``competence``) at :data:`compose_lens.training.evaluate.LEARNED` (0.9) before the
  tests run at all (a stalled model that passed two tests was no evidence of one MLP); likewise a
  model that does not compose (:func:`compose_lens.training.evaluate.headline_holds`: it answers its
  training slots but not unseen ones, e.g. 2-var union 0.597);
* a feature-transfer or probe condition short of its bar on a set the model answers below
  ``THRESHOLDS["reference_min"]`` (:func:`unable`) leaves its test inconclusive, not failed;
* a probe failure where the isolation does not carry even a constant operand (its const->const
  interchange below ``reference_min``, :func:`reconcile`: the 3-layer chain models' router term).

**Other architectures** (:class:`Layout`, :func:`layout_of`). The paper architecture is read as
above, without locating anything. Any other model (no normalisation) is first located
(:func:`compose_lens.analysis.locate.locate`): the tests run on the located *adder* MLP
(``blocks.A.mlp``, "MLP2" above) with the operands routed by the located *router* head (``blocks.R``
head r, R <= A). In the study's layout with more heads (two layers, an MLP in ``blocks.1`` only) the
``token`` isolation stays exact (sum over every head). In a deeper model the MLPs before the adder
make the residual nonlinear in the tokens, so an operand's term is the ``router`` isolation:
``sum_r A_r[=, s] resid_pre_R(r)[s] OV_r``, what the router heads write at ``=`` from the operand's
source (the paper's ``ov2`` isolation at every head whose router score reaches the threshold, in a
block up to the adder's); and the logits of an edited adder input are read through the edit's
direct path, the blocks after the adder held at their clean values (``logits + (h' + MLP(h') - h -
MLP(h)) W_U``: exact when the adder is the last block, as in
:class:`compose_lens.analysis.fourier.FrozenDownstreamReadout` otherwise). Where no MLP adds, no head
routes, or the router sits above the adder, the tests do not run: the verdict is ``inconclusive``
and ``verdict_reason`` starts "none located", never a default block's numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from compose_lens.analysis import locate
from compose_lens.training.evaluate import LEARNED, answer_logits, composition_gap, predictions
from compose_lens.registry.ablation.ablations import (
    LastPositionMLP, fourier_ablation_logits, frequency_groups, neuron_ablation_logits, reference_tokens)
from compose_lens.analysis.fourier import draw_variables, neuron_frequencies, operand_grid
from compose_lens.analysis.probes import value_targets
from compose_lens.core import capabilities, coverage, stats
from compose_lens.core.config import ModelConfig, RunConfig
from compose_lens.core.errors import ComposeLensError
from compose_lens.core.files import json_safe
from compose_lens.data import streams
from compose_lens.data.sampler import render
from compose_lens.data.split import Split
from compose_lens.data.task import SequenceKind
from compose_lens.model.forward import ANSWER, Forward, Site
from compose_lens.model import tl, weights
from compose_lens.core.provenance import provenance
from compose_lens.training.subject import Subject

def mlp_in(block: int) -> str:
    """The hook of the input of ``blocks.{block}``'s MLP."""
    return f"blocks.{block}.mlp.hook_in"


ISOLATION = "token"
ISOLATIONS = ("token", "ov2")
ROUTER_ISOLATION = "router"  # another architecture's operand term: what the located router writes at =
PROMPT_KINDS = tuple(dict.fromkeys(kind.prompt for kind in SequenceKind))  # const, var1, var2
BOOTSTRAP = 1000

THRESHOLDS = {
    "interchange_ratio": 0.8,      # every cross-type interchange accuracy >= this x its reference (the
                                   # lower of its two same-type accuracies, same side)
    "interchange_ci_ratio": 0.5,   # ... and its lower CI bound >= this x that reference
    "reference_min": 0.5,          # a same-type interchange (or the held-out constant probe) below this:
                                   # the model cannot do that type yet, inconclusive
    "control_max": 0.15,           # upper CI bound a control may reach (chance is 1/p)
    "damage_correlation": 0.5,     # lower CI bound of the Pearson correlation of damage profiles
    "damage_min": 0.1,             # mean margin drop (logits) on constants below this: the features do nothing
    "probe_ratio": 0.8,            # variable probe accuracy (lower CI) / held-out constant accuracy
}


# -- where the tests read ----------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """The components the tests read (see "Other architectures" in the module doc)."""

    adder: int | None  # the block of the adder MLP
    routers: tuple[tuple[int, int], ...]  # the router head(s) (layer, head) the router isolation reads
    isolation: str  # ISOLATION (token) or ROUTER_ISOLATION
    how: str
    missing: str | None = None  # why the tests cannot run (a role none located), else None
    located: dict | None = None  # locate's roles (None: the paper architecture, not located)

    @property
    def isolations(self) -> tuple[str, ...]:
        return ISOLATIONS if self.isolation == ISOLATION else (ROUTER_ISOLATION,)

    @property
    def study(self) -> bool:
        """The study's layout (MLP2 in the last of two blocks): the exact readout, the study's ablations."""
        return self.isolation == ISOLATION

    def to_dict(self) -> dict:
        return {"adder": None if self.adder is None else f"blocks.{self.adder}.mlp",
                "routers": [f"blocks.{layer} head {head}" for layer, head in self.routers],
                "isolation": self.isolation, "how": self.how, "missing": self.missing, "located": self.located}


PAPER_LAYOUT = Layout(1, ((1, 0),), ISOLATION, "adder: blocks.1.mlp, router: blocks.1 head 0 (the paper "
                                               "architecture's, read without locating)")


def layout_of(subject: Subject, seed: int = 0) -> Layout:
    """Where the tests read: :data:`PAPER_LAYOUT` for the paper architecture, else the located adder
    and router (``missing`` says which role no component plays), located once per subject and seed
    (:meth:`~compose_lens.training.subject.Subject.once`)."""
    config = subject.config
    check_layout(config)
    undecidable = coverage.same_mlp_inconclusive(config.model)  # normalisation: no test applies
    if undecidable:
        return Layout(None, (), ROUTER_ISOLATION, "not located: the tests do not apply", undecidable)
    if capabilities.is_paper_architecture(config.model):
        return PAPER_LAYOUT
    return subject.once("same-mlp layout", seed, lambda: _locate_layout(subject, seed))


def _locate_layout(subject: Subject, seed: int) -> Layout:
    config = subject.config
    found = locate.locate(subject, seed)
    located = {r.role: {"component": r.component, "score": r.score, "threshold": r.threshold} for r in found.roles()}
    adder, router = found.adder, found.router
    how = f"located: {adder.line()}; {router.line()}"
    missing = [r.line() for r in (adder, router) if r.component is None]
    if missing:
        return Layout(None, (), ROUTER_ISOLATION, how, "none located: " + "; ".join(missing), located)
    if router.layer > adder.layer:
        return Layout(None, (), ROUTER_ISOLATION, how, f"the router ({router.component}) sits above the adder "
                      f"({adder.component}): it cannot route the operands into it", located)
    study = capabilities.has_paper_layout(config.model) and adder.layer == 1
    table = found.candidates
    routing = table[(table["role"] == "router") & (table["score"] >= router.threshold)
                    & (table["layer"] <= adder.layer)].sort_values("score", ascending=False, kind="stable")
    routers = tuple((int(r.layer), int(r.head)) for r in routing.itertuples())  # the located one first
    if len(routers) > 1:
        how += f"; every head that routes (score >= {router.threshold}): " + ", ".join(
            f"blocks.{layer} head {head}" for layer, head in routers)
    return Layout(adder.layer, routers, ISOLATION if study else ROUTER_ISOLATION, how, None, located)


# -- prompts and their decomposition -----------------------------------------------------------
@dataclass
class Prompts:
    """Prompts of one kind: tokens, operand values and each operand's source position."""

    kind: str  # const / var1 / var2 / random
    side: str  # which operand is the variable for var1 (left / right); both for var2
    tokens: torch.Tensor  # (N, n)
    x: torch.Tensor  # (N,) left value
    y: torch.Tensor  # (N,) right value
    source: torch.Tensor  # (N, 2) positions of the left and right values

    def value(self, side: str) -> torch.Tensor:
        return self.x if side == "left" else self.y


def make_prompts(split: Split, kind: str, side: str, n: int, seed: int = 0) -> Prompts:
    """n prompts on training pairs: ``const`` (0-var), ``var1`` (the ``side`` operand a
    variable), ``var2`` (both variables); ``random``: every token uniform over the vocabulary,
    ``=`` last, its "operands" the tokens at the two operand slots."""
    task = split.task
    if kind == "random":
        g = streams.derived_generator(seed, streams.SAME_MLP_TESTS, 9)
        tokens = torch.randint(0, task.d_vocab, (n, task.seq_len), generator=g)
        tokens[:, -1] = task.equals_token
        source = torch.tensor([task.seq_len - 3, task.seq_len - 2]).expand(n, 2)
        return Prompts("random", "both", tokens, tokens[:, -3], tokens[:, -2], source)
    sequence_kind = SequenceKind.of_prompt(kind, side)
    index = PROMPT_KINDS.index(kind) * 2 + (side == "right")
    g = streams.derived_generator(seed, streams.SAME_MLP_TESTS, index)
    pairs = split.train_pairs[torch.randint(0, len(split.train_pairs), (n,), generator=g)]
    v, w = draw_variables(task, sequence_kind, n, g)
    batch = render(split, torch.stack([pairs[:, 0], pairs[:, 1], v, w], 1), g)
    return Prompts(kind, side, batch.tokens, pairs[:, 0], pairs[:, 1], value_targets(task, batch.tokens))


def matched_prompts(split: Split, n: int, side: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(constant tokens, variable tokens, labels) for the same n training pairs (x, y), contexts
    drawn independently (``side`` ``left``: ``+ v y =``; ``right``: ``+ x w =``), for :func:`cosine_groups`."""
    task = split.task
    g = streams.derived_generator(seed, streams.SAME_MLP, 0 if side == "left" else 1)
    pairs = split.train_pairs[torch.randint(0, len(split.train_pairs), (n,), generator=g)]
    none = torch.full((n,), -1, dtype=torch.long)
    allowed = torch.tensor(task.allowed_left if side == "left" else task.allowed_right)
    var = allowed[torch.randint(0, len(allowed), (n,), generator=g)]
    const_rows = torch.stack([pairs[:, 0], pairs[:, 1], none, none], 1)
    var_rows = torch.stack([pairs[:, 0], pairs[:, 1], var if side == "left" else none,
                            var if side == "right" else none], 1)
    const = render(split, const_rows, g)
    return const.tokens, render(split, var_rows, g).tokens, const.labels


def cosine_groups(subject: Subject, n: int = 1000, seed: int = 0,
                  block: int | None = None) -> dict[str, np.ndarray]:
    """Cosines of the MLP2 input at ``=`` (``block``'s MLP, default :func:`compose_lens.analysis.locate.mlp_block`),
    centred (raw cosines share a large offset): constant vs variable prompt of the same (x, y)
    (matched) against pairs with different answers (mismatched), for a left and a right variable."""
    site = Site(mlp_in(locate.mlp_block(subject, seed) if block is None else block), ANSWER)
    forward = Forward(subject.model, subject.config.model)
    groups = {}
    g = streams.seeded_generator(seed)  # the mismatched partners
    for side in ("left", "right"):
        const, var, labels = matched_prompts(subject.split, n, side, seed)
        h = [forward.read(t, [site], len(t))[site] for t in (const, var)]
        centre = torch.cat(h).mean(0)
        a, b = h[0] - centre, h[1] - centre
        partner = torch.randperm(len(labels), generator=g)
        other = labels[partner] != labels
        groups[f"matched, {side} variable"] = torch.cosine_similarity(a, b, dim=-1).numpy()
        groups[f"mismatched, {side} variable"] = torch.cosine_similarity(a[other], b[partner][other], dim=-1).numpy()
    return groups


@dataclass
class Decomposition:
    """What the MLP2 input at ``=`` is made of, for one batch (attention patterns frozen)."""

    h: torch.Tensor  # (N, d) the MLP2 input at "="
    resid1: torch.Tensor  # (N, n, d) the residual after layer 1 (router isolation: (G, N, n, d), each router's block input)
    a0: torch.Tensor | None  # (H, N, n) layer-1 attention from "=" (router isolation: None)
    a1: torch.Tensor  # (H, N, n) layer-2 attention from "=" (router isolation: the router heads')
    through: torch.Tensor | None  # (H, H, N, n) [h1, h2]: layer 2 (head h2) reading s through layer-1 head h1
    tokens: torch.Tensor
    logits: torch.Tensor | None = None  # (N, V) router isolation: the clean logits at "=" (else None: exact readout)
    mlp_out: torch.Tensor | None = None  # (N, d) router isolation: the adder's clean output at "="
    adder: int = 1  # the adder's block

    def readout(self, model: tl.Model, config: RunConfig, h: torch.Tensor) -> torch.Tensor:
        """Logits at ``=`` of these prompts with the adder input replaced by ``h`` (N, d): MLP2 and the
        unembedding (the study's layout), else the edit's direct path over the clean logits (module doc)."""
        forward = Forward(model, config.model)
        if self.logits is None:
            return forward.logits_from(Site(mlp_in(self.adder), ANSWER), h)
        new = forward.mlp_from(self.adder, h)
        return self.logits + (h - self.h + new - self.mlp_out) @ weights.detached_parameters(model)["unembed.weight"].T


def decompose(model: tl.Model, cfg: ModelConfig, tokens: torch.Tensor, fast: bool | None = None,
              layout: Layout = PAPER_LAYOUT) -> Decomposition:
    """Attention patterns and residuals of a batch, read by the one forward
    (:class:`compose_lens.model.forward.Forward`: the tables for the paper architecture, no bridge needed;
    ``fast=False``: the hooks); ``layout``: another architecture's (:func:`layout_of`)."""
    forward = Forward(model, cfg, fast)
    if not layout.study:
        return _decompose_routed(forward, tokens, layout)
    p0, a1 = Site("blocks.0.attn.hook_pattern"), Site("blocks.1.attn.hook_pattern", ANSWER)
    resid1, h = Site("blocks.0.hook_resid_post"), Site(mlp_in(1), ANSWER)
    found = forward.read(tokens, [p0, a1, resid1, h], len(tokens))
    a1_heads = found[a1].transpose(0, 1)  # (H, N, n)
    through = torch.einsum("gbi,bhis->hgbs", a1_heads, found[p0])
    return Decomposition(found[h], found[resid1], found[p0][:, :, -1].transpose(0, 1), a1_heads, through, tokens)


def _decompose_routed(forward: Forward, tokens: torch.Tensor, layout: Layout) -> Decomposition:
    """The router isolation's parts: the router's block input and attention from ``=``, the adder's
    input and output at ``=`` and the clean logits."""
    adder = layout.adder
    mlp_in, mlp_out, logits = (Site(f"blocks.{adder}.hook_resid_mid", ANSWER), Site(f"blocks.{adder}.hook_mlp_out", ANSWER),
                               Site("logits", ANSWER))
    patterns = [Site(f"blocks.{layer}.attn.hook_pattern", ANSWER, head) for layer, head in layout.routers]
    inputs = [Site(f"blocks.{layer}.hook_resid_pre") for layer, _ in layout.routers]
    found = forward.read(tokens, [mlp_in, mlp_out, logits, *patterns, *inputs], len(tokens))
    a1 = torch.stack([found[site] for site in patterns])  # (G, N, n)
    resid = torch.stack([found[site] for site in inputs])
    return Decomposition(found[mlp_in], resid, None, a1, None, tokens, found[logits], found[mlp_out], adder)


@dataclass
class Circuits:
    """The OV circuits of both layers, per head, and the embedding."""

    E: torch.Tensor
    ov1: list[torch.Tensor]
    ov2: list[torch.Tensor]


def circuits(model: tl.Model, layout: Layout = PAPER_LAYOUT) -> Circuits:
    """The study layout's OV circuits of both blocks; another's: the router heads' OV (as ``ov2``)."""
    E = weights.detached_parameters(model)["embed.weight"]
    if not layout.study:
        return Circuits(E, [], [weights.ov_matrix(model, layer, head) for layer, head in layout.routers])
    heads = range(tl.size(model, "n_heads"))
    return Circuits(E, [weights.ov_matrix(model, 0, h) for h in heads], [weights.ov_matrix(model, 1, h) for h in heads])


def term(dec: Decomposition, circ: Circuits, pos: torch.Tensor, isolation: str = ISOLATION) -> torch.Tensor:
    """(N, d) the part of the MLP2 input carried by the token at ``pos`` (N,) (see the module doc)."""
    rows = torch.arange(len(pos))
    if isolation == ROUTER_ISOLATION:  # each router head reads its own block's input
        return sum(dec.a1[g, rows, pos, None] * (dec.resid1[g, rows, pos] @ ov) for g, ov in enumerate(circ.ov2))
    if isolation == "ov2":
        r = dec.resid1[rows, pos]
        return sum(dec.a1[g, rows, pos, None] * (r @ ov) for g, ov in enumerate(circ.ov2))
    if isolation != "token":
        raise ValueError(f"isolation={isolation!r}: use one of {', '.join(ISOLATIONS + (ROUTER_ISOLATION,))}")
    e = circ.E[dec.tokens[rows, pos]]
    out = torch.zeros_like(e)
    for h, ov1 in enumerate(circ.ov1):
        via1 = e @ ov1
        out += dec.a0[h, rows, pos, None] * via1
        for g, ov2 in enumerate(circ.ov2):
            out += dec.through[h, g, rows, pos, None] * (via1 @ ov2)
    for g, ov2 in enumerate(circ.ov2):
        out += dec.a1[g, rows, pos, None] * (e @ ov2)
    return out


# -- statistics ---------------------------------------------------------------------------------
def bootstrap_mean(values: torch.Tensor, seed: int = 0, n_boot: int = BOOTSTRAP) -> tuple[float, float, float]:
    """Mean of ``values`` (N,) and its 95 % percentile bootstrap interval."""
    values = values.float()
    g = streams.derived_generator(seed, streams.SAME_MLP_TESTS, 12)
    idx = torch.randint(0, len(values), (n_boot, len(values)), generator=g)
    low, high = stats.percentile_interval(values[idx].mean(1))
    return values.mean().item(), low.item(), high.item()


def _rank(v: torch.Tensor) -> torch.Tensor:
    return v.argsort(-1).argsort(-1).float()


def _pearson(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row-wise Pearson correlation of (..., m) tensors (0 where one is constant)."""
    a, b = a - a.mean(-1, keepdim=True), b - b.mean(-1, keepdim=True)
    denom = a.norm(dim=-1) * b.norm(dim=-1)
    return torch.where(denom > 0, (a * b).sum(-1) / denom.clamp_min(1e-30), torch.zeros_like(denom))


# -- 1. operand interchange ---------------------------------------------------------------------
def pair_donors(receiver: Prompts, donor: Prompts, side: str, seed: int = 0) -> torch.Tensor:
    """(N,) donor index per receiver: a donor whose ``side`` operand and other operand both
    differ from the receiver's (so the predicted answer is neither prompt's own), where possible."""
    g = streams.derived_generator(seed, streams.SAME_MLP_TESTS, 10)
    other = "right" if side == "left" else "left"
    n = len(receiver.x)
    partner = torch.randperm(len(donor.x), generator=g)[:n]
    for _ in range(20):
        bad = (donor.value(side)[partner] == receiver.value(side)) | (donor.value(other)[partner] == receiver.value(other))
        if not bad.any():
            break
        partner[bad] = torch.randint(0, len(donor.x), (int(bad.sum()),), generator=g)
    return partner


def random_positions(prompts: Prompts, seed: int, index: int) -> torch.Tensor:
    """(N,) a random context position that holds neither operand's value."""
    g = streams.derived_generator(seed, streams.SAME_MLP_TESTS, 11 + 100 * index)
    C = prompts.tokens.shape[1] - 4
    pos = torch.randint(0, C, (len(prompts.x),), generator=g)
    for _ in range(50):
        bad = (pos.unsqueeze(1) == prompts.source).any(1)
        if not bad.any():
            break
        pos[bad] = torch.randint(0, C, (int(bad.sum()),), generator=g)
    return pos


@dataclass
class Interchanged:
    """Per-prompt outcomes of one interchange condition."""

    predicted: torch.Tensor  # (N,) bool: answer == donor operand + receiver's other operand
    donor: torch.Tensor  # (N,) bool: answer == the donor's own answer


def interchange(model: tl.Model, config: RunConfig, parts: dict, receiver: str, donor: str, side: str,
                isolation: str = ISOLATION, control: str = "", seed: int = 0,
                layout: Layout = PAPER_LAYOUT) -> Interchanged:
    """Move the ``side`` operand's term from the donor prompts into the receiver prompts.

    ``parts`` maps a prompt-set name to (Prompts, Decomposition); ``control`` is ``""``,
    ``random_donor`` or ``random_receiver`` (see the module doc)."""
    circ = circuits(model, layout)
    (rp, rd), (dp, dd) = parts[receiver], parts[donor]
    k = 0 if side == "left" else 1
    partner = pair_donors(rp, dp, side, seed)
    r_pos = rp.source[:, k] if control != "random_receiver" else random_positions(rp, seed, 1)
    d_pos = dp.source[:, k] if control != "random_donor" else random_positions(dp, seed, 2)
    c_r = term(rd, circ, r_pos, isolation)
    c_d = term(dd, circ, d_pos, isolation)[partner]
    answer = rd.readout(model, config, rd.h - c_r + c_d).argmax(-1)
    other = rp.value("right" if side == "left" else "left")
    donor_value = dp.value(side)[partner]
    predicted = (config.task.answer(donor_value, other) if side == "left"
                 else config.task.answer(other, donor_value))
    return Interchanged(answer == predicted, answer == config.task.answer(dp.x[partner], dp.y[partner]))


# (name, donor set, receiver set, kind); sets: const, var1, var2 (the side's operand a variable), random
INTERCHANGES = (
    ("const->var1", "const", "var1", "cross"), ("var1->const", "var1", "const", "cross"),
    ("const->var2", "const", "var2", "cross"), ("var2->const", "var2", "const", "cross"),
    ("const->const", "const", "const", "same"), ("var1->var1", "var1", "var1", "same"),
    ("var2->var2", "var2", "var2", "same"),
)


def _row(test: str, side: str, condition: str, kind: str, metric: str, hits: torch.Tensor, chance: float,
         not_shared: float, seed: int, **extra) -> dict:
    mean, low, high = bootstrap_mean(hits, seed)
    return {"test": test, "side": side, "condition": condition, "kind": kind, "metric": metric, "value": mean,
            "ci_low": low, "ci_high": high, "chance": chance, "not_shared_prediction": not_shared,
            "n": len(hits), **extra}


def interchange_table(model: tl.Model, config: RunConfig, parts: dict, seed: int = 0,
                      layout: Layout = PAPER_LAYOUT) -> pd.DataFrame:
    """Test 1 for both sides, every condition, both isolations (another architecture: the router
    isolation), and the controls: one row each."""
    chance = 1.0 / config.task.modulus
    main = layout.isolation
    rows = []
    for side in ("left", "right"):
        names = {"const": "const", "var1": f"var1_{side}", "var2": "var2", "random": "random"}
        for iso in layout.isolations:
            for cond, donor, receiver, kind in INTERCHANGES:
                out = interchange(model, config, parts, names[receiver], names[donor], side, iso, seed=seed,
                                  layout=layout)
                rows.append(_row("interchange", side, cond, kind, "donor operand + receiver other operand",
                                 out.predicted, chance, 1.0 if kind == "same" else chance, seed, isolation=iso))
        for donor, receiver in (("const", "var1"), ("var1", "const")):
            out = interchange(model, config, parts, names[receiver], names[donor], side, main,
                              control="random_donor", seed=seed, layout=layout)
            rows.append(_row("interchange", side, f"random-token donor {donor}->{receiver}", "control",
                             "donor operand + receiver other operand", out.predicted, chance, chance, seed,
                             isolation=main))
        for donor in ("const", "var1"):
            out = interchange(model, config, parts, "random", names[donor], side, main, seed=seed, layout=layout)
            rows.append(_row("interchange", side, f"{donor}->random-token receiver", "control",
                             "donor's own answer", out.donor, chance, chance, seed, isolation=main))
    # the WHOLE MLP2 input from a constant donor into random-token receivers gives the donor's answer:
    # the reference for a test that cannot fail
    (rp, rd), (dp, dd) = parts["random"], parts["const"]
    partner = pair_donors(rp, dp, "left", seed)
    whole = rd.readout(model, config, dd.h[partner]).argmax(-1) == config.task.answer(dp.x[partner], dp.y[partner])
    rows.append(_row("interchange", "both", "const->random-token receiver, whole MLP2 input", "reference",
                     "donor's own answer", whole, chance, 1.0, seed, isolation="whole input"))
    return pd.DataFrame(rows)


# -- 2. feature transfer ------------------------------------------------------------------------
@dataclass
class Features:
    """What the CONSTANT-prompt grid says MLP2 computes with."""

    keys: list[int]  # key frequencies
    groups: dict[int, list[int]]  # the neurons of each key frequency
    busiest: list[int]  # the single neurons with the most variance on the constant grid


def constant_features(subject: Subject, seed: int = 0, n_neurons: int = 32,
                      min_fraction: float = 0.5, layer: int = 1) -> Features:
    """``layer``: the adder's block (the paper's MLP2: 1)."""
    neurons = neuron_frequencies(operand_grid(subject, "constant", seed, layer=layer))
    groups = frequency_groups(neurons, min_fraction)
    busiest = neurons.sort_values("variance", ascending=False)["neuron"].head(n_neurons).tolist()
    return Features(list(groups), {k: v for k, v in groups.items() if v}, [int(i) for i in busiest])


def damage_matrix(model: tl.Model, config: RunConfig, tokens: torch.Tensor, labels: torch.Tensor,
                  features: Features, reference: LastPositionMLP,
                  layout: Layout = PAPER_LAYOUT) -> tuple[torch.Tensor, list[str]]:
    """(N, U) drop of the answer's logit margin per prompt and ablated unit (mean ablation), one unit
    at a time: each key frequency's output directions, each key frequency's neurons, each busy
    neuron; and the unit names."""
    mlp = LastPositionMLP(model, config, tokens, None if layout.study else layout.adder)
    base = margin(mlp.logits(), labels)
    columns = [margin(fourier_ablation_logits(mlp, reference, k, "mean"), labels) for k in features.keys]
    groups = [features.groups[k] for k in features.groups] + [[i] for i in features.busiest]
    names = ([f"directions k={k}" for k in features.keys] + [f"neurons k={k}" for k in features.groups]
             + [f"neuron {i}" for i in features.busiest])
    columns += [margin(logits, labels) for _, logits in neuron_ablation_logits(mlp, reference, groups, "mean")]
    if not columns:
        return torch.zeros(len(labels), 0), names
    return base.unsqueeze(1) - torch.stack(columns, 1), names


def margin(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """(N,) the answer's logit minus the mean logit: graded, unlike accuracy, and without the
    heavy tail of the cross-entropy of a confident model."""
    return logits.gather(1, labels.unsqueeze(1)).squeeze(1) - logits.mean(1)


def profile_correlation(a: torch.Tensor, b: torch.Tensor, seed: int = 0, n_boot: int = BOOTSTRAP) -> dict:
    """Pearson and Spearman correlation of the mean damage profiles of two (N, U) matrices, with
    95 % bootstrap intervals (prompts resampled in each), and the permutation null (units shuffled)."""
    g = streams.derived_generator(seed, streams.SAME_MLP_TESTS, 13)
    pa, pb = a.mean(0), b.mean(0)
    boot_a = a[torch.randint(0, len(a), (n_boot, len(a)), generator=g)].mean(1)
    boot_b = b[torch.randint(0, len(b), (n_boot, len(b)), generator=g)].mean(1)
    pearson, spearman = _pearson(boot_a, boot_b), _pearson(_rank(boot_a), _rank(boot_b))
    null = _pearson(pa.expand(n_boot, -1), pb[torch.stack([torch.randperm(len(pb), generator=g) for _ in range(n_boot)])])
    (pearson_low, pearson_high), (spearman_low, spearman_high) = map(stats.percentile_interval, (pearson, spearman))
    return {"pearson": _pearson(pa, pb).item(), "pearson_low": pearson_low.item(),
            "pearson_high": pearson_high.item(), "spearman": _pearson(_rank(pa), _rank(pb)).item(),
            "spearman_low": spearman_low.item(), "spearman_high": spearman_high.item(),
            "null_mean": null.mean().item(), "null_high": null.quantile(0.975).item()}


def feature_tables(subject: Subject, sets: dict[str, Prompts],
                   features: Features, seed: int = 0,
                   layout: Layout = PAPER_LAYOUT) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Test 2: (the damage profiles, one row per unit; the correlations, one row per comparison)."""
    model, config, split = subject.model, subject.config, subject.split
    reference = LastPositionMLP(model, config, reference_tokens(split, 1000, seed),
                                None if layout.study else layout.adder)
    damage = {}
    for name, prompts in sets.items():
        damage[name], units = damage_matrix(model, config, prompts.tokens, config.task.answer(prompts.x, prompts.y),
                                            features, reference, layout)
    profiles = pd.DataFrame({"unit": units, **{name: d.mean(0).tolist() for name, d in damage.items()}})
    half = len(damage["const"]) // 2
    comparisons = [("const (split half)", damage["const"][:half], damage["const"][half:], "same")]
    comparisons += [(f"const vs {name}", damage["const"], d, "cross") for name, d in damage.items() if name != "const"]
    rows = []
    for name, a, b, kind in comparisons:
        stats = profile_correlation(a, b, seed) if a.shape[1] >= 3 else {}
        rows.append({"test": "feature transfer", "condition": name, "kind": kind, "units": a.shape[1],
                     "mean_damage_const": damage["const"].mean().item() if a.numel() else float("nan"),
                     **stats, "not_shared_prediction": 0.0})
    return profiles, pd.DataFrame(rows)


# -- 3. representation transfer: a probe fitted on constants --------------------------------------
def fourier_targets(x: torch.Tensor, p: int, keys: list[int]) -> torch.Tensor:
    """(N, 2K) cos and sin of ``2 pi k x / p`` for each key frequency (every frequency if none)."""
    ks = torch.tensor(keys or list(range(1, p // 2 + 1)), dtype=torch.float32)
    angle = 2 * torch.pi * x.float().unsqueeze(1) * ks / p
    return torch.cat([angle.cos(), angle.sin()], 1)


@dataclass
class RidgeProbe:
    """Linear map from an operand's term to its Fourier targets, decoded to the nearest value."""

    mean: torch.Tensor
    W: torch.Tensor
    codes: torch.Tensor  # (p, 2K) the targets of every value

    @classmethod
    def fit(cls, X: torch.Tensor, x: torch.Tensor, p: int, keys: list[int], ridge: float = 1e-2) -> "RidgeProbe":
        mean = X.mean(0)
        Xc = X - mean
        gram = Xc.T @ Xc
        lam = ridge * gram.diagonal().mean().clamp_min(1e-12)
        W = torch.linalg.solve(gram + lam * torch.eye(len(gram)), Xc.T @ fourier_targets(x, p, keys))
        return cls(mean, W, fourier_targets(torch.arange(p), p, keys))

    def predict(self, X: torch.Tensor) -> torch.Tensor:
        return ((X - self.mean) @ self.W @ self.codes.T).argmax(-1)


def constant_subspace(X: torch.Tensor, share: float = 0.95) -> torch.Tensor:
    """(k, d) orthonormal rows: the top principal directions of the centred terms X holding ``share``
    of their variance."""
    _, S, Vt = torch.linalg.svd(X - X.mean(0), full_matrices=False)
    cumulative = (S ** 2).cumsum(0) / (S ** 2).sum().clamp_min(1e-30)
    return Vt[: int((cumulative < share).sum()) + 1]


def captured_share(X: torch.Tensor, V: torch.Tensor, seed: int = 0, n_boot: int = BOOTSTRAP) -> tuple[float, float, float]:
    """Share of the centred variance of X inside the rows of V, with a 95 % bootstrap interval."""
    Xc = X - X.mean(0)
    inside, total = (Xc @ V.T).pow(2).sum(1), Xc.pow(2).sum(1)
    g = streams.derived_generator(seed, streams.SAME_MLP_TESTS, 14)
    idx = torch.randint(0, len(X), (n_boot, len(X)), generator=g)
    boot = inside[idx].sum(1) / total[idx].sum(1).clamp_min(1e-30)
    low, high = stats.percentile_interval(boot)
    return (inside.sum() / total.sum().clamp_min(1e-30)).item(), low.item(), high.item()


def probe_table(model: tl.Model, config: RunConfig, parts: dict, keys: list[int], seed: int = 0,
                layout: Layout = PAPER_LAYOUT) -> pd.DataFrame:
    """Test 3 (module doc), fitted on ``const_fit``'s operand terms: the probe's accuracy (``probe``) and
    the subspace share (``subspace``) on each test set, and the random-token control."""
    p, circ, iso = config.task.modulus, circuits(model, layout), layout.isolation

    def operand_terms(name: str, sides: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        prompts, dec = parts[name]
        X = torch.cat([term(dec, circ, prompts.source[:, k], iso) for k in sides])
        return X, torch.cat([prompts.x if k == 0 else prompts.y for k in sides])

    fit_X, fit_x = operand_terms("const_fit", (0, 1))
    probe, V = RidgeProbe.fit(fit_X, fit_x, p, keys), constant_subspace(fit_X)
    tests = {"held-out constants": ("const", (0, 1), "same"), "1-var left": ("var1_left", (0,), "cross"),
             "1-var right": ("var1_right", (1,), "cross"), "2-var": ("var2", (0, 1), "cross")}
    rows = []
    for name, (part, sides, kind) in tests.items():
        X, target = operand_terms(part, sides)
        rows.append(_row("probe", "both", name, kind, "value decoded", probe.predict(X) == target, 1.0 / p,
                         1.0 / p if kind == "cross" else 1.0, seed))
        value, low, high = captured_share(X, V, seed)
        rows.append({"test": "subspace", "side": "both", "condition": name, "kind": kind,
                     "metric": f"variance share in the constants' {len(V)}-dim subspace", "value": value,
                     "ci_low": low, "ci_high": high, "chance": len(V) / X.shape[1],
                     "not_shared_prediction": len(V) / X.shape[1] if kind == "cross" else 1.0, "n": len(X)})
    prompts, dec = parts["const"]
    X = term(dec, circ, random_positions(prompts, seed, 3), iso)
    rows.append(_row("probe", "both", "random-token terms (constant prompts)", "control", "left value decoded",
                     probe.predict(X) == prompts.x, 1.0 / p, 1.0 / p, seed))
    return pd.DataFrame(rows)


# -- can the model do what a test reads? ----------------------------------------------------------

# the prompt sets each probe / feature-transfer condition reads (competence_table's names)
CONDITION_SETS = {"1-var left": ("var1_left",), "1-var right": ("var1_right",), "2-var": ("var2",),
                  "const vs 1-var": ("var1_left", "var1_right"), "const vs 2-var": ("var2",)}
SET_NAMES = {"var1_left": "1-var left", "var1_right": "1-var right", "var2": "2-var"}


def competence_table(model: tl.Model, config: RunConfig, sets: dict[str, Prompts]) -> pd.DataFrame:
    """The model's own accuracy on each variable prompt set the tests read (``var1_left``,
    ``var1_right``, ``var2``): the answer ``x + y mod p`` at ``=``, one row per set."""
    rows = []
    for name in SET_NAMES:
        prompts = sets[name]
        hits = predictions(answer_logits(model, config.model, prompts.tokens)) == config.task.answer(prompts.x, prompts.y)
        rows.append({"set": name, "accuracy": hits.float().mean().item(), "n": len(hits)})
    return pd.DataFrame(rows)


def unable(competence: pd.DataFrame | None, condition: str) -> list[str]:
    """The prompt sets a probe or feature-transfer ``condition`` reads that the model answers below
    ``THRESHOLDS["reference_min"]``, as ``"1-var right 0.073"``: it does not yet route those operands, so
    a term that does not look like a constant's says nothing about the adder there. Empty where it can."""
    if competence is None or competence.empty:
        return []
    accuracy = dict(zip(competence["set"], competence["accuracy"]))
    return [f"{SET_NAMES[s]} {accuracy[s]:.3f}" for s in CONDITION_SETS.get(condition, ())
            if accuracy[s] < THRESHOLDS["reference_min"]]


def _short(cross: pd.DataFrame, ok: pd.Series, competence: pd.DataFrame | None) -> tuple[pd.DataFrame, list[str]]:
    """The conditions short of their bar, split: those the model can do (their prompts answered,
    :func:`unable`), which fail the test, and the prompt sets that leave the others untested."""
    weak = cross["condition"].map(lambda c: unable(competence, c))
    short = ~ok & weak.map(bool)
    return cross[~ok & ~weak.map(bool)], sorted({w for ws in weak[short] for w in ws})


def _untested_reason(weak: list[str]) -> str:
    return (f"the model answers {', '.join(weak)} prompts below {THRESHOLDS['reference_min']}: the conditions "
            f"short of their bar there test nothing yet")


# -- the verdict ---------------------------------------------------------------------------------
def main_isolation(table: pd.DataFrame) -> str:
    """The isolation the verdict reads: :data:`ISOLATION` where measured, else the router isolation."""
    return ISOLATION if (table["isolation"] == ISOLATION).any() else ROUTER_ISOLATION


def interchange_conditions(table: pd.DataFrame) -> pd.DataFrame:
    """Each cross-type interchange (per side, :data:`ISOLATION`) read against its reference: the
    lower of the two same-type interchanges of its donor and receiver types (``a->b`` against
    ``a->a`` and ``b->b``), and its status (see the module doc). One row per condition."""
    t = THRESHOLDS
    main = table[table["isolation"] == main_isolation(table)]
    same = {(row.side, row.condition): row.value for row in main[main["kind"] == "same"].itertuples()}
    rows = []
    for row in main[main["kind"] == "cross"].itertuples():
        donor, receiver = row.condition.split("->")
        references = {f"{k}->{k}": same[(row.side, f"{k}->{k}")] for k in (donor, receiver)}
        weakest = min(references, key=references.get)
        reference = references[weakest]
        status = ("inconclusive" if reference < t["reference_min"] else "passed"
                  if row.value >= t["interchange_ratio"] * reference
                  and row.ci_low >= t["interchange_ci_ratio"] * reference else "failed")
        rows.append({"side": row.side, "condition": row.condition, "value": row.value, "ci_low": row.ci_low,
                     "ci_high": row.ci_high, "reference": reference, "reference_condition": weakest,
                     "share_of_reference": row.value / reference if reference > 0 else float("nan"),
                     "status": status})
    return pd.DataFrame(rows)


def judge_interchange(table: pd.DataFrame) -> dict:
    """Test 1's status from :func:`interchange_conditions` and the controls (module doc), with the
    condition that decided it, the lowest score and the weakest reference."""
    t = THRESHOLDS
    main = table[table["isolation"] == main_isolation(table)]
    controls = main[main["kind"] == "control"]
    conditions = interchange_conditions(table)
    failed = conditions[conditions["status"] == "failed"]
    weak = conditions[conditions["status"] == "inconclusive"]
    leaky = bool((controls["ci_high"] > t["control_max"]).any())
    if not failed.empty:
        deciding = failed.loc[failed["share_of_reference"].idxmin()]
        status = "failed"
        reason = (f"{deciding['condition']} ({deciding['side']}) reaches {deciding['value']:.3f} "
                  f"[{deciding['ci_low']:.3f}, {deciding['ci_high']:.3f}] against its reference "
                  f"{deciding['reference_condition']} = {deciding['reference']:.3f} (needs "
                  f"{t['interchange_ratio']} x, lower CI {t['interchange_ci_ratio']} x)")
    elif not weak.empty:
        deciding = weak.loc[weak["reference"].idxmin()]
        status = "inconclusive"
        blocked = ("none of the cross-type swaps tests anything" if len(weak) == len(conditions) else
                   ", ".join(f"{c['condition']} ({c['side']})" for _, c in weak.iterrows()) + " test nothing")
        reason = (f"weak reference: {deciding['reference_condition']} ({deciding['side']}) = "
                  f"{deciding['reference']:.3f} < {t['reference_min']}: the model cannot yet swap that type's "
                  f"operand within its own prompts, so {blocked}")
    else:
        deciding = conditions.loc[conditions["share_of_reference"].idxmin()]
        status, reason = "passed", "every cross-type swap reaches its reference"
    lowest = conditions.loc[conditions["value"].idxmin()]
    weakest = conditions.loc[conditions["reference"].idxmin()]
    if leaky:  # the method moves something it should not: neither a pass nor a failure means anything
        status = "inconclusive"
        reason = f"a control's upper CI is {controls['ci_high'].max():.3f} > {t['control_max']}"
    const = main[main["condition"] == "const->const"]["value"].min()
    return {"status": status, "reason": reason,
            "effect": float(deciding["value"]), "ci": [float(deciding["ci_low"]), float(deciding["ci_high"])],
            "deciding_condition": f"{deciding['condition']} ({deciding['side']})",
            "reference": float(deciding["reference"]),
            "reference_condition": f"{deciding['reference_condition']} ({deciding['side']})",
            "lowest_condition": f"{lowest['condition']} ({lowest['side']})", "lowest_value": float(lowest["value"]),
            "weakest_reference": float(weakest["reference"]),
            "weakest_reference_condition": f"{weakest['reference_condition']} ({weakest['side']})",
            "const_to_const": float(const), "conditions": conditions.to_dict(orient="records"),
            "controls_max_ci_high": float(controls["ci_high"].max()), "chance": float(main["chance"].iloc[0]),
            "rule": f"each cross-type a->b (per side) against its reference, the lower of a->a and b->b: "
                    f"inconclusive if that reference < {t['reference_min']}, else passed if value >= "
                    f"{t['interchange_ratio']} x reference and lower CI >= {t['interchange_ci_ratio']} x "
                    f"reference; "
                    f"the test fails if any condition fails, else is inconclusive if any is (or a control's "
                    f"upper CI > {t['control_max']})"}


def _status_of(failed: bool, untested: list[str], inconclusive: bool) -> str:
    """The test's own reasons first; then failed on a condition the model can do; inconclusive where a
    short condition's prompts the model cannot answer yet; else passed."""
    return "inconclusive" if inconclusive else "failed" if failed else "inconclusive" if untested else "passed"


def judge_features(table: pd.DataFrame, competence: pd.DataFrame | None = None) -> dict:
    t = THRESHOLDS
    cross = table[table["kind"] == "cross"]
    if cross.empty or "pearson_low" not in cross or cross["pearson_low"].isna().any():
        return {"status": "inconclusive", "effect": None, "ci": None,
                "rule": "no key frequency (or fewer than 3 units) on the constant grid: nothing to transfer"}
    failing, untested = _short(cross, cross["pearson_low"] >= t["damage_correlation"], competence)
    pick = failing if len(failing) else cross
    deciding = pick.loc[pick["pearson_low"].idxmin()]
    weak = float(deciding["mean_damage_const"]) < t["damage_min"]
    status = _status_of(len(failing) > 0, untested, weak)
    return {"status": status, **({"reason": _untested_reason(untested)} if untested and status == "inconclusive"
                                 and not weak else {}),
            "effect": float(deciding["pearson"]),
            "ci": [float(deciding["pearson_low"]), float(deciding["pearson_high"])],
            "deciding_condition": deciding["condition"], "null_high": float(deciding["null_high"]),
            "reference_split_half": float(table[table["kind"] == "same"]["pearson"].iloc[0]),
            "mean_damage_const": float(deciding["mean_damage_const"]),
            "rule": f"every const-vs-variable damage-profile Pearson lower CI >= {t['damage_correlation']}; "
                    f"inconclusive if the mean damage on constants < {t['damage_min']}, or where a short "
                    f"condition's prompts are answered below {t['reference_min']}"}


def judge_probe(table: pd.DataFrame, competence: pd.DataFrame | None = None) -> dict:
    """Test 3 passes when the probe decodes the variables AND their terms lie in the constants' subspace."""
    t = THRESHOLDS
    out, untested = {}, set()
    for metric in ("probe", "subspace"):
        part = table[table["test"] == metric]
        reference = float(part[part["kind"] == "same"]["value"].iloc[0])
        cross = part[part["kind"] == "cross"]
        failing, short = _short(cross, cross["ci_low"] >= t["probe_ratio"] * reference, competence)
        untested.update(short)
        pick = failing if len(failing) else cross
        deciding = pick.loc[pick["ci_low"].idxmin()]
        out[metric] = {"passed": not len(failing) and not short, "failed": len(failing) > 0,
                       "reference": reference, "effect": float(deciding["value"]),
                       "ci": [float(deciding["ci_low"]), float(deciding["ci_high"])],
                       "deciding_condition": deciding["condition"]}
    control = table[table["kind"] == "control"]
    leaky = bool((control["ci_high"] > t["control_max"]).any())
    probe, subspace = out["probe"], out["subspace"]
    main = subspace if probe["passed"] or subspace["failed"] and not probe["failed"] else probe
    inconclusive = probe["reference"] < t["reference_min"] or leaky
    status = _status_of(probe["failed"] or subspace["failed"], sorted(untested), inconclusive)
    return {"status": status, **({"reason": _untested_reason(sorted(untested))} if untested
                                 and status == "inconclusive" and not inconclusive else {}),
            "effect": main["effect"], "ci": main["ci"], "deciding_condition": f"{main['deciding_condition']} "
            f"({'subspace share' if main is subspace else 'probe accuracy'})",
            "reference_heldout_constants": main["reference"], "probe": probe, "subspace": subspace,
            "control_ci_high": float(control["ci_high"].max()), "chance": float(table["chance"].iloc[0]),
            "rule": f"for every variable set, probe accuracy and subspace share lower CI >= {t['probe_ratio']} x "
                    f"held-out constants'; inconclusive if the probe's held-out constant accuracy < "
                    f"{t['reference_min']} "
                    f"or the control's upper CI > {t['control_max']}, or where a short condition's prompts are "
                    f"answered below {t['reference_min']}"}


def reconcile(tests: dict) -> dict:
    """The tests, with a probe-transfer failure made *inconclusive* where the isolation's const->const
    interchange is below ``THRESHOLDS["reference_min"]``: a term that carries no constant operand is not
    how operands reach the adder (a 3-layer chain model's router term swaps none: 0.000)."""
    probe, carried = tests["probe_transfer"], tests["interchange"].get("const_to_const")
    if probe["status"] != "failed" or carried is None or carried >= THRESHOLDS["reference_min"]:
        return tests
    reason = (f"the isolation's terms do not carry a constant operand into the adder (const->const interchange "
              f"{carried:.3f} < {THRESHOLDS['reference_min']}): the probe's shortfall on "
              f"{probe['deciding_condition']} ({probe['effect']:.3f}) tests nothing")
    return {**tests, "probe_transfer": {**probe, "status": "inconclusive", "reason": reason}}


def incompetence(competence: pd.DataFrame | None) -> str | None:
    """Why no verdict can be read (the competence gate of the module doc), or None: the variable prompt
    sets the model answers below :data:`compose_lens.training.evaluate.LEARNED`."""
    if competence is None or competence.empty:
        return None
    short = competence[competence["accuracy"] < LEARNED]
    if short.empty:
        return None
    sets = ", ".join(f"{SET_NAMES[row.set]} {row.accuracy:.3f}" for row in short.itertuples())
    return (f"the model does not answer the prompts the tests are about ({sets} < {LEARNED}): it has not learned "
            f"to bring a variable's value to the adder, so no test says how it would")


def verdict(tests: dict) -> str:
    """``supported`` if every test passed, ``not supported`` if any failed, else ``inconclusive``."""
    states = [v["status"] for v in tests.values()]
    if all(s == "passed" for s in states):
        return "supported"
    return "not supported" if "failed" in states else "inconclusive"


def verdict_reason(tests: dict) -> str:
    """One line: the tests that decided :func:`verdict` (the failed ones, else the inconclusive
    ones) and why."""
    decided = "failed" if any(v["status"] == "failed" for v in tests.values()) else "inconclusive"
    parts = []
    for name, test in tests.items():
        if test["status"] != decided:
            continue
        why = test.get("reason")
        if why is None and test.get("effect") is not None:
            why = f"{test.get('deciding_condition')}: {test['effect']:.3f}"
        parts.append(f"{name} {decided} ({why or test.get('rule')})")
    return "; ".join(parts) or "every test passed"


# -- everything ---------------------------------------------------------------------------------
def check_layout(config: RunConfig) -> None:
    """Refuse (one line) a model the same-MLP tests cannot read (:func:`compose_lens.core.coverage.same_mlp_problem`:
    one without an MLP). A model with normalisation is read, and its verdict is inconclusive
    (:func:`layout_of`: its adder's input is not a sum of the operands' terms)."""
    reason = coverage.same_mlp_problem(config.model)
    if reason:
        raise ComposeLensError(reason)


def same_mlp_tables(subject: Subject, seed: int = 0, *,
                    n: int = 400, layout: Layout | None = None) -> dict[str, pd.DataFrame]:
    """The three tests as DataFrames: ``interchange``, ``damage_profiles``, ``feature_transfer``, ``probe``;
    none (an empty dict) where a role is not located (``layout``: :func:`layout_of`, found here if None)."""
    model, config, split = subject.model, subject.config, subject.split
    layout = layout or layout_of(subject, seed)
    if layout.missing:
        return {}
    with tl.evaluating(model):
        sets = {"const": make_prompts(split, "const", "left", n, seed),
                "const_fit": make_prompts(split, "const", "right", n, seed),
                **variable_sets(split, n, seed), "random": make_prompts(split, "random", "left", n, seed)}
        parts = {name: (prompts, decompose(model, config.model, prompts.tokens, layout=layout))
                 for name, prompts in sets.items()}
        features = constant_features(subject, seed, layer=layout.adder)
        damage_sets = {"const": sets["const"], "1-var": _join(sets["var1_left"], sets["var1_right"]),
                       "2-var": sets["var2"]}
        profiles, transfer = feature_tables(subject, damage_sets, features, seed, layout)
        return {"interchange": interchange_table(model, config, parts, seed, layout), "damage_profiles": profiles,
                "feature_transfer": transfer,
                "probe": probe_table(model, config, parts, features.keys, seed, layout),
                "competence": competence_table(model, config, sets)}


def _join(a: Prompts, b: Prompts) -> Prompts:
    half = len(a.x) // 2
    return Prompts(a.kind, "both", *(torch.cat([u[:half], v[: len(v) - half]])
                                     for u, v in ((a.tokens, b.tokens), (a.x, b.x), (a.y, b.y), (a.source, b.source))))


def variable_sets(split: Split, n: int, seed: int = 0) -> dict[str, Prompts]:
    """The variable prompt sets the tests read (and :func:`competence_table` scores)."""
    return {name: make_prompts(split, kind, side, n, seed)
            for name, kind, side in (("var1_left", "var1", "left"), ("var1_right", "var1", "right"),
                                     ("var2", "var2", "left"))}


def same_mlp_run(subject: Subject, seed: int = 0, *, n: int = 400,
                 layout: Layout | None = None) -> tuple[dict[str, pd.DataFrame], dict]:
    """The tests' tables and the report (:func:`same_mlp_report`). Where a role is not located, the model
    does not answer the variable prompts or does not compose (the gates of the module doc), the tests are
    not run: the tables hold the ``competence`` table alone (none where a role is missing)."""
    model, config, split = subject.model, subject.config, subject.split
    layout = layout or layout_of(subject, seed)
    why, competence = layout.missing, None
    if not why:
        with tl.evaluating(model):
            competence = competence_table(model, config, variable_sets(split, n, seed))
        why = incompetence(competence) or composition_gap(subject, seed)
    if why:
        tables = {} if competence is None else {"competence": competence}
        test = {"status": "inconclusive", "reason": why, "effect": None, "ci": None}
        tests = {name: dict(test) for name in ("interchange", "feature_transfer", "probe_transfer")}
        return tables, _report(config, seed, n, layout, None, tests, "inconclusive", why, [], tables)
    tables = same_mlp_tables(subject, seed, n=n, layout=layout)
    competence = tables.get("competence")
    tests = reconcile({"interchange": judge_interchange(tables["interchange"]),
                       "feature_transfer": judge_features(tables["feature_transfer"], competence),
                       "probe_transfer": judge_probe(tables["probe"], competence)})
    controls = tables["interchange"][tables["interchange"]["kind"].isin(["control", "reference"])]
    return tables, _report(config, seed, n, layout, layout.isolation, tests, verdict(tests), verdict_reason(tests),
                           controls.to_dict(orient="records"), tables)


def same_mlp_report(subject: Subject, seed: int = 0, *, n: int = 400, layout: Layout | None = None) -> dict:
    """The verdict and every test's effect, interval, rule and controls, JSON-safe (``same_mlp.json``):
    :func:`same_mlp_run`'s report; ``components`` says which MLP and heads the tests read (:class:`Layout`).
    Where the tests were not run (a gate of the module doc): verdict ``inconclusive`` and
    ``verdict_reason`` says why."""
    return same_mlp_run(subject, seed, n=n, layout=layout)[1]


def _report(config: RunConfig, seed: int, n: int, layout: Layout, isolation: str | None, tests: dict, said: str,
            reason: str, controls: list, tables: dict) -> dict:
    """``same_mlp.json``: the verdict ``said`` and its reason, the tests, thresholds, controls and tables."""
    return json_safe({
        **provenance(config, seed), "n_prompts": n, "isolation": isolation, "verdict": said, "verdict_reason": reason,
        "components": layout.to_dict(), "tests": tests, "thresholds": dict(THRESHOLDS), "controls": controls,
        "tables": {name: table.to_dict(orient="records") for name, table in tables.items()}})


# Names of same_mlp.json before the references were called what they are (module doc): old -> new.
RENAMED = {"worst_condition": "deciding_condition", "ceiling": "reference", "ceiling_condition": "reference_condition",
           "ceiling_const_to_const": "const_to_const", "ceiling_split_half": "reference_split_half",
           "ceiling_heldout_constants": "reference_heldout_constants", "share_of_ceiling": "share_of_reference"}
RENAMED_THRESHOLDS = {"ceiling": "reference_min"}


def _renamed(record: dict, names: dict) -> dict:
    return {names.get(k, k): v for k, v in record.items()}


def upgrade(report: dict) -> dict:
    """``report`` (a same_mlp.json) with the names of an older one (:data:`RENAMED`: ``worst_condition``,
    ``ceiling``, ...) read as today's; a report with today's names comes back as it is."""
    tests = {}
    for name, test in (report.get("tests") or {}).items():
        test = _renamed(test, RENAMED)
        if "conditions" in test:
            test["conditions"] = [_renamed(c, RENAMED) for c in test["conditions"]]
        for part in ("probe", "subspace"):
            if isinstance(test.get(part), dict):
                test[part] = _renamed(test[part], RENAMED)
        tests[name] = test
    out = {**report, "tests": tests}
    if isinstance(report.get("thresholds"), dict):
        out["thresholds"] = _renamed(report["thresholds"], RENAMED_THRESHOLDS)
    return out


REFERENCES = ("reference", "reference_split_half", "reference_heldout_constants")  # each test's own reference


def verdict_table(report: dict) -> pd.DataFrame:
    """One row per test: status, effect, interval, the condition that decided it and the reference
    score it was read against (for printing). Reads older reports too (:func:`upgrade`)."""
    rows = []
    for name, test in upgrade(report)["tests"].items():
        reference = next((test[k] for k in REFERENCES if k in test), None)
        ci = test.get("ci") or [None, None]
        rows.append({"test": name, "status": test["status"], "effect": test.get("effect"), "ci_low": ci[0],
                     "ci_high": ci[1], "condition": test.get("deciding_condition"), "reference": reference})
    return pd.DataFrame(rows)
