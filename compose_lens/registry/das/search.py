"""Distributed alignment search (DAS) for the variable-value binding, with its controls (docs/methods.md).

**The question.** In ``b=7, e=5, b+23=?`` the model must answer with the value *bound* to the queried
variable ``b``. If the study's circuit is right (layer 1 tags each value with its variable, layer 2 routes
the queried variable's value to ``=``, MLP2 adds), some low-dimensional *subspace* of the residual stream
along that path holds "the value of the queried variable".

**The intervention** (an *interchange intervention*, Geiger et al.). Run a *base* (``b=7, e=5, b+23=?``,
answer 30), but at one site (a hook and a position) replace its coordinates inside a subspace ``B`` (an
orthonormal ``d_model x k`` basis) with those of a *source* that queries the same variable with another value
and another constant (``c=2, b=40, 11+b=?``)::

    h' = h_base + (h_source - h_base) B B^T

If ``B`` holds the bound value, the model answers ``40 + 23 = 4`` (mod 59), a number neither run gives. The
*interchange-intervention accuracy* (IIA) is how often it does on held-out pairs; DAS *learns* ``B`` by
gradient descent towards that counterfactual answer, the basis kept orthonormal.

**The sites** (:data:`SITES`) and **controls**: docs/methods.md. The placebo site, the query's variable token
after layer 1, names *which* variable to fetch; one attention layer there reads tokens, not bindings, and base
and source query the same variable, so interchanging anything there should change nothing. The controls
(DAS fits arbitrary label maps and finds effects in random models, Arora et al. 2024): a random basis of the
same rank, and DAS towards an arbitrary fixed answer per (source value, base constant) at the largest rank
(the most expressive subspace: the hardest test).

**Why TransformerLens's own DAS.** TransformerLens 4.3 ships the whole method
(``transformer_lens.tools.analysis.interchange``) for any hooked model with one position per example; this
module only builds the study's pairs, sites and counterfactual answers, and tabulates (pyvene 0.1.8 would add
a dependency for the same computation). ``fit_das`` refuses a model in train mode.

Pairs are 1-var sequences rendered from the training rows (both operand sides, every allowed variable), each
base paired with a source that queries the same variable on the same side with a different value *and* a
different constant. Only pairs whose base and source the model answers correctly are kept
(:attr:`BindingPairs.kept`); two thirds train DAS, the rest score it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from compose_lens.core import progress as progress_lines
from compose_lens.core.config import DAS_RANKS
from compose_lens.core.errors import ComposeLensError
from compose_lens.data.sampler import render
from compose_lens.data.pools import ONE_VAR
from compose_lens.data.split import Split, row_types, training_rows
from compose_lens.model import tl


@dataclass(frozen=True)
class BindingSite:
    """A named DAS site: a hook (``{last}``: the last block, :func:`site_hook`) at a token *role* found per
    sequence of a pair (:meth:`BindingPairs.positions`; so not a :class:`compose_lens.model.forward.Site`,
    whose position is one for every sequence), and what the study's circuit predicts there."""

    name: str
    hook: str
    position: str  # "value": the queried variable's value token; "equals"; "query_variable"
    carries_value: bool  # the study's story: does the bound value live here?
    description: str


SITES = (
    BindingSite("value_after_layer1", "blocks.0.hook_resid_post", "value", True,
         "the queried variable's value token in the context, after layer 1"),
    BindingSite("equals_before_mlp2", "blocks.{last}.hook_resid_mid", "equals", True,
         "'=' after layer 2's routing: the MLP2 input"),
    BindingSite("query_variable_after_layer1", "blocks.0.hook_resid_post", "query_variable", False,
         "the query's variable token after layer 1 (placebo: names the variable, holds no value)"),
)
SITE_NAMES = tuple(s.name for s in SITES)


@dataclass
class BindingPairs:
    """Base and source sequences that query the same variable with different values; ``target``: the
    counterfactual answer (the source's value plus the base's constant, mod p). Positions are per sequence."""

    base: torch.Tensor
    source: torch.Tensor
    base_label: torch.Tensor
    source_label: torch.Tensor
    target: torch.Tensor
    key: list  # (source value, base constant): what the arbitrary-label control maps to a class
    base_value_pos: torch.Tensor
    source_value_pos: torch.Tensor
    base_query_pos: torch.Tensor
    source_query_pos: torch.Tensor
    drawn: int = 0  # pairs drawn before the correctness filter
    kept: int = 0

    def __len__(self) -> int:
        return len(self.target)

    def subset(self, index: torch.Tensor) -> "BindingPairs":
        pick = index.tolist()
        fields = {name: getattr(self, name)[index] for name in
                  ("base", "source", "base_label", "source_label", "target", "base_value_pos",
                   "source_value_pos", "base_query_pos", "source_query_pos")}
        return BindingPairs(**fields, key=[self.key[i] for i in pick], drawn=self.drawn, kept=len(pick))

    def positions(self, site: BindingSite) -> tuple[torch.Tensor, torch.Tensor]:
        """The (base, source) position of each pair at ``site``."""
        if site.position == "value":
            return self.base_value_pos, self.source_value_pos
        if site.position == "query_variable":
            return self.base_query_pos, self.source_query_pos
        last = torch.full_like(self.base_value_pos, self.base.shape[1] - 1)
        return last, last


def binding_pairs(split: Split, n: int, seed: int = 0) -> BindingPairs:
    """``n`` base/source pairs of 1-var training sequences (see the module doc), unfiltered."""
    task = split.task
    rows = training_rows(split)
    one_var = rows[torch.isin(row_types(rows), torch.tensor([kind.index for kind in ONE_VAR]))]
    if len(one_var) == 0:
        raise ComposeLensError("the split has no 1-var training rows (variables_in_training is off): "
                               "DAS of the variable binding needs sequences with variables")
    rng = np.random.default_rng(seed)
    left = one_var[:, 2] >= 0
    value = torch.where(left, one_var[:, 0], one_var[:, 1])
    constant = torch.where(left, one_var[:, 1], one_var[:, 0])
    groups = {key: np.flatnonzero(((one_var[:, 2] == key[0]) & (one_var[:, 3] == key[1])).numpy())
              for key in {(int(v), int(w)) for v, w in one_var[:, 2:].tolist()}}
    bases, sources = [], []
    for b in rng.integers(0, len(one_var), size=4 * n):
        group = groups[(int(one_var[b, 2]), int(one_var[b, 3]))]
        for s in rng.choice(group, size=min(32, len(group)), replace=False):
            if value[s] != value[b] and constant[s] != constant[b]:
                bases.append(int(b))
                sources.append(int(s))
                break
        if len(bases) == n:
            break
    if len(bases) < n:
        raise ComposeLensError(f"only {len(bases)} of {n} base/source pairs could be drawn from this split's "
                               f"1-var training rows; ask for fewer pairs")
    b_idx, s_idx = torch.tensor(bases), torch.tensor(sources)
    base = render(split, one_var[b_idx], torch.Generator().manual_seed(seed))
    source = render(split, one_var[s_idx], torch.Generator().manual_seed(seed + 1))
    base_left = left[b_idx]  # the base's variable side keeps its place: the source's value enters there
    target = torch.where(base_left, task.answer(value[s_idx], constant[b_idx]),
                         task.answer(constant[b_idx], value[s_idx]))

    def value_position(tokens: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        variable = torch.where(rows[:, 2] >= 0, rows[:, 2], rows[:, 3]) + task.first_var_token
        at = tokens[:, : task.context_len] == variable.unsqueeze(1)
        return at.float().argmax(1) + 1

    def query_position(rows: torch.Tensor) -> torch.Tensor:
        return task.context_len + 1 + (rows[:, 2] < 0).long()  # "+ LHS RHS =": LHS at C + 1, RHS at C + 2

    return BindingPairs(base.tokens, source.tokens, base.labels, source.labels, target,
                        list(zip(value[s_idx].tolist(), constant[b_idx].tolist())),
                        value_position(base.tokens, base.rows), value_position(source.tokens, source.rows),
                        query_position(base.rows), query_position(source.rows), drawn=n, kept=n)


def task_logits(model):
    """``tokens -> logits at =`` (B, p): what the interchange functions read."""
    return lambda tokens: model(tokens)[:, -1, :]


def correct_pairs(model, pairs: BindingPairs, batch_size: int = 512) -> BindingPairs:
    """The pairs whose base and source the model answers correctly (DAS asks the model to move a
    value it can use; a pair it fails without any intervention says nothing about the subspace)."""
    read = task_logits(model)
    with torch.no_grad():
        ok = torch.cat([(read(pairs.base[i:i + batch_size]).argmax(-1) == pairs.base_label[i:i + batch_size])
                        & (read(pairs.source[i:i + batch_size]).argmax(-1) == pairs.source_label[i:i + batch_size])
                        for i in range(0, len(pairs), batch_size)])
    return pairs.subset(ok.nonzero().flatten())


def site_hook(site: BindingSite, n_layers: int) -> str:
    return site.hook.format(last=n_layers - 1)


def interchange_accuracy(model, site: BindingSite, basis: torch.Tensor, pairs: BindingPairs,
                         targets: torch.Tensor | None = None) -> dict[str, float]:
    """IIA of ``basis`` at ``site`` on ``pairs`` (against ``targets``, default the counterfactual
    answers), and how often the base's own answer survives the interchange."""
    from transformer_lens.tools.analysis import interchange as ti

    hook = site_hook(site, tl.size(model, "n_layers"))
    base_pos, source_pos = pairs.positions(site)
    read = task_logits(model)
    source_acts = ti.collect_activations(model, hook, pairs.source, read, positions=source_pos)
    logits = ti.intervened_logits(model, hook, ti.SubspaceInterchange(basis), pairs.base, source_acts, read,
                                  positions=base_pos)
    answer = logits.argmax(-1)
    targets = pairs.target if targets is None else targets
    return {"iia": float((answer == targets).float().mean()),
            "keeps_base_answer": float((answer == pairs.base_label).float().mean())}


def fit_binding_subspace(model, site: BindingSite, pairs: BindingPairs, rank: int, targets: torch.Tensor | None = None,
                         epochs: int = 15, lr: float = 1e-2, batch_size: int = 64, seed: int = 0):
    """TransformerLens's :func:`fit_das` at ``site`` on ``pairs`` (towards ``targets``, default the
    counterfactual answers): the learned ``d_model x rank`` basis and its loss per epoch."""
    from transformer_lens.tools.analysis import interchange as ti

    base_pos, source_pos = pairs.positions(site)
    result = ti.fit_das(model, site_hook(site, tl.size(model, "n_layers")), pairs.base, pairs.source,
                        pairs.target if targets is None else targets, task_logits(model), rank=rank,
                        base_positions=base_pos, source_positions=source_pos, epochs=epochs,
                        batch_size=batch_size, lr=lr, seed=seed)
    return result.basis, list(result.losses)


@dataclass(frozen=True)
class DasSettings:
    """How the search runs; every number in the table depends on these."""

    n_pairs: int = 600  # drawn; those the model answers correctly are kept
    ranks: tuple[int, ...] = DAS_RANKS
    sites: tuple[str, ...] = SITE_NAMES
    epochs: int = 15
    lr: float = 1e-2
    batch_size: int = 64
    train_fraction: float = 2 / 3
    arbitrary_control: bool = True
    seed: int = 0

    def check(self, d_model: int) -> None:
        unknown = [s for s in self.sites if s not in SITE_NAMES]
        if unknown:
            raise ComposeLensError(f"unknown DAS site {unknown[0]!r}; the sites are {', '.join(SITE_NAMES)}")
        bad = [r for r in self.ranks if not 1 <= int(r) <= d_model]
        if bad or not self.ranks:
            raise ComposeLensError(f"rank {bad[0] if bad else '(none)'}: give ranks from 1 to d_model={d_model}")
        if self.n_pairs < 30:
            raise ComposeLensError(f"--n-pairs {self.n_pairs}: at least 30 pairs (two thirds train DAS, "
                                   f"one third scores it)")
        if self.epochs < 1:
            raise ComposeLensError(f"epochs={self.epochs}: at least 1")


def das_table(loaded, settings: DasSettings = DasSettings(), progress: bool = False) -> tuple[pd.DataFrame, dict]:
    """IIA of the learned subspace and its controls, per site and rank, on held-out pairs: the table (one row
    per site, rank and control: ``iia``, ``keeps_base_answer``, the final training loss where one was
    trained) and a summary (pairs drawn, kept, train / test sizes, the sites, the settings)."""
    from transformer_lens.tools.analysis import interchange as ti

    model, config = loaded.model, loaded.config
    if isinstance(model, tl.Weights):
        raise ComposeLensError("DAS reads TransformerLens hooks: load the model with bridge=True")
    if config.model.n_layers < 2:
        raise ComposeLensError(f"DAS of the binding needs two layers or more; this model has "
                               f"{config.model.n_layers}")
    settings.check(config.model.d_model)
    model.eval()  # fit_das refuses train mode; loaded models are in eval mode already
    drawn = binding_pairs(loaded.split, settings.n_pairs, settings.seed)
    pairs = correct_pairs(model, drawn)
    if len(pairs) < 30:
        raise ComposeLensError(f"the model answers only {len(pairs)} of {settings.n_pairs} base/source pairs "
                               f"correctly; DAS needs at least 30 (more --n-pairs, or a later checkpoint)")
    order = torch.randperm(len(pairs), generator=torch.Generator().manual_seed(settings.seed))
    n_train = int(round(settings.train_fraction * len(pairs)))
    train, test = pairs.subset(order[:n_train]), pairs.subset(order[n_train:])
    p = config.task.modulus
    arbitrary = ti.arbitrary_targets(pairs.key, p, settings.seed)  # one fixed class per key
    arbitrary_train, arbitrary_test = arbitrary[order[:n_train]], arbitrary[order[n_train:]]
    sites = [s for s in SITES if s.name in settings.sites]
    jobs = [(site, rank) for site in sites for rank in settings.ranks]
    rows = []
    for site, rank in progress_lines.bar(jobs, desc="das", wanted=progress):
        learned, losses = fit_binding_subspace(model, site, train, rank, epochs=settings.epochs, lr=settings.lr,
                                               batch_size=settings.batch_size, seed=settings.seed)
        common = {"site": site.name, "hook": site_hook(site, config.model.n_layers), "position": site.position,
                  "circuit_predicts_value": site.carries_value, "rank": rank}
        rows.append({**common, "control": "learned", **interchange_accuracy(model, site, learned, test),
                     "final_loss": losses[-1]})
        random = ti.random_basis(config.model.d_model, rank, settings.seed + rank)
        rows.append({**common, "control": "random subspace", **interchange_accuracy(model, site, random, test),
                     "final_loss": float("nan")})
        if settings.arbitrary_control and rank == max(settings.ranks):  # the most expressive subspace
            fitted, losses = fit_binding_subspace(model, site, train, rank, arbitrary_train, settings.epochs,
                                                  settings.lr, settings.batch_size, settings.seed)
            rows.append({**common, "control": "arbitrary labels",
                         **interchange_accuracy(model, site, fitted, test, arbitrary_test), "final_loss": losses[-1]})
    table = pd.DataFrame(rows)
    table["chance"] = 1.0 / p
    summary = {"pairs_drawn": drawn.drawn, "pairs_kept": len(pairs), "pairs_train": len(train),
               "pairs_test": len(test), "kept_fraction": len(pairs) / drawn.drawn,
               "sites": {s.name: {"hook": site_hook(s, config.model.n_layers), "position": s.position,
                                  "circuit_predicts_value": s.carries_value, "description": s.description}
                         for s in sites},
               "settings": {**settings.__dict__, "ranks": list(settings.ranks), "sites": list(settings.sites)}}
    return table, summary


def best_rows(table: pd.DataFrame) -> pd.DataFrame:
    """Per site and control, the rank with the highest IIA (the short table the CLI prints)."""
    idx = table.groupby(["site", "control"], sort=False)["iia"].idxmax()
    return table.loc[idx, ["site", "control", "rank", "iia", "keeps_base_answer"]].reset_index(drop=True)

