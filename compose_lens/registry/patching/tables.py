"""Activation patching: which activations carry the answer from a clean prompt to a corrupted one.

The method (ROME; Wang et al.'s IOI; TransformerLens ``patching``): take a **clean** prompt and a
**corrupted** one that differ in one token and so in their answers (:mod:`compose_lens.data.pairs`: the
one-token corruptions ``value``, ``variable``, ``constant``); run the corrupted prompt with one *site* (a
component, a layer, a position, possibly a head) written from the clean run, the rest of the forward pass
following from it; read the **logit difference** ``LD = logit[clean answer] - logit[corrupted answer]`` at
``=``. The *normalised* logit difference of a site,

    (LD_patched - LD_corrupted) / (LD_clean - LD_corrupted),

is 0 when the site carries nothing that distinguishes the two prompts, 1 when it alone restores the clean
answer. Over many pairs it is the ratio of the mean differences (stable where single pairs have small
denominators), with a percentile bootstrap interval over the pairs (:func:`normalised_with_ci`).

Components, in TransformerLens's hook names (:data:`compose_lens.model.tl.PATCH_HOOKS`): the residual stream
before / between / after a block (``resid_pre``, ``resid_mid``, ``resid_post``), ``attn_out``, ``mlp_out``
and the head output ``z`` (one site per head). ``layer`` is the paper's number (from 1), ``block``
TransformerLens's ``blocks.N`` (from 0): paper layer 1 is ``blocks.0``.

**Every site at once.** :func:`patched_values` asks :meth:`compose_lens.model.forward.Forward.patched`: for the
study's architecture :mod:`compose_lens.model.patch_engine` computes every site of a kind at once from the
weights; any other runs through the hooks, one forward of (sites x prompts) rows per (component, layer).
``experiments/bench_patching.py`` checks both against the TransformerLens loop. Finer, through the bridge's
hooks: :func:`head_patching_table` (a head's query, key, value, pattern or output per position) and
:func:`path_patching` (a sender's output reaching one receiver alone, Wang et al.'s two steps).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

import pandas as pd
import torch

from compose_lens.core import stats
from compose_lens.analysis import metrics
from compose_lens.data.pairs import (PromptPairs, QUERY_ROLES, ROLES, as_prompt_pairs, make_prompt_pairs,
                                     position_roles, role_names)
from compose_lens.core.config import HEAD_COMPONENTS, ModelConfig
from compose_lens.core.errors import ComposeLensError
from compose_lens.data import streams
from compose_lens.training.evaluate import answer_logits
from compose_lens.model.forward import Forward, Site
from compose_lens.data.safety import check_finite_logits
from compose_lens.model import tl
from compose_lens.model.patch_engine import COMPONENTS
from compose_lens.training.subject import Subject


def patch_site(component: str, layer: int, position: int, head: int | None = None) -> Site:
    """The :class:`~compose_lens.model.forward.Site` of ``component`` of ``blocks.{layer}`` at ``position``."""
    return Site(tl.hook_name(component, layer), position, head)


def head_column(s: Site) -> int:
    """The table's ``head`` column: the head, or -1 for a whole component."""
    return -1 if s.head is None else s.head


def all_sites(cfg: ModelConfig, components=COMPONENTS) -> list[Site]:
    """Every (component, layer, position[, head]) of a model, layer-major."""
    sites = []
    for component in components:
        if component not in COMPONENTS:
            raise ComposeLensError(f"component {component!r}: use one of {', '.join(COMPONENTS)}")
        heads = range(cfg.n_heads) if component == "z" else [None]
        sites += [patch_site(component, layer, position, h) for layer in range(cfg.n_layers)
                  for position in range(cfg.n_ctx) for h in heads]
    return sites


def patched_values(model: tl.Model, cfg: ModelConfig, pairs: PromptPairs, sites: list[Site],
                   metric: metrics.MetricLike = metrics.DEFAULT, fast: bool | None = None,
                   chunk: int = 128) -> torch.Tensor:
    """Logit differences (or ``metric``) (S, N) of the corrupted prompts with each site patched from the
    clean ones, every site at once (the module doc; the bridge's hooks with ``fast=False``)."""
    fn = metrics.resolve(metric)[1]
    return Forward(model, cfg, fast).patched(pairs.clean, pairs.corrupted, sites,
                                             lambda logits, rows: metrics.values(fn, logits, pairs.answers[rows]),
                                             chunk=chunk)


def baseline_logit_diffs(model: tl.Model, pairs: PromptPairs, cfg: ModelConfig | None = None,
                         metric: metrics.MetricLike = metrics.DEFAULT) -> tuple[torch.Tensor, torch.Tensor]:
    """(clean, corrupted) logit differences (or ``metric``) (N,) from the model's own forward, or with
    ``cfg`` from the fastest exact one (:func:`compose_lens.training.evaluate.answer_logits`: ~10x less here)."""
    fn = metrics.resolve(metric)[1]
    with torch.no_grad():
        if cfg is not None:
            logits = answer_logits(model, cfg, torch.cat([pairs.clean, pairs.corrupted]))
            clean, corrupted = logits[: len(pairs)], logits[len(pairs):]
        else:
            clean, corrupted = model(pairs.clean)[:, -1].float(), model(pairs.corrupted)[:, -1].float()
            check_finite_logits(torch.cat([clean, corrupted]))
        return metrics.values(fn, clean, pairs.answers), metrics.values(fn, corrupted, pairs.answers)


def normalised_with_ci(patched: torch.Tensor, clean: torch.Tensor, corrupted: torch.Tensor, *,
                       n_boot: int = 1000, confidence: float = 0.95, seed: int = 0,
                       present: torch.Tensor | None = None):
    """Normalised logit difference per site (``patched`` (S, N)), the ratio of means over pairs, and its
    bootstrap interval (the same resample of pairs for every site). ``present`` (S, N): which pairs a row
    averages over (a token role some prompts lack); the denominator always uses every pair."""
    S, N = patched.shape
    mask = torch.ones(S, N, dtype=torch.float64) if present is None else present.double()
    gain = torch.nan_to_num(patched.double() - corrupted.double()) * mask
    scale = clean.double() - corrupted.double()
    value = gain.sum(1) / mask.sum(1).clamp_min(1) / scale.mean()
    g = streams.seeded_generator(seed)
    counts = torch.zeros(n_boot, N, dtype=torch.float64)
    counts.scatter_add_(1, stats.bootstrap_draws(N, g, n_boot), torch.ones(n_boot, N, dtype=torch.float64))
    boot = (gain @ counts.T) / (mask @ counts.T).clamp_min(1) / (counts @ scale / N).unsqueeze(0)  # (S, n_boot)
    low, high = stats.percentile_interval(boot, confidence, axis=1)
    # below float32's resolution of the ratio a score is noise: written as 0, not -3.2e-08
    return tuple(stats.snap_to_zero(v).float() for v in (value, low, high))


def group_by_role(sites: list[Site], patched: torch.Tensor, roles: torch.Tensor, names: tuple[str, ...] = ROLES):
    """Per (component, layer, head) and role: each prompt's mean patched logit difference over the
    positions with that role, NaN where a prompt has none. Returns (keys: (component, block, head, role)
    per row, values (R, N), positions per prompt (R, N))."""
    groups: dict[tuple[str, int, int], dict[int, int]] = {}
    for j, s in enumerate(sites):
        groups.setdefault((s.component, s.layer, head_column(s)), {})[s.position] = j
    onehot = torch.nn.functional.one_hot(roles, len(names)).double()  # (N, n, R)
    keys, values, counts = [], [], []
    for (component, block, head), by_position in groups.items():
        positions = sorted(by_position)
        per_site = patched[[by_position[p] for p in positions]].double()  # (n, N)
        hot = onehot[:, positions]  # (N, n, R)
        total = torch.einsum("pn,npr->rn", per_site, hot)
        count = hot.sum(1).T  # (R, N)
        values.append(torch.where(count > 0, total / count.clamp_min(1), torch.nan))
        counts.append(count)
        keys += [(component, block, head, role) for role in names]
    return keys, torch.cat(values), torch.cat(counts)


def _common_columns(table: pd.DataFrame, clean, corrupted, pairs: PromptPairs, by: str,
                    metric_name: str = metrics.DEFAULT) -> pd.DataFrame:
    table = table.assign(clean_logit_diff=float(clean.mean()), corrupted_logit_diff=float(corrupted.mean()),
                         n_pairs=len(pairs), corruption=pairs.corruption, by=by)
    return table if metric_name == metrics.DEFAULT else table.rename(columns=metrics.column_names(metric_name))


def warn_if_few_pairs_differ(clean: torch.Tensor, corrupted: torch.Tensor, metric_name: str) -> int:
    """How many pairs the model tells apart (clean and corrupted metric differ); a one-line warning where
    that is 1 or under 5 % of them (``--metric accuracy`` of a barely trained model, say)."""
    differing = int(((clean - corrupted).abs() > 1e-6).sum())
    if differing <= 1 or differing < 0.05 * len(clean):
        logging.getLogger(__name__).warning(
            f"only {differing} of {len(clean)} prompt pairs have a different clean and corrupted {metric_name}: the "
            f"normalised values rest on {'that pair' if differing == 1 else 'those pairs'}; use more pairs "
            f"(--n-pairs) or another --metric")
    return differing


def patching_table(subject: Subject, *, n_pairs: int = 1000,
                   corruption: str = "value", components=COMPONENTS, seed: int = 0,
                   n_boot: int = 1000, by: str = "role", pairs=None,
                   metric: metrics.MetricLike = metrics.DEFAULT) -> pd.DataFrame:
    """The (component x layer[ x head]) sweep over ``n_pairs`` prompt pairs, by token role or position.

    ``by="role"`` (default): one row per role of :data:`ROLES` (each prompt's positions with that role,
    :func:`compose_lens.data.pairs.position_roles`, averaged, then the ratio of means over the prompts that
    have it); ``by="position"``: one row per absolute position, ``role`` being the query role or ``context``.
    ``pairs``: your own prompt pairs instead of ``n_pairs`` made by ``corruption`` (a pairs file, a DataFrame
    with ``clean`` / ``corrupted`` columns or a list of (clean, corrupted),
    :func:`compose_lens.data.pairs.as_prompt_pairs`; ``corruption`` reads ``user``). ``metric``:
    ``logit_diff`` (default), ``prob``, ``accuracy`` or a function ``metric(logits, answers) -> (N,)``
    (:mod:`compose_lens.analysis.metrics`).

    Columns: component, layer (the paper's, from 1), block (``blocks.N``), head (-1 but for ``z``), role,
    [position | positions_per_prompt, n_prompts], mean (normalised logit difference, or metric), ci_low,
    ci_high (95 % bootstrap), logit_diff (mean patched), clean_logit_diff, corrupted_logit_diff, n_pairs,
    corruption, by; with another ``metric`` the three logit-difference columns take its name (``prob``,
    ``clean_prob``, ``corrupted_prob``).
    """
    return _sites_table(subject, subject.model, lambda cfg: all_sites(cfg, components), None, n_pairs, corruption,
                        seed, n_boot, by, pairs, metric)


def _sites_table(subject: Subject, model: tl.Model, sites_of, fast: bool | None, n_pairs: int, corruption: str,
                 seed: int, n_boot: int, by: str, pairs, metric: metrics.MetricLike) -> pd.DataFrame:
    """The table of :func:`patching_table` and :func:`head_patching_table`, of the sites ``sites_of(cfg)``."""
    config, split = subject.config, subject.split
    if by not in ("role", "position"):
        raise ComposeLensError(f"by={by!r}: use role or position")
    metric_name, metric_fn = metrics.resolve(metric)
    pairs = make_prompt_pairs(split, n_pairs, corruption, seed) if pairs is None else as_prompt_pairs(split.task, pairs)
    sites = sites_of(config.model)
    patched = patched_values(model, config.model, pairs, sites, metric=metric_fn, fast=fast)
    clean, corrupted = baseline_logit_diffs(model, pairs, config.model, metric=metric_fn)
    _check_separable(clean, corrupted, metric_name)
    warn_if_few_pairs_differ(clean, corrupted, metric_name)
    if by == "position":
        C = split.task.context_len
        mean, low, high = normalised_with_ci(patched, clean, corrupted, n_boot=n_boot, seed=seed)
        table = pd.DataFrame({
            "component": [s.component for s in sites], "layer": [s.layer + 1 for s in sites],
            "block": [s.layer for s in sites], "head": [head_column(s) for s in sites],
            "role": ["context" if s.position < C else QUERY_ROLES[s.position - C] for s in sites],  # context: it varies
            "position": [s.position for s in sites], "mean": mean.tolist(), "ci_low": low.tolist(),
            "ci_high": high.tolist(), "logit_diff": patched.mean(1).tolist()})
        return _common_columns(table, clean, corrupted, pairs, by, metric_name)
    keys, values, counts = group_by_role(sites, patched, position_roles(split.task, pairs.clean),
                                         role_names(split.task))
    present = counts > 0
    mean, low, high = normalised_with_ci(values, clean, corrupted, n_boot=n_boot, seed=seed, present=present)
    n_prompts = present.sum(1)
    table = pd.DataFrame({
        "component": [k[0] for k in keys], "layer": [k[1] + 1 for k in keys], "block": [k[1] for k in keys],
        "head": [k[2] for k in keys], "role": [k[3] for k in keys],
        "positions_per_prompt": (counts.sum(1) / n_prompts.clamp_min(1)).tolist(),
        "n_prompts": n_prompts.tolist(), "mean": mean.tolist(), "ci_low": low.tolist(), "ci_high": high.tolist(),
        "logit_diff": (torch.nan_to_num(values).sum(1) / n_prompts.clamp_min(1)).tolist()})
    table = table[table["n_prompts"] > 0].reset_index(drop=True)
    return _common_columns(table, clean, corrupted, pairs, by, metric_name)


def _check_separable(clean: torch.Tensor, corrupted: torch.Tensor, metric_name: str) -> None:
    """Refuse to normalise where the clean and corrupted runs have the same mean metric."""
    if abs(float((clean - corrupted).mean())) < 1e-6:
        what = "logit difference" if metric_name == metrics.DEFAULT else metric_name
        raise ComposeLensError(f"clean and corrupted prompts have the same mean {what}: "
                               "the model does not tell them apart, so nothing can be normalised")


# -- per-head inputs, and path patching, through the bridge's hooks ---------------------------


def _bridge(subject: Subject, what: str) -> tl.Model:
    if isinstance(subject.model, tl.Weights):
        raise ComposeLensError(f"{what} reads the TransformerLens bridge's hooks, and this model was loaded "
                               "without the bridge: load it with load_subject(..., bridge=True), the default")
    return subject.model


def head_sites(cfg: ModelConfig, components=HEAD_COMPONENTS) -> list[Site]:
    """Every (component, layer, position, head) of the per-head components, layer-major (``pattern``: the
    destination position, whose whole row is patched)."""
    for component in components:
        if component not in HEAD_COMPONENTS:
            raise ComposeLensError(f"component {component!r}: use one of {', '.join(HEAD_COMPONENTS)}")
    return [patch_site(component, layer, position, head) for component in components for layer in range(cfg.n_layers)
            for position in range(cfg.n_ctx) for head in range(cfg.n_heads)]


def head_patching_table(subject: Subject, *,
                        components=("q", "k", "v", "pattern"), n_pairs: int = 1000, corruption: str = "value",
                        seed: int = 0, n_boot: int = 1000, by: str = "role", pairs=None,
                        metric: metrics.MetricLike = metrics.DEFAULT) -> pd.DataFrame:
    """Per-head patching of a head's query, key, value, attention pattern or output
    (:data:`HEAD_COMPONENTS`), one site per (layer, position, head), by token role or position.

    What :func:`patching_table` does for whole components, for each head's inputs, through the bridge's
    hooks (``blocks.L.attn.hook_q`` / ``_k`` / ``_v`` / ``_pattern`` / ``_z``): a patched key or value
    changes what every later query reads at that position; a patched query, what that position reads;
    ``pattern`` patches one destination position's whole row of the head's attention (which positions it
    reads, not what it reads there), and the table's ``position`` / ``role`` is then the destination's.
    These are the numbers of TransformerLens's ``get_act_patch_attn_head_{q,k,v,pattern,out}_by_pos``,
    many sites per forward. ``subject`` needs its bridge; the other arguments and the columns are
    :func:`patching_table`'s.
    """
    return _sites_table(subject, _bridge(subject, "per-head patching"), lambda cfg: head_sites(cfg, components),
                        False, n_pairs, corruption, seed, n_boot, by, pairs, metric)


_PATH_END = re.compile(r"blocks\.(\d+)\.(?:head(\d+)|(mlp))(?:\.(\w+))?")
RECEIVER_INPUTS = ("q", "k", "v")


@dataclass(frozen=True)
class PathEnd:
    """One end of a path: a head (``head`` >= 0) or a block's MLP (``head`` -1); a sender is its output,
    a receiver a head's query, key or value (``input``) or the MLP's input."""

    block: int
    head: int = -1
    input: str = ""

    @property
    def name(self) -> str:
        """``blocks.0.head0``, ``blocks.1.head0.v``, ``blocks.1.mlp``."""
        part = "mlp" if self.head < 0 else f"head{self.head}"
        return f"blocks.{self.block}.{part}" + (f".{self.input}" if self.input else "")

    @property
    def writes_at(self) -> float:
        """Where a sender's output joins the residual stream: after its block's attention (a head)
        or at the end of its block (an MLP)."""
        return self.block + (0.5 if self.head >= 0 else 1.0)

    @property
    def reads_at(self) -> float:
        """Where a receiver reads the residual stream: at its block's start (q / k / v) or after its
        block's attention (an MLP)."""
        return self.block + (0.0 if self.head >= 0 else 0.5)


def path_end(text: str, side: str, cfg: ModelConfig | None = None) -> PathEnd:
    """Parse a sender (``blocks.L.headH``, ``blocks.L.mlp``) or a receiver (``blocks.L.headH.q|k|v``,
    ``blocks.L.mlp``); with ``cfg``, check the model has it. One line of ComposeLensError otherwise."""
    found = _PATH_END.fullmatch(text.strip())
    shape = "blocks.L.headH or blocks.L.mlp" if side == "sender" else "blocks.L.headH.q|k|v or blocks.L.mlp"
    if found is None:
        raise ComposeLensError(f"{side} {text!r}: name it as {shape} (TransformerLens's block numbers, from 0)")
    block, head, mlp, part = found.groups()
    end = PathEnd(int(block), -1 if mlp else int(head), part or "")
    if side == "sender" and part:
        raise ComposeLensError(f"sender {text!r}: a sender is a head's or an MLP's output, {shape}, "
                               f"without .{part}")
    if side == "receiver" and end.head >= 0 and part not in RECEIVER_INPUTS:
        head = PathEnd(end.block, end.head).name  # the head itself: blocks.1.head0, without the input asked
        raise ComposeLensError(f"receiver {text!r}: say which input of the head receives: "
                               f"{head}.q, {head}.k or {head}.v")
    if side == "receiver" and mlp and part:
        raise ComposeLensError(f"receiver {text!r}: an MLP has one input; name it {end.name}")
    if cfg is not None:
        if end.block >= cfg.n_layers:
            raise ComposeLensError(f"{side} {text!r}: the model has blocks.0 to blocks.{cfg.n_layers - 1}")
        if end.head >= cfg.n_heads:
            raise ComposeLensError(f"{side} {text!r}: the model has heads 0 to {cfg.n_heads - 1} per block")
        if end.head < 0 and end.block not in cfg.mlp_blocks:
            have = ", ".join(f"blocks.{b}.mlp" for b in cfg.mlp_blocks) or "none"
            raise ComposeLensError(f"{side} {text!r}: blocks.{end.block} has no MLP (the model's MLPs: {have})")
    return end


def check_path(sender: PathEnd, receiver: PathEnd) -> None:
    """Refuse, in one line, a receiver that reads the residual stream before the sender writes it."""
    if receiver.reads_at < sender.writes_at:
        raise ComposeLensError(f"no path {sender.name} -> {receiver.name}: {receiver.name} reads the residual "
                               f"stream before {sender.name} writes to it; give a receiver in a later block "
                               "(or the MLP of the sender head's own block)")


def path_patched_values(model: tl.Model, cfg: ModelConfig, pairs: PromptPairs, sender: PathEnd,
                        receivers: list[PathEnd], metric: metrics.MetricLike = metrics.DEFAULT,
                        chunk: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    """The metric (R, N) with only the path sender -> each receiver patched, and (N,) with the sender
    patched alone (:meth:`compose_lens.model.forward.Forward.path_patched`: Wang et al.'s two steps)."""
    for receiver in receivers:
        check_path(sender, receiver)
    fn = metrics.resolve(metric)[1]

    def site(end: PathEnd, component: str) -> Site:
        return Site(tl.hook_name(component, end.block), None, None if end.head < 0 else end.head)

    return Forward(model, cfg).path_patched(
        pairs.clean, pairs.corrupted, site(sender, "z" if sender.head >= 0 else "mlp_out"),
        [site(r, r.input or "mlp_pre") for r in receivers],
        lambda logits, rows: metrics.values(fn, logits, pairs.answers[rows]), chunk)


def path_patching(subject: Subject, sender: str = "blocks.0.head0", receivers=("blocks.1.head0.v",), *,
                  n_pairs: int = 1000, corruption: str = "value", seed: int = 0, n_boot: int = 1000, pairs=None,
                  metric: metrics.MetricLike = metrics.DEFAULT) -> pd.DataFrame:
    """Path patching: how much of the clean answer the sender's output restores when it reaches only the
    receiver (:func:`path_patched_values`), per receiver, normalised as :func:`patching_table` normalises
    (0: the corrupted run, 1: the clean run), with a bootstrap interval over the prompt pairs.

    ``sender``: ``blocks.L.headH`` (a head's output) or ``blocks.L.mlp``; ``receivers``: one or several of
    ``blocks.L.headH.q`` / ``.k`` / ``.v`` or ``blocks.L.mlp`` (its input), each after the sender in the
    forward pass (one line of ComposeLensError otherwise). A last row, receiver ``all``, is the sender patched alone: every path from it at once
    (the paths to every receiver need not sum to it: the readers interact).

    Columns: path, sender, receiver, mean, ci_low, ci_high, logit_diff (mean patched), clean_logit_diff,
    corrupted_logit_diff, n_pairs, corruption (with ``metric`` renamed as in :func:`patching_table`).
    """
    model, config, split = _bridge(subject, "path patching"), subject.config, subject.split
    source = path_end(sender, "sender", config.model)
    named = [receivers] if isinstance(receivers, str) else list(receivers)
    targets = [path_end(r, "receiver", config.model) for r in named]
    if not targets:
        raise ComposeLensError("path patching: give at least one receiver")
    for target in targets:
        check_path(source, target)
    metric_name, metric_fn = metrics.resolve(metric)
    pairs = make_prompt_pairs(split, n_pairs, corruption, seed) if pairs is None else as_prompt_pairs(split.task, pairs)
    paths, total = path_patched_values(model, config.model, pairs, source, targets, metric_fn)
    clean, corrupted = baseline_logit_diffs(model, pairs, config.model, metric=metric_fn)
    _check_separable(clean, corrupted, metric_name)
    patched = torch.cat([paths, total.unsqueeze(0)])
    mean, low, high = normalised_with_ci(patched, clean, corrupted, n_boot=n_boot, seed=seed)
    names = [t.name for t in targets] + ["all"]
    table = pd.DataFrame({"path": [f"{source.name} -> {n}" for n in names], "sender": source.name,
                          "receiver": names, "mean": mean.tolist(), "ci_low": low.tolist(),
                          "ci_high": high.tolist(), "logit_diff": patched.mean(1).tolist()})
    return _common_columns(table, clean, corrupted, pairs, "path", metric_name).drop(columns="by")
