"""Probes of the routing circuit: the previous-token head, operand gathering, identity routing.

The study's circuit (SPEC section 6, items 1-3), in the order information flows. Layer 1 is
``blocks.0``, layer 2 ``blocks.1``; a head's circuits are named by its role: ``QK_binder = W_Q W_K^T``
and ``OV_binder = W_V W_O`` of the binder head, ``QK_router`` and ``OV_router`` of the router;
``E`` and ``P`` are the token and position embeddings (:mod:`compose_lens.model.weights`).

1. **Previous-token head (layer 1).** At a value position ``... v 17 ...`` layer-1 attention looks
   one token back, so the residual stream at ``17`` carries ``E_v OV_binder``: the value is tagged
   with its variable. Three views: the weights (:func:`positional_qk_scores`,
   :func:`prev_token_weight_score`; position alone does not make the look back: on the paper model
   most rows peak on the diagonal, :func:`positional_peaks`, and the tokens move the peak one back),
   the activations (:func:`prev_token_attention_score`) and a linear probe
   (:func:`prev_token_probe_accuracy`).
2. **``=`` gathers the operands (layer 1).** :func:`equals_to_operands_score`: then ``=`` carries
   ``E_v OV_binder`` for a variable operand, the same tag the value position carries.
3. **Variable-identity routing (layer 2).** Layer 2's query (``=``, tagged with the operand variable)
   matches keys (values, tagged with theirs): :func:`variable_identity_matrix` in the weights,
   :func:`equals_to_values_score` in the activations.

Every argmax hit rate (``*_score`` of a pattern) saturates at 1 once the targets are the top weights,
however little mass they get; each has a graded companion, the mean attention mass on the targets
(:func:`prev_token_attention_mass`, :func:`equals_measures`).

Activation probes read one :class:`~compose_lens.analysis.activations.Activations` of
:func:`probe_batch`; pass ``acts=`` to share one forward pass between probes. They read the
:class:`Heads` given (default :data:`PAPER_HEADS`; for another architecture the ones
:func:`compose_lens.analysis.locate.circuit_heads` finds). Where no head plays a role every measure
that reads it is NaN, never a default head's. For a binder above ``blocks.0`` the weight views read
the direct path from the embeddings only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from compose_lens.analysis.activations import PAPER_BINDER, PAPER_ROUTER, Activations, collect
from compose_lens.core.config import RunConfig, TaskConfig
from compose_lens.data import streams
from compose_lens.data.sampler import POOL_NAMES, Batch, concat_batches, make_pool, present_pools
from compose_lens.data.split import Split
from compose_lens.data.task import SequenceKind
from compose_lens.data.variants import bindings
from compose_lens.model import tl
from compose_lens.model.weights import ov_matrix, qk_matrix
from compose_lens.training.subject import Subject

Head = tuple[int, int]  # (layer, head)


@dataclass(frozen=True)
class Heads:
    """The heads the probes read: ``binder`` (the previous-token head), ``router`` (reads the queried
    values from ``=``) and ``gatherer`` (its attention from ``=`` gathers the operand tokens, SPEC 6.2);
    None: no head plays it."""

    binder: Head | None = PAPER_BINDER
    router: Head | None = PAPER_ROUTER
    how: str = "binder: blocks.0 head 0, router: blocks.1 head 0 (the paper architecture's heads, read without locating)"
    gatherer: Head | None | str = "binder"  # "binder": the binder's head (the paper: one head does both)

    def __post_init__(self):
        if self.gatherer == "binder":
            object.__setattr__(self, "gatherer", self.binder)

    def to_dict(self) -> dict:
        def one(head):
            return {"component": None if head is None else f"blocks.{head[0]} head {head[1]}",
                    "layer": None if head is None else head[0], "head": None if head is None else head[1]}
        return {"binder": one(self.binder), "router": one(self.router), "gatherer": one(self.gatherer),
                "how": self.how,
                "none": [role for role in ("binder", "router", "gatherer") if getattr(self, role) is None]}


PAPER_HEADS = Heads()


def _weight_heads(head: int, heads: Heads | None) -> Heads:
    """The weight views' ``head`` argument (that head in blocks.0 and blocks.1) or ``heads``."""
    return Heads((0, head), (1, head)) if heads is None else heads


# -- 1. previous-token head: weights ------------------------------------------------------


def positional_qk_scores(model: tl.Model, task: TaskConfig | RunConfig | None = None,
                         head: int = 0, *, heads: Heads | None = None) -> torch.Tensor:
    """The binder's positional scores ``P QK_binder P^T / sqrt(d_head)``, (C, C) over the context positions
    (without a task, every position): how much query i prefers key j from position alone, in logits, the
    term the tokens' terms add to. Only j <= i is ever used. ``heads``: default blocks.0 head ``head``.
    """
    binder = _weight_heads(head, heads).binder
    if binder is None:
        raise ValueError("no binder head: nothing to score")
    task = task.task if isinstance(task, RunConfig) else task
    P = tl.parameters(model)["pos_embed.weight"].detach().float().cpu()
    n = task.context_len if task is not None else P.shape[0]
    return P[:n] @ qk_matrix(model, *binder) @ P[:n].T / math.sqrt(tl.size(model, "d_head"))


def previous_position_fraction(scores: torch.Tensor) -> float:
    """Fraction of query rows i >= 1 whose largest score among keys j < i is at j = i - 1."""
    scores = torch.as_tensor(scores, dtype=torch.float32)
    n = scores.shape[0]
    if n < 2:
        return float("nan")
    earlier = torch.ones(n, n, dtype=torch.bool).tril(-1)
    best = scores.masked_fill(~earlier, float("-inf"))[1:].argmax(dim=1)
    return (best == torch.arange(n - 1)).float().mean().item()


def positional_peaks(scores: torch.Tensor) -> dict:
    """Where each query row's largest allowed score (keys j <= i) sits, rows 1..C-1 (row 0 has one key):
    ``on_diagonal`` (j = i: position alone keeps the query on itself), ``just_below`` (j = i - 1: a
    positional previous-token head), ``query_positions`` and ``argmax_per_query``."""
    scores = torch.as_tensor(scores, dtype=torch.float32)
    n = scores.shape[0]
    allowed = torch.ones(n, n, dtype=torch.bool).tril()
    best = scores.masked_fill(~allowed, float("-inf"))[1:].argmax(dim=1)
    rows = torch.arange(1, n)
    return {"query_positions": n - 1, "on_diagonal": int((best == rows).sum()),
            "just_below": int((best == rows - 1).sum()), "argmax_per_query": best.tolist()}


def positional_attention(scores: torch.Tensor) -> torch.Tensor:
    """The attention a head would pay from position alone: the causal softmax of its positional scores,
    (C, C); read against its real pattern, the difference is what the tokens add."""
    scores = torch.as_tensor(scores, dtype=torch.float32)
    later = torch.ones(scores.shape, dtype=torch.bool).triu(1)
    return scores.masked_fill(later, float("-inf")).softmax(dim=-1)


def prev_token_weight_score(model: tl.Model, task: TaskConfig | RunConfig | None = None,
                            head: int = 0, *, heads: Heads | None = None) -> float:
    """:func:`previous_position_fraction` of the positional scores (NaN without a binder). Position 1 has
    a single earlier key, so chance is ``(1/1 + 1/2 + ... + 1/(C-1)) / (C-1)``."""
    if _weight_heads(head, heads).binder is None:
        return float("nan")
    return previous_position_fraction(positional_qk_scores(model, task, head, heads=heads))


# -- the batch and the activations the activation probes read ---------------------------


def probe_batch(split: Split, n: int = 900, seed: int = 0) -> Batch:
    """``n`` sequences, every pool of SPEC section 3 the split has in equal parts (all four sequence types)."""
    names = present_pools(split, POOL_NAMES)
    per_pool = max(1, math.ceil(n / len(names)))
    seed = seed + streams.PROBE_POOL_SEED_OFFSET  # not the evaluation pools of the same seed
    joined, _ = concat_batches({name: make_pool(split, name, per_pool, seed=seed) for name in names})
    return joined[:n]


def probe_activations(subject: Subject, n: int = 900,
                      seed: int = 0, tokens: torch.Tensor | None = None, *,
                      heads: Heads = PAPER_HEADS) -> Activations:
    """The activations of :func:`probe_batch` (``tokens``: its tokens if already rendered) for ``heads``."""
    model, config, split = subject.model, subject.config, subject.split
    tokens = probe_batch(split, n, seed).tokens if tokens is None else tokens
    mlp = config.model.mlp_blocks  # the probes read no MLP; the paper's (1) for the table forward
    layer = mlp[-1] if mlp else config.model.n_layers - 1
    acts = collect(model, config.model, tokens, binder=heads.binder, router=heads.router, mlp_layer=layer)
    gatherer = heads.gatherer
    if gatherer is None:
        acts.gatherer_last = None
    elif gatherer == heads.binder:  # the paper: one head binds and gathers
        acts.gatherer_last = acts.pattern0[:, -1]
    else:
        acts.gatherer_last = collect(model, config.model, tokens, binder=gatherer, router=None, resid=False,
                                     mlp_layer=layer).pattern0[:, -1]
    return acts


def gatherer_pattern(acts: Activations) -> torch.Tensor | None:
    """(B, n) the attention from ``=`` of the gathering head (activations made elsewhere than
    :func:`probe_activations`: the binder's, as in the paper); None where no head gathers."""
    if hasattr(acts, "gatherer_last"):
        return acts.gatherer_last
    return None if acts.pattern0 is None else acts.pattern0[:, -1]


def _acts(subject, n, seed, acts, heads=PAPER_HEADS) -> Activations:
    return acts if acts is not None else probe_activations(subject, n, seed, heads=heads)


NAN = float("nan")


def value_positions(task: TaskConfig, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sequence, position, variable position) of the values assigned in the context. The variable is the
    token before, or further back with filler words inside an assignment (``b is 7``); a reassigned
    variable's stale value is still bound to it."""
    context = tokens[:, : task.context_len]
    seq, pos = ((context >= 0) & (context < task.modulus)).nonzero(as_tuple=True)
    if task.noise_rate == 0:  # every value right after its variable: no parse needed
        return seq, pos, pos - 1
    return seq, pos, bindings(task, tokens).variable_of[seq, pos]


# -- 1. previous-token head: activations and a linear probe ------------------------------


def prev_token_attention_score(subject: Subject, *, n: int = 900,
                               seed: int = 0, acts: Activations | None = None,
                               heads: Heads = PAPER_HEADS) -> float:
    """Fraction of context value positions whose binder (layer-1) attention peaks on the previous token
    (on a task with filler words inside assignments: on the value's variable, :func:`value_positions`)."""
    return _value_attention(subject, n, seed, acts, heads, lambda rows, var: (rows.argmax(dim=-1) == var).float())


def _value_attention(subject: Subject, n: int, seed: int, acts: Activations | None, heads: Heads, score) -> float:
    """The mean of ``score(binder pattern rows of the context values, their variables' positions)``."""
    acts = _acts(subject, n, seed, acts, heads)
    if acts.pattern0 is None:
        return NAN
    seq, pos, var = value_positions(subject.config.task, acts.tokens)
    return score(acts.pattern0[seq, pos], var).mean().item()


def prev_token_attention_mass(subject: Subject, *, n: int = 900,
                              seed: int = 0, acts: Activations | None = None,
                              heads: Heads = PAPER_HEADS) -> float:
    """Mean binder (layer-1) attention weight a context value position puts on the previous token (the
    graded companion of the argmax hit rate :func:`prev_token_attention_score`)."""
    return _value_attention(subject, n, seed, acts, heads, lambda rows, var: rows[torch.arange(len(var)), var])


@dataclass
class ProbeResult:
    """A linear probe's accuracy on its training and held-out vectors."""

    train_accuracy: float
    test_accuracy: float
    n_train: int
    n_test: int
    n_classes: int

    @property
    def chance(self) -> float:
        return 1.0 / self.n_classes


def fit_linear_probe(features: torch.Tensor, labels: torch.Tensor, groups: torch.Tensor, n_classes: int,
                     *, seed: int = 0, test_fraction: float = 0.3, weight_decay: float = 1e-3,
                     max_iter: int = 100) -> ProbeResult:
    """Multinomial logistic regression (features (N, d) -> labels (N,)), L2-penalised; L-BFGS fits weights
    and biases on features standardised with the training statistics. Whole sequences (``groups``) go
    to the seeded held-out set, none on both sides."""
    unique = groups.unique()
    order = unique[torch.randperm(len(unique), generator=streams.derived_generator(seed, streams.PROBE_TEST_SPLIT))]
    n_test_groups = max(1, int(round(test_fraction * len(unique))))
    is_test = torch.isin(groups, order[:n_test_groups])
    x_train, y_train = features[~is_test].float(), labels[~is_test]
    x_test, y_test = features[is_test].float(), labels[is_test]
    if len(x_train) == 0 or len(x_test) == 0:
        return ProbeResult(float("nan"), float("nan"), len(x_train), len(x_test), n_classes)
    mean, std = x_train.mean(0), x_train.std(0).clamp_min(1e-6)
    x_train, x_test = (x_train - mean) / std, (x_test - mean) / std

    weight = torch.zeros(features.shape[1], n_classes, requires_grad=True)
    bias = torch.zeros(n_classes, requires_grad=True)
    optimiser = torch.optim.LBFGS([weight, bias], max_iter=max_iter, line_search_fn="strong_wolfe")

    def closure():
        optimiser.zero_grad()
        loss = torch.nn.functional.cross_entropy(x_train @ weight + bias, y_train)
        loss = loss + weight_decay * weight.pow(2).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        optimiser.step(closure)
    with torch.no_grad():
        train_acc = ((x_train @ weight + bias).argmax(1) == y_train).float().mean().item()
        test_acc = ((x_test @ weight + bias).argmax(1) == y_test).float().mean().item()
    return ProbeResult(train_acc, test_acc, len(x_train), len(x_test), n_classes)


def prev_token_probe(subject: Subject, *, n: int = 900, seed: int = 0,
                     acts: Activations | None = None, heads: Heads = PAPER_HEADS, **probe_options) -> ProbeResult:
    """Probe the residual stream after the binder's attention (paper: ``blocks.0.hook_resid_mid``; with
    no layer-1 MLP it equals ``hook_resid_post``) at value positions for the assigned variable.
    NaN accuracies where no head binds."""
    config = subject.config
    acts = _acts(subject, n, seed, acts, heads)
    task = config.task
    if acts.binder is None:
        return ProbeResult(NAN, NAN, 0, 0, task.n_vars)
    if acts.resid_mid0 is None:
        raise ValueError("these activations were collected without resid_mid0 (resid=False)")
    seq, pos, var = value_positions(task, acts.tokens)
    features = acts.resid_mid0[seq, pos]
    labels = acts.tokens[seq, var] - task.first_var_token
    return fit_linear_probe(features, labels, seq, task.n_vars, seed=seed, **probe_options)


def prev_token_probe_accuracy(subject: Subject, *, n: int = 900,
                              seed: int = 0, acts: Activations | None = None, heads: Heads = PAPER_HEADS,
                              **probe_options) -> float:
    """Held-out accuracy of :func:`prev_token_probe` (chance: 1 / n_vars)."""
    return prev_token_probe(subject, n=n, seed=seed, acts=acts, heads=heads,
                            **probe_options).test_accuracy


# -- 2. "=" gathers the operands ----------------------------------------------------------


def _top2_matches(weights: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(B,) bool: are the two largest weights (B, n) exactly on the two targets (B, 2)?"""
    top = weights.topk(2, dim=-1).indices.sort(dim=-1).values
    return (top == targets.sort(dim=-1).values).all(dim=-1)


def target_mass(weights: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(B,) attention mass (B, n) on the target positions (B, k); a target listed twice counts once."""
    hit = torch.zeros_like(weights, dtype=torch.bool).scatter_(1, targets, True)
    return (weights * hit).sum(-1)


def _from_equals(task: TaskConfig, acts: Activations) -> dict[str, torch.Tensor]:
    """Per sequence, the attention from ``=``: whether the gatherer's two largest weights fall on the operand
    positions ``seq_len - 3``, ``seq_len - 2`` and the router's on the value positions (:func:`value_targets`),
    and the mass each puts there; NaN where no head gathers or routes."""
    nan = torch.full((len(acts),), NAN)
    gathered, routed = gatherer_pattern(acts), acts.pattern1_last
    operands = torch.tensor([task.seq_len - 3, task.seq_len - 2]).expand(len(acts), 2)
    values = None if routed is None else value_targets(task, acts.tokens)
    return {"equals_to_operands_score": nan if gathered is None else _top2_matches(gathered, operands).float(),
            "equals_to_values_score": nan if routed is None else _top2_matches(routed, values).float(),
            "equals_to_operands_mass": nan if gathered is None else target_mass(gathered, operands),
            "equals_to_values_mass": nan if routed is None else target_mass(routed, values)}


def equals_measures(subject: Subject, *, n: int = 900, seed: int = 0, acts: Activations | None = None,
                    heads: Heads = PAPER_HEADS) -> dict[str, float]:
    """The four measures of attention from ``=`` (:func:`_from_equals`), each a mean over the sequences."""
    return {name: v.mean().item() for name, v in _from_equals(subject.config.task,
                                                              _acts(subject, n, seed, acts, heads)).items()}


def _equals_measure(name: str, subject: Subject, n: int, seed: int, acts: Activations | None, heads: Heads) -> float:
    return equals_measures(subject, n=n, seed=seed, acts=acts, heads=heads)[name]


def equals_to_operands_score(subject: Subject, *, n: int = 900,
                             seed: int = 0, acts: Activations | None = None, heads: Heads = PAPER_HEADS) -> float:
    """Fraction of sequences whose gatherer's top two weights from ``=`` are on the operands (13, 14 in the paper)."""
    return _equals_measure("equals_to_operands_score", subject, n, seed, acts, heads)


# -- 3. variable-identity routing ----------------------------------------------------------


def variable_identity_matrix(model: tl.Model, config: RunConfig | TaskConfig, head: int = 0, *,
                             heads: Heads | None = None) -> torch.Tensor:
    """``S = (E_var OV_binder) QK_router (E_var OV_binder)^T / sqrt(d_head)``, (n_vars, n_vars), in logits:
    row v is the ``=`` query carrying variable v against the key of a value tagged w. Identity routing means
    each row peaks on the diagonal. ``heads`` default: head ``head`` of blocks.0 and blocks.1.
    """
    heads = _weight_heads(head, heads)
    if heads.binder is None or heads.router is None or heads.router[0] <= heads.binder[0]:
        raise ValueError(f"variable identity needs a binder below a router (binder {heads.binder}, "
                         f"router {heads.router})")
    task = config.task if isinstance(config, RunConfig) else config
    E = tl.parameters(model)["embed.weight"].detach().float().cpu()
    tagged = E[task.first_var_token: task.first_var_token + task.n_vars] @ ov_matrix(model, *heads.binder)
    return tagged @ qk_matrix(model, *heads.router) @ tagged.T / math.sqrt(tl.size(model, "d_head"))


def diagonal_max_fraction(matrix: torch.Tensor) -> float:
    """Fraction of rows whose largest entry is on the diagonal."""
    return (matrix.argmax(dim=1) == torch.arange(len(matrix))).float().mean().item()


def variable_identity_score(model: tl.Model, config: RunConfig | TaskConfig, head: int = 0, *,
                            heads: Heads | None = None) -> float:
    """:func:`diagonal_max_fraction` of :func:`variable_identity_matrix` (chance about 1 / n_vars);
    NaN where ``heads`` lacks a binder or a router, or the router is not above the binder."""
    h = _weight_heads(head, heads)
    if h.binder is None or h.router is None or h.router[0] <= h.binder[0]:
        return NAN
    return diagonal_max_fraction(variable_identity_matrix(model, config, head, heads=heads))


def value_targets(task: TaskConfig, tokens: torch.Tensor) -> torch.Tensor:
    """(B, 2) positions holding each operand's value: the operand's own position for a
    constant, the number its variable holds at the end of the context for a variable (the
    latest assignment, a chain followed: :func:`compose_lens.data.variants.bindings`)."""
    if task.is_variant:
        return bindings(task, tokens).operand_value_positions(task, tokens)
    n, C = task.seq_len, task.context_len
    targets = []
    for offset in (3, 2):  # the study's task: the number right after the variable's one assignment
        operand = tokens[:, n - offset]
        is_var = operand >= task.first_var_token
        assigned_at = (tokens[:, :C] == operand.unsqueeze(1)).float().argmax(dim=1)
        targets.append(torch.where(is_var, assigned_at + 1, torch.full_like(operand, n - offset)))
    return torch.stack(targets, dim=1)


def values_all_queried(task: TaskConfig, tokens: torch.Tensor) -> bool:
    """Whether no 2-var sequence of ``tokens`` holds a context value other than its two operands' (a task
    whose contexts hold two assignments): then any head that puts its weight on numbers puts its top two
    on the queried values, and :func:`equals_to_values_score` is true by construction there."""
    n = tokens.shape[1]
    two_var = (tokens[:, n - 3] >= task.first_var_token) & (tokens[:, n - 2] >= task.first_var_token)
    if not two_var.any():
        return False
    tokens = tokens[two_var]
    seq, pos, _ = value_positions(task, tokens)
    queried = (pos.unsqueeze(1) == value_targets(task, tokens)[seq]).any(1)
    return bool(queried.all())


def equals_to_values_score(subject: Subject, *, n: int = 900,
                           seed: int = 0, acts: Activations | None = None, heads: Heads = PAPER_HEADS) -> float:
    """Fraction of sequences whose router's top two weights from ``=`` are on the values (:func:`value_targets`)."""
    return _equals_measure("equals_to_values_score", subject, n, seed, acts, heads)


def scores_by_type(config: RunConfig, acts: Activations) -> dict[str, dict[str, float]]:
    """The per-sequence activation scores (:func:`_from_equals`) split by sequence type (0var, 1var_left, ...)."""
    task, tokens = config.task, acts.tokens
    kind = (tokens[:, -3] >= task.first_var_token).long() + 2 * (tokens[:, -2] >= task.first_var_token).long()
    measures = _from_equals(task, acts)
    return {sequence_kind.value: {"n": int(mask.sum()), **{k: v[mask].mean().item() for k, v in measures.items()}}
            for sequence_kind in SequenceKind if (mask := kind == sequence_kind.index).any()}
