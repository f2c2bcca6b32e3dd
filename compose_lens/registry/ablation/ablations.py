"""Ablation: remove one part of the model and see which of the nine accuracy pools suffer.

To *ablate* a component is to replace its activation with something that carries
no information about the current prompt, then measure what the model loses:

* **zero** ablation writes 0 (simple, but 0 may be far from anything the model
  ever sees, so it can break more than the component's job);
* **mean** ablation writes the component's mean over a reference batch of
  training-distribution sequences, per position (keeps the typical offset,
  removes the prompt-specific part);
* **resample** ablation writes the activation the component had on a *random
  other* reference sequence (keeps the distribution, destroys the information).

Targets, in the study's words (paper layer 1 = ``blocks.0``, layer 2 = ``blocks.1``): each attention
**head** (its output ``blocks.L.attn.hook_z``), each **MLP** (``blocks.L.hook_mlp_out``), **single neurons**
of the adder MLP (MLP2 in the paper: ``blocks.1.mlp.hook_post``), the **neurons of one key frequency**
together, and the **Fourier directions** of one frequency k in the adder's output: the part of its
contribution to the logits that is a cos / sin of frequency k over the output classes (the basis of
:func:`compose_lens.analysis.fourier.fourier_basis`).

**Which MLP's neurons** (:func:`neuron_subject`): MLP2 in the paper architecture (not located); in any
other the *located* adder (:func:`compose_lens.analysis.locate.locate_adder`), ablated exactly in the last
block and through its direct path before it (:class:`LastPositionMLP`). Where no MLP reaches the adder
threshold (an untrained or stalled model) the neuron and Fourier-direction rows are left out: an MLP that
does not add is never ablated in the adder's place.

Heads and whole MLPs, in every architecture, are ablated in a forward pass (:func:`replacement_hook`,
:func:`ablated_logits`): for the paper architecture :func:`compose_lens.model.fastpath.edited_answer_logits`,
which computes layer 2 at ``=`` only, ~25x less work than the TransformerLens forward (the tests check
both give the same logits); for others the TransformerLens forward, the hook added for that one forward. The mean and resample
replacements come from :func:`reference_activations`, read by the same forward. Neurons and Fourier
directions of MLP2 are ablated from the cached activations at ``=``: layer 2 is the last layer and the
answer is read at ``=``, where the logits are linear in the neuron activations
(``resid_mid W_U + post W_out W_U``), so all 512 single-neuron ablations cost one batched product instead
of 512 forward passes (the tests check this shortcut against the hooked forward).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Iterator

import pandas as pd
import torch

from compose_lens.analysis import locate
from compose_lens.analysis.activations import collect
from compose_lens.analysis.fourier import (
    basis_frequencies, fourier_basis, key_frequencies, neuron_frequencies, operand_grid)
from compose_lens.core.config import ModelConfig, RunConfig
from compose_lens.core.errors import ComposeLensError
from compose_lens.data import streams
from compose_lens.data.sampler import POOL_NAMES, TrainingSampler, concat_batches, make_pools
from compose_lens.data.split import Split
from compose_lens.training.evaluate import accuracy_by_group, predictions
from compose_lens.core import capabilities
from compose_lens.model.forward import Forward, Site
from compose_lens.model import tl, weights
from compose_lens.training.subject import Subject

ABLATION_KINDS = ("zero", "mean", "resample")

Hook = tuple[str, Callable]


def reference_tokens(split: Split, size: int = 1000, seed: int = 0) -> torch.Tensor:
    """Training-distribution sequences whose activations define the mean and resample ablations."""
    sampler = TrainingSampler(split, batch_size=1, seed=seed)
    return sampler.sample(size, streams.derived_generator(seed, streams.ABLATION_REFERENCE)).tokens


def _check_kind(kind: str) -> None:
    if kind not in ABLATION_KINDS:
        raise ComposeLensError(f"ablation {kind!r}: use one of {', '.join(ABLATION_KINDS)}")


def replacement_hook(hook_name: str, kind: str, reference: torch.Tensor | None = None,
                     index: tuple = (), seed: int = 0) -> Hook:
    """A hook that ablates ``act[:, :, *index]`` (e.g. ``index=(head,)`` on hook_z); ``reference``: the
    activation at this hook on the reference batch (R, pos, ...), for mean and resample ablation."""
    _check_kind(kind)
    if kind != "zero" and reference is None:
        raise ComposeLensError(f"{kind} ablation needs reference activations")
    sel = (slice(None), slice(None), *index)
    mean = reference.mean(0)[(slice(None), *index)] if reference is not None else None
    generator = streams.seeded_generator(seed)

    def ablate(act: torch.Tensor, hook=None) -> torch.Tensor:
        act = act.clone()
        if kind == "zero":
            act[sel] = 0.0
        elif kind == "mean":
            act[sel] = mean.to(act.dtype)
        else:
            rows = torch.randint(0, len(reference), (act.shape[0],), generator=generator)
            act[sel] = reference[rows][sel].to(act.dtype)
        return act

    return hook_name, ablate


def ablated_logits(model: tl.Model, cfg: ModelConfig, tokens: torch.Tensor, hooks: list[Hook],
                   chunk: int = 1024, fast: bool | None = None) -> torch.Tensor:
    """Last-position logits (N, V) with the hooks' replacements made, in chunks, without gradients (on the
    ``fast`` forward a layer-2 hook sees "=" only: take its reference from :func:`reference_activations`
    with the same ``fast``)."""
    return Forward(model, cfg, fast).edited_logits(tokens, hooks, chunk)


def reference_activations(model: tl.Model, cfg: ModelConfig, tokens: torch.Tensor, names: set[str],
                          fast: bool | None = None) -> dict[str, torch.Tensor]:
    """The activations (float32) at hooks ``names`` on ``tokens``, as :func:`ablated_logits` with the
    same ``fast`` sees them."""
    forward = Forward(model, cfg, fast)
    if not forward.tables:
        found = forward.read(tokens, [Site(name) for name in names], len(tokens))
        return {name: found[Site(name)] for name in names}
    seen: dict[str, torch.Tensor] = {}

    def keep(name: str) -> Callable:
        def record(act: torch.Tensor) -> torch.Tensor:
            seen[name] = act.float()
            return act
        return record

    forward.edited_logits(tokens, [(name, keep(name)) for name in sorted(names)], chunk=len(tokens))
    return seen


def component_targets(config: RunConfig) -> list[tuple[str, int, int, str, tuple]]:
    """(target, layer, index, hook name, index tuple) of every head and every real MLP."""
    cfg = config.model
    targets = [("head", layer, h, tl.hook_name("z", layer), (h,))
               for layer in range(cfg.n_layers) for h in range(cfg.n_heads)]
    targets += [("mlp", layer, -1, tl.hook_name("mlp_out", layer), ()) for layer in cfg.mlp_blocks]
    return targets


# -- MLP2 at "=": neurons and Fourier directions from cached activations ----------------------


class LastPositionMLP:
    """MLP2 at ``=`` for a batch: the direct path and the neuron activations, read out linearly.

    ``layer``: another block's MLP (None: the study's MLP2, in the study's layout only), its neurons read
    out through ``post W_out W_U`` with everything else held at the batch's clean logits (for an MLP
    before the last block, as :class:`compose_lens.analysis.fourier.FrozenDownstreamReadout` does)."""

    def __init__(self, model: tl.Model, config: RunConfig, tokens: torch.Tensor, layer: int | None = None):
        if layer is not None:
            acts = collect(model, config.model, tokens, resid=False, mlp_layer=layer, binder=None, router=None)
            self.post = acts.mlp_post.float()
            self.W_logit = weights.linear_readout(model, layer).W_logit
            self.direct = acts.logits.float() - self.post @ self.W_logit
            return
        if not capabilities.has_paper_layout(config.model):
            raise ComposeLensError("neuron and Fourier-direction ablation needs the study's layout: "
                                   "two layers, an MLP in the last one only")
        acts = collect(model, config.model, tokens, resid=False)
        readout = weights.linear_readout(model)
        self.post = acts.mlp_post.float()  # (N, d_mlp)
        self.W_logit = readout.W_logit  # (d_mlp, V): neuron -> logits
        self.direct = readout.direct(acts.resid_mid1_last.float())  # (N, V): the logits no neuron writes

    def logits(self, post: torch.Tensor | None = None) -> torch.Tensor:
        return self.direct + (self.post if post is None else post) @ self.W_logit


def _replacement(kind: str, own: torch.Tensor, reference: torch.Tensor, seed: int) -> torch.Tensor:
    """(N, ...) what ablation writes in place of ``own``: zeros, the reference mean, or resampled rows."""
    if kind == "zero":
        return torch.zeros_like(own)
    if kind == "mean":
        return reference.mean(0, keepdim=True).expand_as(own)
    g = streams.derived_generator(seed, streams.ABLATION_RESAMPLE)
    return reference[torch.randint(0, len(reference), (len(own),), generator=g)]


def neuron_ablation_logits(mlp: LastPositionMLP, reference: LastPositionMLP, neurons: list[int] | list[list[int]],
                           kind: str, seed: int = 0):
    """Yield (neuron set, logits (N, V)) with each neuron (or set of neurons) ablated at ``=``."""
    _check_kind(kind)
    repl = _replacement(kind, mlp.post, reference.post, seed)
    base = mlp.logits()
    for group in neurons:
        idx = [group] if isinstance(group, int) else list(group)
        delta = (repl[:, idx] - mlp.post[:, idx]) @ mlp.W_logit[idx]
        yield group, base + delta


def neuron_ablation_predictions(mlp: LastPositionMLP, reference: LastPositionMLP, neurons: list[int], kind: str,
                                seed: int = 0) -> Iterator[tuple[int, torch.Tensor]]:
    """Yield (neuron, answer class (N,)) with each single neuron ablated at ``=``: the argmax of
    :func:`neuron_ablation_logits`, computed only where the ablation can change it.

    Ablating neuron i adds ``d_n w_i`` to row n's logits (``d_n``: replacement minus
    activation, ``w_i``: the neuron's row of ``W_logit``). No class can overtake the
    unablated answer if that leads the runner-up by more than ``|d_n| (max w_i - min w_i)``
    plus a tolerance far above float rounding (1e-4 of the largest logit); those rows keep
    their answer, and the others are computed as :func:`neuron_ablation_logits` computes
    them, the same numbers. The model is confident, so few rows are left: 1,536 ablations of
    4,500 rows cost ~0.1 s instead of ~1.5 s of (4,500 x 59) logits and their argmaxes.
    """
    _check_kind(kind)
    repl = _replacement(kind, mlp.post, reference.post, seed)
    base = mlp.logits()
    answer = predictions(base)
    top = base.topk(2, dim=-1).values
    lead = top[:, 0] - top[:, 1] - 1e-4 * (1 + base.abs().amax(-1))  # (N,): what a change must overcome
    spread = mlp.W_logit.amax(1) - mlp.W_logit.amin(1)  # (d_mlp,)
    for neuron in neurons:
        unsure = (lead <= (repl[:, neuron] - mlp.post[:, neuron]).abs() * spread[neuron]).nonzero().squeeze(1)
        out = answer.clone()
        if len(unsure):
            idx = [neuron]
            delta = (repl[unsure][:, idx] - mlp.post[unsure][:, idx]) @ mlp.W_logit[idx]
            out[unsure] = predictions(base[unsure] + delta)
        yield neuron, out


def fourier_ablation_logits(mlp: LastPositionMLP, reference: LastPositionMLP, k: int | list[int], kind: str,
                            seed: int = 0) -> torch.Tensor:
    """Logits (N, V) with MLP2's frequency-k directions (one k or several) over the output classes ablated."""
    _check_kind(kind)
    p = mlp.W_logit.shape[1]
    basis, _ = fourier_basis(p)
    D = basis[torch.isin(basis_frequencies(p), torch.tensor([k] if isinstance(k, int) else list(k)))].float()  # (m, V)
    own = (mlp.post @ mlp.W_logit) @ D.T  # (N, m): MLP2's frequency-k coefficients
    ref = (reference.post @ reference.W_logit) @ D.T
    return mlp.logits() + (_replacement(kind, own, ref, seed) - own) @ D


@dataclass(frozen=True)
class NeuronSubject:
    """The MLP whose neurons and Fourier directions are ablated (``block`` None: none, no MLP adds)."""

    block: int | None
    note: str

    def to_dict(self) -> dict:
        return {"mlp_block": self.block, "component": None if self.block is None else f"blocks.{self.block}.mlp",
                "note": self.note}


PAPER_SUBJECT = NeuronSubject(1, "adder: blocks.1.mlp (the paper architecture's MLP2, read without locating)")


def neuron_subject(subject: Subject, seed: int = 0,
                   adder: locate.Role | None = None) -> NeuronSubject:
    """Which MLP the neuron and Fourier-direction ablations read (the module doc); ``adder``: a located
    adder to reuse (else located here)."""
    config = subject.config
    if capabilities.is_paper_architecture(config.model):
        return PAPER_SUBJECT
    if adder is None:
        adder, _ = locate.locate_adder(subject, seed)
    if adder.component is None:
        return NeuronSubject(None, f"none located ({adder.line()}): no neuron or Fourier-direction ablation, "
                                   f"inconclusive for the adder's parts")
    exact = "exact" if adder.layer == config.model.n_layers - 1 else "through its direct path"
    return NeuronSubject(adder.layer, f"{adder.component}, the located adder ({adder.line()}; {exact})")


def frequency_groups(neurons: pd.DataFrame, min_fraction: float = 0.5) -> dict[int, list[int]]:
    """{key frequency: its neurons} of a :func:`~compose_lens.analysis.fourier.neuron_frequencies` table: those
    whose dominant frequency explains >= ``min_fraction`` of their variance."""
    clean = neurons[neurons["fraction_explained"] >= min_fraction]
    return {k: clean.loc[clean["frequency"] == k, "neuron"].tolist()
            for k in key_frequencies(neurons, min_fraction=min_fraction)}


Ablated = tuple[str, int, int, str, torch.Tensor]  # target, layer, index, kind, answer class (N,)


def _component_ablations(model: tl.Model, config: RunConfig, tokens: torch.Tensor, ref_tokens: torch.Tensor,
                         kinds, seed: int) -> Iterator[Ablated]:
    """Every head and real MLP, ablated by replacement (reference activations read once)."""
    targets = component_targets(config)
    references = reference_activations(model, config.model, ref_tokens, {t[3] for t in targets})
    for target, layer, index, name, sel in targets:
        for kind in kinds:
            hook = replacement_hook(name, kind, references[name], sel, seed)
            yield target, layer, index, kind, predictions(ablated_logits(model, config.model, tokens, [hook]))


def _mlp2_ablations(subject: Subject, tokens: torch.Tensor, ref_tokens: torch.Tensor, kinds, seed: int,
                    single_neurons: bool, neurons: NeuronSubject = PAPER_SUBJECT) -> Iterator[Ablated]:
    """The adder's (MLP2's) neurons, each key frequency's neurons and its Fourier directions, ablated at ``=``."""
    model, config = subject.model, subject.config
    block = neurons.block
    paper = capabilities.is_paper_architecture(config.model) and block == 1
    layer = None if paper else block  # the paper's MLP2: read through the table forward's own readout
    mlp = LastPositionMLP(model, config, tokens, layer)
    ref = LastPositionMLP(model, config, ref_tokens, layer)
    groups = frequency_groups(neuron_frequencies(operand_grid(subject, "constant", seed, layer=block)))
    for kind in kinds:
        if single_neurons:
            for neuron, answers in neuron_ablation_predictions(mlp, ref, list(range(config.model.d_mlp)), kind,
                                                               seed):
                yield "neuron", block, neuron, kind, answers
        for k, members in groups.items():
            if members:
                _, logits = next(neuron_ablation_logits(mlp, ref, [members], kind, seed))
                yield "frequency_neurons", block, k, kind, predictions(logits)
            yield "fourier_directions", block, k, kind, predictions(fourier_ablation_logits(mlp, ref, k, kind, seed))


def ablation_table(subject: Subject, *, pool_size: int = 500,
                   seed: int = 0, kinds=ABLATION_KINDS, single_neurons: bool = True,
                   reference_size: int = 1000, neurons: NeuronSubject | None = None) -> pd.DataFrame:
    """Zero / mean / resample ablation of every head, every MLP, each neuron of the adder (MLP2),
    each key frequency's neurons and its Fourier directions, with the accuracy on each of the nine pools.

    ``neurons``: the MLP whose neurons are ablated (:func:`neuron_subject`, found here if None; its
    ``block`` None: no neuron rows), recorded in ``table.attrs["neuron_subject"]``.

    Long format, one row per (target, layer, block, index, kind, pool): accuracy, baseline_accuracy (nothing
    ablated) and accuracy_drop. ``target`` is head, mlp, neuron, frequency_neurons, fourier_directions or
    ``none`` (the unablated baseline, layer and block -1); ``layer`` is the paper's number from 1, ``block``
    TransformerLens's ``blocks.N``; ``index`` the head, neuron or frequency (-1 for the MLP).
    """
    model, config, split = subject.model, subject.config, subject.split
    for kind in kinds:
        _check_kind(kind)
    joined, groups = concat_batches(make_pools(split, pool_size, seed))
    ref_tokens = reference_tokens(split, reference_size, seed)
    records: list[dict] = []
    with torch.no_grad():
        ablations = [iter([("none", -1, -1, "none", predictions(ablated_logits(model, config.model, joined.tokens,
                                                                                 [])))]),
                     _component_ablations(model, config, joined.tokens, ref_tokens, kinds, seed)]
        neurons = neuron_subject(subject, seed) if neurons is None else neurons
        if neurons.block is not None:
            ablations.append(_mlp2_ablations(subject, joined.tokens, ref_tokens, kinds, seed, single_neurons, neurons))
        for target, layer, index, kind, answers in itertools.chain(*ablations):
            accuracies = accuracy_by_group(answers == joined.labels, groups)
            records += [{"target": target, "layer": layer + 1 if layer >= 0 else -1, "block": layer,
                         "index": index, "kind": kind, "pool": name, "accuracy": acc}
                        for name, acc in accuracies.items()]

    table = pd.DataFrame.from_records(records)
    baseline = table[table["target"] == "none"].set_index("pool")["accuracy"]
    table["baseline_accuracy"] = table["pool"].map(baseline)
    table["accuracy_drop"] = table["baseline_accuracy"] - table["accuracy"]
    table["pool"] = pd.Categorical(table["pool"], categories=list(POOL_NAMES), ordered=True)
    table.attrs["neuron_subject"] = neurons.to_dict()
    return table
