"""Which components play the study's roles, in any architecture.

The study's circuit has three roles. In the paper's model each is one component
(paper layer 1 = ``blocks.0``, layer 2 = ``blocks.1``); in another architecture
(more layers, more heads, MLPs elsewhere) any head or MLP may play one, or none.
:func:`locate` scores every candidate and picks, per role, the best one whose
score reaches the role's threshold, or none:

==========  ===========================================================  =========
role        score of a candidate (in [0, 1])                             threshold
==========  ===========================================================  =========
binder      head (layer, h): mean attention weight a context value       0.5
            position puts on the token before it, its variable
            (:func:`~compose_lens.analysis.probes.prev_token_attention_mass`
            for every head)
router      head (layer, h): over 2-var queries, the attention mass      0.25
            from ``=`` (the last position) on the two positions holding
            the operands' values, less twice its mean mass on one of the
            other (not queried) context values: both values sit in the
            context, so a head that reads the operand tokens scores ~0,
            and one that spreads over every value alike scores ~0 too
gatherer    head (layer, h) below the router's layer (any layer when     0.4
            no router is located): mean attention mass from ``=`` on
            the two operand positions (``seq_len - 3``, ``seq_len - 2``):
            the head that brings the queried variables to ``=`` so the
            router can look for their values (SPEC 6.2, "``=`` gathers
            the operands (layer 1)"; in the paper the binder's head)
adder       MLP of a block (in ``mlp_blocks``, weights not all zero):    0.2
            ``key_frequency_strength x ablation_drop`` on the p^2
            constant-operand grid: the share of its neurons' variance
            in their key frequencies (:mod:`.fourier`) times the
            accuracy lost when its output is zeroed at every position
==========  ===========================================================  =========

**Two gates before a head is named binder or router.** An attention score is not a role: a model
that answers a variable's prompt by picking any context value (a stalled run) earns router scores
too, and a head can attend like a router and write nothing. So a binder or router is located only

1. in a model that **binds** (:func:`compose_lens.training.evaluate.learned`: its 1-var accuracy reaches
   0.9; otherwise both roles are "none located" with that reason; likewise an adder only in a
   model that computes the operation, 0-var at 0.9), and
2. where the head's **causal test** passes against the null of heads that lack the role: its
   output mean-ablated (the router at ``=``, the binder at every context position), the model's
   accuracy on variable prompts must fall by more than :data:`CAUSAL_NULL` (the largest fall any
   head without the role causes in the verdict zoo, ``experiments/results/zoo``): the lower end of
   the fall's 95 % interval above it. Candidates are tried in the order of their attention score;
   the first that passes plays the role, and ``causal`` of the candidates table holds every fall.

The product makes the adder an MLP that both computes with Fourier features and is needed for the
sum: an MLP whose removal costs nothing, or one the answer needs but that shows no frequency
structure, does not add. The paper model locates ``blocks.0`` head 0, ``blocks.1`` head 0 and
``blocks.1.mlp`` (and ``blocks.0`` head 0 gathers). The gatherer is not one of the three roles but
the head the ``=``-to-operands measure reads (:func:`circuit_heads`).

The Fourier analyses read :func:`fourier_subject`: the located adder; where no MLP reaches the
threshold (an untrained model, a stalled run) the best-scoring MLP, flagged as not adding.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from compose_lens.analysis import fourier, probes
from compose_lens.analysis.activations import torch_threads
from compose_lens.analysis.probes import probe_batch, target_mass, value_positions, value_targets
from compose_lens.core.config import RunConfig, TaskConfig
from compose_lens.data.split import Split
from compose_lens.core import capabilities
from compose_lens.core import stats
from compose_lens.core.errors import ComposeLensError
from compose_lens.data.sampler import make_pool, present_pools
from compose_lens.training.evaluate import (BINDING_POOLS, COMPOSITION_POOL, LEARNED, Learned, learned as model_learned,
                                   predictions)
from compose_lens.model.forward import ANSWER, Forward, Site
from compose_lens.model import tl
from compose_lens.training.subject import Subject

ROLES = ("binder", "router", "adder")
NULL_FILE = Path(__file__).resolve().parents[1] / "assets" / "role_null.json"  # written by experiments/zoo.py
CAUSAL_NULL: dict[str, float] = json.loads(NULL_FILE.read_text())["null"]
CAUSAL_MEASURES = {"binder": "fall of the accuracy on variable prompts with the head's output mean-ablated at "
                             "every context position",
                   "router": "fall of the accuracy on variable prompts with the head's output mean-ablated at ="}
THRESHOLDS = {"binder": 0.5, "router": 0.25, "adder": 0.2, "gatherer": 0.4}
MEASURES = {
    "binder": "mean attention from a context value position to the token before it",
    "router": "attention mass from = on the operands' value positions less twice the mean mass on "
              "another context value, 2-var queries",
    "adder": "key-frequency strength x accuracy drop when ablated, constant-operand grid",
    "gatherer": "attention mass from = on the two operand positions, heads below the router's layer",
}


@dataclass(frozen=True)
class Role:
    """The component that plays a role (``component`` None: nothing reaches ``threshold``;
    ``score`` is then the best candidate's)."""

    role: str
    component: str | None  # "blocks.0 head 0", "blocks.1.mlp"
    layer: int | None
    head: int | None
    score: float
    threshold: float
    why: str | None = None  # why none is located where the scores alone do not say (a gate)
    causal: tuple[float, float, float] | None = None  # the located head's causal fall and its interval

    def line(self) -> str:
        if self.component is None and self.why:
            return f"{self.role}: none ({self.why})"
        if self.component is None and self.score != self.score:  # NaN: nothing could play it (no MLP)
            return f"{self.role}: none (no candidate)"
        if self.component is None:
            return f"{self.role}: none (best score {self.score:.3f} < {self.threshold})"
        causal = "" if self.causal is None else (f"; ablated, variable prompts fall {self.causal[0]:.3f} "
                                                 f"[{self.causal[1]:.3f}, {self.causal[2]:.3f}] > null "
                                                 f"{CAUSAL_NULL[self.role]:.3f}")
        return f"{self.role}: {self.component} (score {self.score:.3f} >= {self.threshold}{causal})"


@dataclass(frozen=True)
class Location:
    """The three roles and every candidate's scores (``candidates``: one row per role and
    component; the adder rows add ``key_frequency_strength``, ``ablation_drop``, ``key_frequencies``)."""

    binder: Role
    router: Role
    adder: Role
    candidates: pd.DataFrame
    gatherer: Role | None = None  # the head from = onto the operands (see the module doc)
    learned: Learned | None = None  # what the model has learned (the binding gate)

    def roles(self) -> list[Role]:
        return [self.binder, self.router, self.adder]

    def to_dict(self) -> dict:
        every = self.roles() + ([self.gatherer] if self.gatherer is not None else [])
        return {"roles": {r.role: {"component": r.component, "layer": r.layer, "head": r.head,
                                   "score": r.score, "threshold": r.threshold, "measure": MEASURES[r.role],
                                   "why_none": r.why, "causal": None if r.causal is None else list(r.causal),
                                   "causal_measure": CAUSAL_MEASURES.get(r.role), "causal_null": CAUSAL_NULL.get(r.role)}
                          for r in every},
                "learned": None if self.learned is None else self.learned.to_dict(),
                "candidates": self.candidates.to_dict(orient="records")}


# -- the forward pass --------------------------------------------------------------------------


@dataclass
class Trace:
    patterns: list[torch.Tensor]  # per layer (B, H, n, n)
    mlp_post: dict[int, torch.Tensor]  # per MLP block, at the last position (B, d_mlp)
    logits: torch.Tensor  # (B, d_vocab_out) at the last position


def mlp_blocks(model: tl.Model, config: RunConfig) -> list[int]:
    """The blocks with an MLP that exists: in ``mlp_blocks`` and not all zero."""
    params = tl.parameters(model)
    return [layer for layer in config.model.mlp_blocks
            if all(bool(params[f"blocks.{layer}.mlp.{p}.weight"].detach().abs().max() > 0) for p in ("in", "out"))]


def trace(model: tl.Model, config: RunConfig, tokens: torch.Tensor, ablate: int | None = None,
          chunk: int = 1024) -> Trace:
    """Every layer's attention pattern, every MLP's neurons at ``=`` and the logits, on CPU in float32
    (:class:`compose_lens.model.forward.Forward`); ``ablate``: a block whose MLP output is zeroed everywhere."""
    cfg = config.model
    patterns = [Site(f"blocks.{layer}.attn.hook_pattern") for layer in range(cfg.n_layers)]
    posts = {layer: Site(f"blocks.{layer}.mlp.hook_post", ANSWER) for layer in cfg.mlp_blocks}
    logits = Site("logits", ANSWER)
    edits = {} if ablate is None else {f"blocks.{ablate}.hook_mlp_out": torch.zeros_like}
    found = Forward(model, cfg).read(tokens, [*patterns, *posts.values(), logits], chunk, edits)
    return Trace([found[site] for site in patterns], {layer: found[site] for layer, site in posts.items()},
                 found[logits])


# -- the scores ----------------------------------------------------------------------------------


def head_scores(subject: Subject, n: int = 600, seed: int = 0) -> pd.DataFrame:
    """Binder and router score of every head (see the module doc), one row per (role, head)."""
    model, config, split = subject.model, subject.config, subject.split
    tokens = probe_batch(split, n, seed).tokens
    return head_scores_of(config.task, tokens, trace(model, config, tokens).patterns)


def head_scores_of(task: TaskConfig, tokens: torch.Tensor, patterns: list[torch.Tensor]) -> pd.DataFrame:
    """:func:`head_scores` of sequences already traced: ``tokens`` (B, n) and each layer's attention
    ``patterns`` (B, heads, n, n). ``compose-lens compare`` calls it on resamples of the prompts."""
    seq, pos, var = value_positions(task, tokens)
    two_var = (tokens[:, -3] >= task.first_var_token) & (tokens[:, -2] >= task.first_var_token)
    targets = value_targets(task, tokens)[two_var]
    values = torch.zeros(tokens.shape, dtype=torch.bool)
    values[seq, pos] = True
    distractors = values[two_var].scatter(1, targets, False)  # context values not queried
    n_distractors = distractors.sum(1).clamp_min(1)
    m = task.seq_len
    operands = torch.tensor([m - 3, m - 2]).expand(len(tokens), 2)
    rows = []
    for layer, pattern in enumerate(patterns):
        for head in range(pattern.shape[1]):
            component = f"blocks.{layer} head {head}"
            binder = pattern[seq, head, pos, var].mean().item()
            last = pattern[two_var, head, -1]  # (B2, n): from =
            spread = (last * distractors).sum(1) / n_distractors
            router = (target_mass(last, targets) - 2 * spread).mean().item() if two_var.any() else float("nan")
            gatherer = target_mass(pattern[:, head, -1], operands).mean().item()
            rows += [{"role": role, "component": component, "layer": layer, "head": head, "score": score}
                     for role, score in (("binder", binder), ("router", router), ("gatherer", gatherer))]
    return pd.DataFrame(rows)


def choose_gatherer(table: pd.DataFrame, router: Role) -> Role:
    """The gatherer among the heads below the router's layer (every head when no router is located)."""
    rows = table[table["role"] == "gatherer"]
    if router.component is not None:
        rows = rows[rows["layer"] < router.layer]
    return _choose("gatherer", rows)


def adder_scores(subject: Subject, seed: int = 0) -> pd.DataFrame:
    """Adder score of every MLP that exists, one row per MLP; computed once per subject, seed and thread
    count (:meth:`~compose_lens.training.subject.Subject.once`), the table the caller's own copy."""
    model, config, split = subject.model, subject.config, subject.split
    p = config.task.modulus

    def score() -> pd.DataFrame:
        tokens = fourier.grid_tokens(split, "constant", seed)
        labels = config.task.answer(torch.arange(p).repeat_interleave(p), torch.arange(p).repeat(p))
        blocks = mlp_blocks(model, config)
        if not blocks:
            return pd.DataFrame(columns=["role", "component", "layer", "head", "score", "key_frequency_strength",
                                         "ablation_drop", "key_frequencies"])
        clean = trace(model, config, tokens)
        accuracy = (clean.logits.argmax(-1) == labels).float().mean().item()
        rows = []
        for layer in blocks:
            post = clean.mlp_post[layer].view(p, p, -1)
            keys = fourier.key_frequencies(post)
            strength = fourier.key_frequency_strength(post, keys)
            ablated = trace(model, config, tokens, ablate=layer).logits
            drop = max(0.0, accuracy - (ablated.argmax(-1) == labels).float().mean().item())
            rows.append({"role": "adder", "component": f"blocks.{layer}.mlp", "layer": layer, "head": None,
                         "score": strength * drop, "key_frequency_strength": strength, "ablation_drop": drop,
                         "key_frequencies": keys})
        return pd.DataFrame(rows)
    return copy.deepcopy(subject.once(f"adder scores threads={torch.get_num_threads()}", seed, score))


# -- the causal gate -------------------------------------------------------------------------------


def variable_prompts(split: Split, n: int = 300, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts a binder and a router are needed for: the binding pools and the 2-var training pool
    (variables in allowed slots, training pairs), ``n`` of each."""
    names = [name for name in (*BINDING_POOLS, COMPOSITION_POOL) if name in present_pools(split)]
    batches = [make_pool(split, name, n, seed + 7) for name in names]  # not the pools learned() reads
    return torch.cat([b.tokens for b in batches]), torch.cat([b.labels for b in batches])


def _mean_over_prompts(context_len: int | None):
    """The mean-ablation edit: every prompt's value replaced by the mean over the prompts (at each
    position; ``context_len``: at the context's positions only)."""
    def edit(act: torch.Tensor) -> torch.Tensor:
        if context_len is None:
            return act.mean(0, keepdim=True).expand_as(act)
        out = act.clone()
        out[:, :context_len] = act[:, :context_len].mean(0, keepdim=True)
        return out
    return edit


def causal_fall(forward: Forward, role: str, layer: int, head: int, tokens: torch.Tensor, labels: torch.Tensor,
                context_len: int, clean: torch.Tensor, seed: int = 0) -> tuple[float, float, float]:
    """The fall of the accuracy on ``tokens`` when the head's output is mean-ablated where ``role`` acts
    (the router at ``=``, the binder at every context position), with its 95 % bootstrap interval
    (paired: the same prompts clean and ablated). ``clean``: the clean hits (N,) bool."""
    site = Site(f"blocks.{layer}.attn.hook_z", ANSWER if role == "router" else None, head)
    edit = _mean_over_prompts(None if role == "router" else context_len)
    ablated = predictions(forward.edited_logits(tokens, {site: edit}, chunk=len(tokens))) == labels
    return stats.bootstrap_interval(np.mean, (clean.float() - ablated.float()).numpy(), seed=seed)


def _choose_causal(role: str, table: pd.DataFrame, fall) -> tuple[Role, dict]:
    """The first head, in order of attention score among those reaching the role's threshold, whose causal
    fall's lower bound is above :data:`CAUSAL_NULL`; ``fall(layer, head)`` computes it. Returns the role
    and every fall computed, by component."""
    rows = table[table["role"] == role].dropna(subset=["score"]).sort_values("score", ascending=False, kind="stable")
    threshold, null = THRESHOLDS[role], CAUSAL_NULL[role]
    if rows.empty:
        return Role(role, None, None, None, float("nan"), threshold), {}
    falls = {}
    for row in rows[rows["score"] >= threshold].itertuples():
        falls[row.component] = fall(int(row.layer), int(row.head))
        if falls[row.component][1] > null:
            return Role(role, row.component, int(row.layer), int(row.head), float(row.score), threshold,
                        causal=falls[row.component]), falls
    best = float(rows["score"].iloc[0])
    if not falls:
        return Role(role, None, None, None, best, threshold), falls
    top = max(falls.items(), key=lambda kv: kv[1][0])
    return Role(role, None, None, None, best, threshold,
                why=f"{len(falls)} head(s) attend like a {role} (score >= {threshold}), but none is needed: "
                    f"mean-ablated, the largest fall of the variable prompts' accuracy is {top[1][0]:.3f} "
                    f"[{top[1][1]:.3f}, {top[1][2]:.3f}] ({top[0]}), not above the null {null:.3f} of heads "
                    f"without the role"), falls


def _choose(role: str, table: pd.DataFrame) -> Role:
    rows = table[table["role"] == role].dropna(subset=["score"])
    threshold = THRESHOLDS[role]
    if rows.empty:
        return Role(role, None, None, None, float("nan"), threshold)
    best = rows.loc[rows["score"].idxmax()]
    head = None if pd.isna(best["head"]) else int(best["head"])
    if best["score"] < threshold:
        return Role(role, None, None, None, float(best["score"]), threshold)
    return Role(role, best["component"], int(best["layer"]), head, float(best["score"]), threshold)


def gated_heads(subject: Subject, table: pd.DataFrame, seed: int = 0,
                knows: Learned | None = None) -> tuple[Role, Role, Learned, pd.DataFrame]:
    """The binder and router of a head-score ``table`` through both gates (module doc): (binder, router,
    what the model has learned, the table with each computed causal fall in ``causal``, ``causal_low``,
    ``causal_high``)."""
    model, config, split = subject.model, subject.config, subject.split
    knows = knows or model_learned(subject, seed=seed)
    table = table.assign(causal=np.nan, causal_low=np.nan, causal_high=np.nan)
    if not knows.binds:
        best = {role: table.loc[table["role"] == role, "score"].max() for role in ("binder", "router")}
        return (*(Role(role, None, None, None, float(best[role]), THRESHOLDS[role], why=knows.missing())
                  for role in ("binder", "router")), knows, table)
    forward = Forward(model, config.model)
    tokens, labels = variable_prompts(split, seed=seed)
    clean = predictions(forward.logits(tokens)) == labels

    def fall(role):
        return lambda layer, head: causal_fall(forward, role, layer, head, tokens, labels,
                                               config.task.context_len, clean, seed)
    chosen = []
    for role in ("binder", "router"):
        found, falls = _choose_causal(role, table, fall(role))
        for component, (value, low, high) in falls.items():
            at = (table["role"] == role) & (table["component"] == component)
            table.loc[at, ["causal", "causal_low", "causal_high"]] = value, low, high
        chosen.append(found)
    return chosen[0], chosen[1], knows, table


def scored_heads(subject: Subject, seed: int = 0, n: int = 600,
                 threads: int | None = 1) -> tuple[Role, Role, Learned, pd.DataFrame]:
    """Every head's scores (:func:`head_scores`) through both gates (:func:`gated_heads`), once per subject,
    ``n``, seed and thread count (as :func:`adder_scores`); the table is the caller's own copy."""
    def score():
        with torch_threads(threads), torch.no_grad():
            return gated_heads(subject, head_scores(subject, n, seed), seed)
    with torch_threads(threads):
        key = f"scored heads n={n} threads={torch.get_num_threads()}"
    binder, router, knows, table = subject.once(key, seed, score)
    return binder, router, knows, table.copy()


def gated_adder(table: pd.DataFrame, knows: Learned) -> Role:
    """The adder among the MLP rows of ``table``, in a model that computes the operation (else none)."""
    adder = _choose("adder", table)
    if adder.component is None or knows.operates:
        return adder
    return Role("adder", None, None, None, adder.score, adder.threshold,
                why=f"the model does not compute the operation (0-var {knows.operation.fraction:.3f} < {LEARNED}; its best "
                    f"MLP, {adder.component}, scores {adder.score:.3f})")


def locate(subject: Subject, seed: int = 0, n: int = 600,
           threads: int | None = 1) -> Location:
    """Score every head and MLP for the three roles and pick each role's player (see the module doc). The scores
    are computed once per subject (same-MLP, circuit and the report each ask); the location is the caller's own."""
    binder, router, knows, heads = scored_heads(subject, seed, n, threads)
    with torch_threads(threads), torch.no_grad():
        table = pd.concat([heads, adder_scores(subject, seed)], ignore_index=True)
    return Location(binder, router, gated_adder(table, knows), candidates=table,
                    gatherer=choose_gatherer(table, router), learned=knows)


def locate_adder(subject: Subject, seed: int = 0,
                 threads: int | None = 1) -> tuple[Role, pd.DataFrame]:
    """The adder role alone (no head scores): the role and the MLP rows."""
    with torch_threads(threads), torch.no_grad():
        table = adder_scores(subject, seed)
        knows = model_learned(subject, seed=seed)
    return gated_adder(table, knows), table


# -- what the Fourier analyses read -------------------------------------------------------------


@dataclass(frozen=True)
class FourierSubject:
    """The MLP the Fourier analyses read: ``layer`` None when the model has no MLP."""

    layer: int | None
    adds: bool  # it is the located adder (else the best-scoring MLP, or the only one, that does not add)
    score: float | None  # its adder score (None: not scored, the model's only MLP)
    note: str

    def to_dict(self) -> dict:
        return {"mlp_block": self.layer, "component": None if self.layer is None else f"blocks.{self.layer}.mlp",
                "adds": self.adds, "adder_score": self.score, "note": self.note}


def fourier_subject(subject: Subject, seed: int = 0, *,
                    adder: Role | None = None, candidates: pd.DataFrame | None = None,
                    score_single: bool = True) -> FourierSubject:
    """Which MLP the Fourier analyses read (see the module doc); ``adder``/``candidates``: a :func:`locate`
    result to reuse. ``score_single=False`` takes a model's only MLP unscored (the training-dynamics
    tools follow it from the first checkpoint on)."""
    model, config = subject.model, subject.config
    blocks = mlp_blocks(model, config)
    if not blocks:
        return FourierSubject(None, False, None, f"no MLP (mlp_blocks={list(config.model.mlp_blocks)}, "
                                                 f"or all zero): no MLP adds")
    if len(blocks) == 1 and not score_single and adder is None:
        return FourierSubject(blocks[0], False, None, f"blocks.{blocks[0]}.mlp, the model's only MLP (not scored)")
    if adder is None or candidates is None:
        adder, candidates = locate_adder(subject, seed)
    if adder.component is not None:
        return FourierSubject(adder.layer, True, adder.score,
                              f"the located adder (score {adder.score:.3f} >= {adder.threshold})")
    best = candidates.loc[candidates["score"].idxmax()]
    return FourierSubject(int(best["layer"]), False, float(best["score"]),
                          f"no MLP adds (best {best['component']}, score {best['score']:.3f} < "
                          f"{THRESHOLDS['adder']}); analysing {best['component']} anyway")


def mlp_block(subject: Subject, seed: int = 0) -> int:
    """The block whose MLP the figures read (:func:`fourier_subject`'s); a model without an MLP is refused."""
    subject = fourier_subject(subject, seed, score_single=False)
    if subject.layer is None:
        raise ComposeLensError(f"this figure reads an MLP, and the model has {subject.note}")
    return subject.layer


# -- what the probes read ------------------------------------------------------------------------


def circuit_heads(subject: Subject, seed: int = 0, n: int = 600, *,
                  location: Location | None = None, threads: int | None = 1) -> probes.Heads:
    """The binder, router and gatherer heads the probes read: the paper architecture's own heads, unscored
    (so its numbers are the study's at every checkpoint, trained or not); any other model's located ones
    (``location``: a :func:`locate` result to reuse), None where no head reaches the role's threshold.
    """
    config = subject.config
    if capabilities.is_paper_architecture(config.model):
        return probes.PAPER_HEADS
    if location is None or location.gatherer is None:
        binder, router, _, table = scored_heads(subject, seed, n, threads)
        gatherer = choose_gatherer(table, router)
    else:
        binder, router, gatherer = location.binder, location.router, location.gatherer

    def head(role: Role):
        return None if role.component is None else (role.layer, role.head)

    return probes.Heads(head(binder), head(router), f"located: {binder.line()}; {router.line()}; {gatherer.line()}",
                        gatherer=head(gatherer))
