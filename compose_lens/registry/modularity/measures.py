"""Is a model's circuit modular? Three measures that can fail, for any architecture without normalisation.

The study shows one model whose three skills sit in three components: layer 1's head binds each value
to its variable, layer 2's head routes the operands' values to ``=``, MLP2 adds. Whether a wider, deeper
or many-headed model keeps them apart is an empirical question; these measures answer it for one trained
model, from the toolkit's own graph, locator and same-MLP tests, with nothing chosen by hand.

**(a) Separation: binding and addition in distinct components** (``modularity_separation``).
Score every edge of the position graph (:func:`compose_lens.registry.circuit.discovery.build_graph` with
``positions=True``) with EAP-IG on two sets of prompt pairs, and read where each skill's effect
*leaves* a component (the edge's sender; the embeddings are not a component):

* **binding**: :func:`binding_pairs`, 1-var prompts whose corrupted twin swaps the queried
  variable's name with another assigned variable's in the context (``a=3 b=5 .. a+2=`` against
  ``b=3 a=5 .. a+2=``): the tokens are the same, only which value is bound to which variable
  changes, so the effect runs through whatever binds. Its profile ``b_c`` is component c's share of
  the |attribution| of edges sent at the **context positions** (where a binding is formed);
* **addition**: the ``constant`` pairs of :func:`compose_lens.data.pairs.make_prompt_pairs`
  (0-var prompts, one constant operand changed: nothing to bind). Its profile ``a_c`` is c's share of
  the |attribution| of edges sent at the **query positions** (the two operands and ``=``, where the
  addends are brought together and summed).

``overlap = sum_c min(b_c, a_c)`` is the share of the two profiles that falls on the same heads and
MLPs (0: disjoint, 1: the same components in the same proportions) and
``modularity_separation = 1 - overlap``, with its 95 % bootstrap interval over the prompt pairs
(``modularity_separation_low``, ``_high``, :func:`separation_interval`). In the paper model the binder
head writes at the context positions and the router head and MLP2 at the query positions, so it
separates; a model whose binding runs through an MLP that also carries the addends (the planted relay of
``tests/unit/test_modularity.py``) does not. The component carrying most of each profile is reported
(``modularity_binding_component``, ``modularity_adding_component``).

**(b) One adder: constants and variables routed to the same MLP** (``modularity_same_adder``).
The adder is found twice: by the locator (key-frequency strength x ablation drop on the constant grid,
:func:`compose_lens.analysis.locate.locate`) and by attribution (the MLP with the largest share of
the addition profile of (a)); ``modularity_adders_agree`` says whether they are the same MLP. The
same-MLP tests (interchange, feature transfer, representation transfer) then run on the located adder
and router (:func:`compose_lens.registry.same_mlp.comparisons.same_mlp_report`): ``modularity_same_adder`` is
1.0 where the verdict is ``supported`` (a variable's value reaches the adder in the form and features
a constant does), 0.0 where ``not supported``, and ``inconclusive`` otherwise (a role not located, a
reference too low: the same-MLP rules).

**(c) Circuit size** (``modularity_circuit_fraction``). On the component graph (no positions), the
fewest top-|EAP-IG| edges that recover >= 95 % of the logit difference on *every* evaluation pool at
once (:func:`compose_lens.registry.circuit.discovery.size_on_pools`), divided by the number of edges of the
graph, with its 95 % bootstrap interval over the pools' pairs (``modularity_circuit_fraction_low``,
``_high``; the edges' ranking held, :meth:`PoolRuns.size_interval`). A model whose skills sit in few
components needs few of its edges; one that spreads the same function over every head (the planted split
of the tests) needs most of them. It is a size, compared across architectures, never thresholded.

**Verdict** (``modularity_verdict``): ``modular`` where the separation is at least :data:`SEPARATION_MIN`
(0.8: the paper model and its 2x4 plant score 0.93, the planted relay, one MLP carrying half the binding
and a third of the addition, 0.61) and (b) is 1.0; ``entangled`` where the separation is below it or (b)
is 0.0; ``inconclusive`` otherwise.

**Inconclusive, never a number passed off as a score.** A model that has not learned the task has no
circuit to measure: unless both exhaustive accuracies reach the study's headline
(:data:`compose_lens.training.outcome.GENERALISED`), every score is the string ``inconclusive`` and
``modularity_reason`` says why. So is (a) where a pair set cannot be made or its clean and corrupted
runs barely differ, and (c) where even the whole graph does not recover 95 % on some pool.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from compose_lens.training import outcome
from compose_lens.core import stats
from compose_lens.analysis import locate
from compose_lens.registry.same_mlp import comparisons as same_mlp
from compose_lens.analysis.activations import torch_threads
from compose_lens.data.pairs import PromptPairs, labels_of, make_prompt_pairs
from compose_lens.core.errors import ComposeLensError
from compose_lens.data.sampler import make_pool
from compose_lens.data.split import Split
from compose_lens.registry.circuit import discovery as circuit
from compose_lens.training.evaluate import exhaustive_accuracies, headline_holds
from compose_lens.training.subject import Subject

INCONCLUSIVE = "inconclusive"
SEPARATION_MIN = 0.8  # (a): at least this share of the two profiles on different components (module doc)
MIN_EFFECT = 0.5  # mean clean - corrupted logit difference below this: the pairs test nothing
RECOVERED = 0.95  # (c): the share of the logit difference a circuit must recover on every pool
COLUMNS = ("modularity_separation", "modularity_separation_low", "modularity_separation_high",
           "modularity_overlap", "modularity_binding_component", "modularity_adding_component",
           "modularity_located_adder", "modularity_attribution_adder", "modularity_adders_agree",
           "modularity_same_adder", "modularity_same_mlp_reason", "modularity_circuit_edges",
           "modularity_graph_edges", "modularity_circuit_fraction", "modularity_circuit_fraction_low",
           "modularity_circuit_fraction_high", "modularity_verdict", "modularity_reason")


def binding_pairs(split: Split, n_pairs: int = 120, seed: int = 0) -> PromptPairs:
    """1-var prompts against the same prompt with the queried variable's name swapped, in the context, with
    another assigned variable's that holds another value (the module doc's (a))."""
    task = split.task
    C, n, first = task.context_len, task.seq_len, task.first_var_token
    pool = make_pool(split, "1var_train", 4 * n_pairs, seed).tokens
    g = torch.Generator().manual_seed(seed)
    clean, corrupted = [], []
    for row in pool.tolist():
        var = next(t for t in row[n - 3: n - 1] if t >= first)
        at = row[:C].index(var)
        others = [j for j in range(C - 1) if row[j] >= first and j != at and row[j + 1] < task.modulus
                  and row[j + 1] != row[at + 1]]
        if not others:
            continue
        j = others[int(torch.randint(len(others), (1,), generator=g))]
        swapped = list(row)
        swapped[at], swapped[j] = row[j], row[at]
        clean.append(row)
        corrupted.append(swapped)
        if len(clean) == n_pairs:
            break
    if len(clean) < 2:
        raise ComposeLensError("no 1-var prompt has a second assigned variable with another value to swap "
                               "its binding with")
    clean_t, corrupted_t = torch.tensor(clean), torch.tensor(corrupted)
    return PromptPairs(clean_t, corrupted_t, labels_of(task, clean_t), labels_of(task, corrupted_t), "binding")


# -- (a) where each skill leaves a component ----------------------------------------------------


def sender_attributions(gm: circuit.GraphModel, pairs: PromptPairs, positions: set[int],
                        steps: int = 8) -> tuple[torch.Tensor, list[str], float]:
    """The EAP-IG attribution pair by pair (N, K) of the K edges sent at ``positions`` (the
    embeddings left out), each edge's sender, and the pairs' mean clean - corrupted logit difference."""
    base = circuit.baseline(gm, pairs)
    per_pair = circuit.eap_ig_pair_scores(gm, pairs, base, steps).detach()
    edges = gm.graph.edges
    keep = [i for i, e in enumerate(edges) if e.sender != "embed" and e.position in positions]
    return per_pair[:, keep], [edges[i].sender for i in keep], float(base.denominator)


def _shares(scores: torch.Tensor, components: list[str]) -> pd.Series:
    """Each component's share of the edges' |scores| (K,), largest first."""
    table = pd.DataFrame({"component": components, "score": scores.abs().tolist()})
    total, summed = table["score"].sum(), table.groupby("component")["score"].sum()
    return (summed / total if total > 0 else summed * 0.0).sort_values(ascending=False, kind="stable")


def _resampled_shares(per_pair: torch.Tensor, components: list[str], names: list[str], rng: np.random.Generator,
                      resamples: int) -> torch.Tensor:
    """(resamples, C) each component's share of the |mean attribution| on a resample of the pairs."""
    n = len(per_pair)
    weight = torch.from_numpy(rng.multinomial(n, np.full(n, 1 / n), size=resamples) / n)  # (B, N)
    by_edge = (weight @ per_pair.double()).abs()  # (B, K)
    owner = torch.zeros(len(components), len(names), dtype=torch.double)
    owner[torch.arange(len(components)), torch.tensor([names.index(c) for c in components], dtype=torch.long)] = 1.0
    by_component = by_edge @ owner
    total = by_component.sum(1, keepdim=True)
    return torch.where(total > 0, by_component / total.clamp_min(1e-300), torch.zeros_like(by_component))


def separation_interval(binding: tuple[torch.Tensor, list[str]], adding: tuple[torch.Tensor, list[str]],
                        seed: int = 0, resamples: int = stats.BOOTSTRAP_RESAMPLES) -> tuple[float, float]:
    """The 95 % percentile bootstrap interval of ``modularity_separation``: both pair sets resampled, the
    profiles recomputed from the pairs' own attributions (``(per_pair, senders)`` of :func:`sender_attributions`)."""
    names = sorted(set(binding[1]) | set(adding[1]))
    rng = np.random.default_rng(seed)
    b = _resampled_shares(*binding, names, rng, resamples)
    a = _resampled_shares(*adding, names, rng, resamples)
    low, high = stats.percentile_interval((1.0 - torch.minimum(b, a).sum(1)).numpy())
    return float(low), float(high)


def overlap(binding: pd.Series, adding: pd.Series) -> float:
    """``sum_c min(b_c, a_c)``: the share of two profiles (each summing to 1) on the same components."""
    both = pd.concat([binding.rename("b"), adding.rename("a")], axis=1).fillna(0.0)
    return float(both.min(axis=1).sum())


def separation(subject: Subject, n_pairs: int = 120, seed: int = 0,
               steps: int = 8) -> dict:
    """(a) of the module doc: the two profiles, their overlap and the separation (or why inconclusive)."""
    model, config, split = subject.model, subject.config, subject.split
    task = config.task
    n = task.seq_len
    gm = circuit.GraphModel.from_model(model, config.model, positions=True)
    try:
        bind = binding_pairs(split, n_pairs, seed)
    except ComposeLensError as e:
        return {"separation": INCONCLUSIVE, "why": str(e)}
    bound = sender_attributions(gm, bind, set(range(task.context_len)), steps)
    adding = make_prompt_pairs(split, n_pairs, "constant", seed)  # one constant operand changed: nothing to bind
    added = sender_attributions(gm, adding, {n - 3, n - 2, n - 1}, steps)
    (b, b_effect), (a, a_effect) = [(_shares(per_pair.mean(0), senders), effect)
                                    for per_pair, senders, effect in (bound, added)]
    weak = [name for name, effect in (("binding", b_effect), ("addition", a_effect)) if effect < MIN_EFFECT]
    if weak or b.sum() == 0 or a.sum() == 0:
        return {"separation": INCONCLUSIVE, "binding": b, "adding": a,
                "why": f"the {' and '.join(weak) or 'attribution'} pairs barely move the logit difference "
                       f"(binding {b_effect:.2f}, addition {a_effect:.2f} < {MIN_EFFECT})"}
    shared = overlap(b, a)
    interval = separation_interval(bound[:2], added[:2], seed)
    return {"separation": 1.0 - shared, "separation_ci95": list(interval), "overlap": shared, "binding": b,
            "adding": a, "binding_effect": b_effect, "adding_effect": a_effect, "why": None}


# -- (b) one adder ---------------------------------------------------------------------------------


def attribution_adder(adding: pd.Series) -> str | None:
    """The MLP with the largest share of the addition profile (``blocks.L.mlp``), None without one."""
    mlps = adding[[c.startswith("m") for c in adding.index]]
    if mlps.empty or mlps.max() <= 0:
        return None
    return f"blocks.{mlps.idxmax()[1:]}.mlp"


def same_adder(subject: Subject, n: int = 150, seed: int = 0) -> dict:
    """(b) of the module doc: the located adder and the same-MLP verdict on it."""
    report = same_mlp.same_mlp_report(subject, seed, n=n)
    score = {"supported": 1.0, "not supported": 0.0}.get(report["verdict"], INCONCLUSIVE)
    return {"same_adder": score, "verdict": report["verdict"], "reason": report["verdict_reason"],
            "adder": report["components"]["adder"]}


# -- (c) circuit size -----------------------------------------------------------------------------


class PoolRuns:
    """The patched runs of circuits on every evaluation pool, kept pair by pair: the worst pool's share
    recovered by each circuit (:meth:`worst`), then the bootstrap of the size over the pools' pairs."""

    def __init__(self, gm: circuit.GraphModel, pools: dict[str, PromptPairs]):
        self.gm, self.pools = gm, pools
        self.bases = {name: circuit.baseline(gm, pairs) for name, pairs in pools.items()}
        self.ends = {}  # pool -> (clean, corrupted) metric per pair
        for name, pairs in pools.items():
            base = self.bases[name]
            with torch.no_grad():
                corrupted = circuit._ld(gm.forward(pairs.corrupted)[0], pairs, 1, base.metric)
            self.ends[name] = (circuit._ld(base.clean_logits, pairs, 1, base.metric), corrupted)
        self.read: dict[int, dict[str, torch.Tensor]] = {}  # circuit size -> pool -> (N,) metric per pair

    def worst(self, circuits: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
        """(len(sizes),) the worst pool's share recovered by the circuits of these sizes (rows of ``circuits``)."""
        shares = []
        for name, pairs in self.pools.items():
            base = self.bases[name]
            ld = circuit._masked_runs(self.gm, pairs, base, (~circuits[sizes]).float())  # (S, N)
            for size, row in zip(sizes.tolist(), ld):
                self.read.setdefault(int(size), {})[name] = row
            shares.append(torch.tensor(((ld.mean(1) - base.ld_corrupted) / base.denominator).tolist(),
                                       dtype=torch.double))
        return torch.stack(shares).min(0).values

    def size_interval(self, target: float, edges: int, seed: int = 0,
                      resamples: int = stats.BOOTSTRAP_RESAMPLES) -> list[int]:
        """The 95 % percentile bootstrap interval of the smallest circuit reaching ``target`` on every
        pool: each pool's pairs resampled, every size read so far re-scored, the first that reaches
        the target on the worst pool taken (``edges`` where none does). Between two sizes not read
        (outside the coarse search's fine window) a resample's size is the next size read, so an end
        there is an upper bound."""
        sizes = sorted(self.read)
        rng = np.random.default_rng(seed)
        worst = None
        for name, pairs in self.pools.items():
            n = len(pairs)
            weight = torch.from_numpy(rng.multinomial(n, np.full(n, 1 / n), size=resamples) / n).T  # (N, B)
            clean, corrupted = (v.double() @ weight for v in self.ends[name])
            ld = torch.stack([self.read[k][name] for k in sizes]).double() @ weight  # (S, B)
            share = (ld - corrupted) / (clean - corrupted)
            worst = share if worst is None else torch.minimum(worst, share)
        hit = worst >= target
        first = torch.tensor(sizes, dtype=torch.double)[hit.double().argmax(0)]
        found = torch.where(hit.any(0), first, torch.full_like(first, float(edges)))
        low, high = stats.percentile_interval(found.numpy())
        return [int(np.floor(low)), int(np.ceil(high))]


def smallest_circuit(gm: circuit.GraphModel, split: Split, scores: torch.Tensor, target: float = RECOVERED,
                     pool_size: int = 200, seed: int = 0, coarse: int = 16) -> tuple[int, float]:
    """The fewest top-|score| edges whose circuit recovers ``target`` on every evaluation pool, and what the
    whole graph recovers on its worst pool. Where :func:`compose_lens.registry.circuit.discovery.size_on_pools`
    reads every size, this reads ``coarse`` + 1 evenly spaced sizes, then every size between the last coarse
    size below the target and the first at or above it (the same answer where the worst pool's curve rises
    with the size)."""
    size, whole, _ = smallest_circuit_with_interval(gm, split, scores, target, pool_size, seed, coarse)
    return size, whole


def smallest_circuit_with_interval(gm: circuit.GraphModel, split: Split, scores: torch.Tensor,
                                   target: float = RECOVERED, pool_size: int = 200, seed: int = 0,
                                   coarse: int = 16) -> tuple[int, float, list[int]]:
    """:func:`smallest_circuit`, and the size's 95 % bootstrap interval over the pools' pairs
    (:meth:`PoolRuns.size_interval`, from the same runs)."""
    runs = PoolRuns(gm, circuit.evaluation_pairs(split, pool_size, seed))
    circuits = circuit.top_k_circuits(scores)
    E = len(scores)
    sizes = torch.linspace(0, E, coarse + 1).round().long().unique()
    worst = runs.worst(circuits, sizes)
    size = E
    if not worst[-1] < target:
        first = int(torch.nonzero(worst >= target)[0])
        size = int(sizes[first])
        between = torch.arange(int(sizes[first - 1]) + 1, size) if first else []
        hits = torch.nonzero(runs.worst(circuits, between) >= target) if len(between) else []
        size = int(between[int(hits[0])]) if len(hits) else size
    return size, float(worst[-1]), runs.size_interval(target, E, seed)  # the interval once every size is read


def circuit_fraction(subject: Subject, n_pairs: int = 150, pool_size: int = 200,
                     seed: int = 0, steps: int = 8) -> dict:
    """(c) of the module doc: the fewest top-|EAP-IG| component edges recovering 95 % on every pool."""
    model, config, split = subject.model, subject.config, subject.split
    gm = circuit.GraphModel.from_model(model, config.model, positions=False)
    pairs = circuit.resample_pairs(split, n_pairs, seed)
    scores = circuit.eap_ig_scores(gm, pairs, circuit.baseline(gm, pairs), steps).detach()
    size, whole, (low, high) = smallest_circuit_with_interval(gm, split, scores, RECOVERED, pool_size, seed)
    if whole < RECOVERED:
        return {"fraction": INCONCLUSIVE, "edges": INCONCLUSIVE, "graph_edges": len(scores),
                "fraction_ci95": [INCONCLUSIVE, INCONCLUSIVE],
                "why": f"the whole graph recovers only {whole:.2f} < {RECOVERED} on some pool"}
    return {"fraction": size / len(scores), "edges": size, "graph_edges": len(scores),
            "fraction_ci95": [low / len(scores), high / len(scores)], "why": None}


def verdict(separation_score, same) -> str:
    """``modular`` / ``entangled`` / ``inconclusive`` from (a) and (b) (module doc)."""
    if separation_score != INCONCLUSIVE and separation_score < SEPARATION_MIN or same == 0.0:
        return "entangled"
    if separation_score != INCONCLUSIVE and same == 1.0:
        return "modular"
    return INCONCLUSIVE


def measure(subject: Subject, seed: int = 0, *, n_pairs: int = 120,
            same_mlp_n: int = 150, pool_size: int = 200, steps: int = 8, threads: int | None = 1,
            learned_at: float = outcome.GENERALISED) -> dict:
    """Every ``modularity_*`` column of the module doc for one model, plus the exhaustive accuracies
    (``zero_var_heldout``, ``two_var_union``) and the located roles (``binder``, ``router``, ``adder``,
    ``gatherer``: where they sit, or "none", whatever the accuracies). ``learned_at``: the accuracy both
    exhaustive sets must reach to be measured (a proxy may ask less than the headline, and must say so)."""
    with torch_threads(threads):
        accuracies = exhaustive_accuracies(subject, seed)
        row = {"zero_var_heldout": accuracies["zero_var_heldout"]["accuracy"],
               "two_var_union": accuracies["two_var_union"]["accuracy"]}
        found = locate.locate(subject, seed)
        roles = {r.role: r.component or "none" for r in (*found.roles(), found.gatherer)}
        if not any(accuracies[k]["total"] for k in ("zero_var_heldout", "two_var_union")):
            why = ("the split holds out nothing, so no exhaustive set can show that the model generalises, which "
                   "modularity is measured on (a model trained without some pairs or operand slots)")
            return {**row, **dict.fromkeys(COLUMNS, INCONCLUSIVE), "modularity_reason": why, **roles}
        if not headline_holds(accuracies, learned_at):
            why = (f"the model has not learned the task (0-var held-out {row['zero_var_heldout']:.3f}, 2-var union "
                   f"{row['two_var_union']:.3f}; measuring needs both >= {learned_at})")
            return {**row, **dict.fromkeys(COLUMNS, INCONCLUSIVE), "modularity_reason": why, **roles}
        a = separation(subject, n_pairs, seed, steps)
        b = same_adder(subject, same_mlp_n, seed)
        c = circuit_fraction(subject, n_pairs, pool_size, seed, steps)
    conclusive = a["separation"] != INCONCLUSIVE
    top = lambda key: a[key].index[0] if conclusive and len(a[key]) else INCONCLUSIVE  # noqa: E731
    by_attribution = attribution_adder(a["adding"]) if conclusive else None
    located = found.adder.component
    reasons = [f"separation: {a['why']}" if a["why"] else None,
               f"circuit: {c['why']}" if c["why"] else None]
    row.update({
        "modularity_separation": a["separation"],
        "modularity_separation_low": a["separation_ci95"][0] if conclusive else INCONCLUSIVE,
        "modularity_separation_high": a["separation_ci95"][1] if conclusive else INCONCLUSIVE,
        "modularity_overlap": a.get("overlap", INCONCLUSIVE),
        "modularity_binding_component": top("binding"),
        "modularity_adding_component": top("adding"),
        "modularity_located_adder": located or f"none ({found.adder.score:.2f} < {found.adder.threshold})",
        "modularity_attribution_adder": (by_attribution or "none") if conclusive else INCONCLUSIVE,
        "modularity_adders_agree": (located is not None and located == by_attribution) if conclusive else INCONCLUSIVE,
        "modularity_same_adder": b["same_adder"],
        "modularity_same_mlp_reason": b["reason"],
        "modularity_circuit_edges": c["edges"],
        "modularity_graph_edges": c["graph_edges"],
        "modularity_circuit_fraction": c["fraction"],
        "modularity_circuit_fraction_low": c["fraction_ci95"][0],
        "modularity_circuit_fraction_high": c["fraction_ci95"][1],
        "modularity_verdict": verdict(a["separation"], b["same_adder"]),
        "modularity_reason": "; ".join(r for r in reasons if r) or None,
        **roles,
    })
    return row
