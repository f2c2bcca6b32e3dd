"""Every probe and Fourier measure of one model, as numbers.

* :func:`circuit_measures` is the cheap one (a fraction of a second for the paper model on one CPU core):
  one float per measure, for the training-dynamics tools, which call it on every checkpoint. It shares one
  forward pass of a mixed batch between the activation probes and one of the constant-operand grid between
  the Fourier measures.
* :func:`circuit_summary` adds what a reader wants once: the key frequencies, the probe's details,
  per-sequence-type scores, the best neuron per key frequency, the readout's frequencies, and constants
  against variables.

The keys of :func:`circuit_measures` are :data:`MEASURE_KEYS`, each said in words in :data:`MEASURE_WORDS`
(all floats in [0, 1] except the losses and the count; a ``*_mass`` is the graded companion of the hit rate
before it). ``variable_identity_score`` reads ``(E_var OV_binder) QK_router (E_var OV_binder)^T`` on the
diagonal; ``key_frequency_strength`` reads MLP2's post-ReLU variance (the pre-activations, ReLU(f(x) + g(y))
before the ReLU, hold more: experiments/claim_measures.py). With no key frequency (early in training) the
restricted loss keeps only the constant and the excluded losses remove nothing (they equal ``grid_loss``).

"MLP2" is the MLP the Fourier measures read (:func:`fourier_block`: ``blocks.1`` in the paper's layout, the
located adder in another; before the last block its logits are read through
:class:`compose_lens.analysis.fourier.FrozenDownstreamReadout`, its direct path with the later blocks held
at their clean values). "Layer 1" is the *binder* head (and, for ``equals_to_operands_*``, the *gatherer*,
whose attention from ``=`` lands on the operands, SPEC 6.2) and "layer 2" the *router* (:func:`probe_heads`:
the paper's ``blocks.0`` head 0 and ``blocks.1`` head 0 in the paper architecture, the located ones in
another). ``ov_mlp_addition_accuracy`` feeds the MLP ``OV e_x + OV e_y`` of the router. Where the model has
no MLP, or no head plays a role, the measures that read it are NaN, never a default's
(:func:`circuit_summary`'s ``circuit_heads["none"]`` names the roles).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from compose_lens.core.provenance import provenance
from compose_lens.analysis import fourier, locate, probes
from compose_lens.analysis.activations import torch_threads
from compose_lens.core.errors import ComposeLensError
from compose_lens.core.files import json_safe
from compose_lens.data.split import Split
from compose_lens.training.subject import Subject

# each measure in words, for figure titles and the report's tables (layers and MLP2 as the module doc says)
MEASURE_WORDS = {
    "prev_token_weight_score": "layer 1 QK weights pick the previous position",
    "prev_token_attention_score": "layer 1: share of values whose attention peaks on their variable",
    "prev_token_attention_mass": "layer 1: a value's attention weight on its variable",
    "prev_token_probe_accuracy": "linear probe reads the variable at its value",
    "equals_to_operands_score": "layer 1: share of = whose attention peaks on the operands",
    "equals_to_operands_mass": "layer 1: attention weight of = on the operands",
    "variable_identity_score": "layer 2 QK matches a variable to its value",
    "equals_to_values_score": "layer 2: share of = whose attention peaks on the queried values",
    "equals_to_values_mass": "layer 2: attention weight of = on the queried values",
    "ov_mlp_addition_accuracy": "layer 2 OV into MLP2 adds the routed values",
    "key_frequency_strength": "share of MLP2's variance in its key frequencies",
    "n_key_frequencies": "number of key frequencies (a count)",
    "grid_loss": "loss over all p² constant-operand sums",
    "restricted_loss": "restricted loss: MLP2 kept to its key frequencies only",
    "excluded_loss": "excluded loss: one key frequency removed from MLP2 (mean over them)",
    "excluded_loss_all": "excluded loss: every key frequency removed from MLP2",
}
MEASURE_KEYS = tuple(MEASURE_WORDS)  # the per-checkpoint measures, in the order of circuit_measures' dict
# the other numbers of circuit_summary, in words (the report's circuit-summary table)
DETAIL_WORDS = {
    "restricted_loss_logits": "restricted loss, the logits (not MLP2) kept to the key frequencies",
    "neurons_explained_by_one_frequency": "share of MLP2 neurons with half their variance in one frequency",
    "live_neurons": "share of MLP2 neurons that ever fire on the grid",
    "constant_grid_accuracy": "accuracy over all p² constant-operand sums",
    "n_sequences": "sequences the attention measures read (a count)",
}
# the sequence types of circuit_summary's scores_by_type
TYPE_WORDS = {"0var": "0-var (two constants)", "1var_left": "1-var, the variable on the left",
              "1var_right": "1-var, the variable on the right", "2var": "2-var (two variables)"}


FOURIER_KEYS = ("ov_mlp_addition_accuracy", "key_frequency_strength", "n_key_frequencies", "grid_loss",
                "restricted_loss", "excluded_loss", "excluded_loss_all")
LOCATE = "locate"  # mlp_block: find it (locate.fourier_subject)


def fourier_block(subject: Subject, mlp_block: int | None | str = LOCATE, seed: int = 0) -> int | None:
    """The block whose MLP the Fourier measures read, or None where the model has no MLP:
    ``mlp_block`` as given, or (``"locate"``) the model's only MLP / the located adder
    (:func:`compose_lens.analysis.locate.fourier_subject`), wherever it sits."""
    config = subject.config
    if mlp_block == LOCATE:
        mlp_block = locate.fourier_subject(subject, seed, score_single=False).layer
    return mlp_block if mlp_block in config.model.mlp_blocks else None


def ov_source(heads: probes.Heads) -> dict | None:
    """The OV the weights-only addition test feeds the adder's MLP: the router's (``head_layer``, ``head``),
    None where no router is located."""
    return None if heads.router is None else {"head_layer": heads.router[0], "head": heads.router[1]}


def _fourier_measures(grid: fourier.AdditionGrid, keys: list[int]) -> dict[str, float]:
    full = fourier.grid_loss(grid)
    excluded = fourier.excluded_loss(grid, keys)
    return {
        "key_frequency_strength": fourier.key_frequency_strength(grid, keys),
        "n_key_frequencies": float(len(keys)),
        "grid_loss": full,
        "restricted_loss": fourier.restricted_loss(grid, keys),
        "excluded_loss": sum(excluded.values()) / len(excluded) if excluded else full,
        "excluded_loss_all": fourier.excluded_loss_all(grid, keys) if keys else full,
    }


def _probe_measures(subject: Subject, acts, heads: probes.Heads, probe_accuracy: float) -> dict[str, float]:
    """The probe measures of ``acts`` (collected for ``heads``) and the weight views of ``heads``."""
    model, config = subject.model, subject.config
    equals = probes.equals_measures(subject, acts=acts)  # the four from "=" in one pass (acts hold the heads)
    return {
        "prev_token_weight_score": probes.prev_token_weight_score(model, config, heads=heads),
        "prev_token_attention_score": probes.prev_token_attention_score(subject, acts=acts),
        "prev_token_probe_accuracy": probe_accuracy,
        "equals_to_operands_score": equals["equals_to_operands_score"],
        "variable_identity_score": probes.variable_identity_score(model, config, heads=heads),
        "equals_to_values_score": equals["equals_to_values_score"],
        # the graded companions of the three argmax hit rates: attention mass on the targets
        "prev_token_attention_mass": probes.prev_token_attention_mass(subject, acts=acts),
        "equals_to_operands_mass": equals["equals_to_operands_mass"],
        "equals_to_values_mass": equals["equals_to_values_mass"],
    }


def probe_heads(subject: Subject, heads: probes.Heads | str = LOCATE, seed: int = 0) -> probes.Heads:
    """``heads`` as given, or (``"locate"``) :func:`compose_lens.analysis.locate.circuit_heads`."""
    return locate.circuit_heads(subject, seed) if heads == LOCATE else heads


@dataclass(frozen=True)
class MeasureInputs:
    """The sequences :func:`circuit_measures` reads, rendered once for every checkpoint of a run:
    they depend on the split, ``n`` and the seed, not on the weights."""

    n: int
    seed: int
    probe_tokens: torch.Tensor  # (n, seq_len): probes.probe_batch
    grid_tokens: torch.Tensor  # (p^2, seq_len): fourier.grid_tokens, constant operands


def measure_inputs(split: Split, n: int = 600, seed: int = 0) -> MeasureInputs:
    return MeasureInputs(n, seed, probes.probe_batch(split, n, seed).tokens,
                         fourier.grid_tokens(split, "constant", seed))


def circuit_measures(subject: Subject, *, n: int = 600, seed: int = 0,
                     threads: int | None = 1, inputs: MeasureInputs | None = None,
                     mlp_block: int | None | str = LOCATE,
                     heads: probes.Heads | str = LOCATE) -> dict[str, float]:
    """The cheap per-checkpoint measures (:data:`MEASURE_KEYS`), deterministic given ``seed``: ``n``
    sequences (every pool in equal parts) feed the activation probes, the Fourier measures read the p^2
    constant-operand grid. ``inputs``: :func:`measure_inputs` of the same split, ``n`` and seed, rendered once
    (the training-dynamics loop passes it; ~12 ms of each checkpoint's ~0.4 s). ``mlp_block``
    (:func:`fourier_block`) and ``heads`` (:func:`probe_heads`): the dynamics tools fix them once per run."""
    model, config = subject.model, subject.config
    if inputs is not None and (inputs.n, inputs.seed) != (n, seed):
        raise ValueError(f"inputs are for n={inputs.n}, seed={inputs.seed}; asked for n={n}, seed={seed}")
    with torch_threads(threads), torch.no_grad():
        layer = fourier_block(subject, mlp_block, seed)
        heads = probe_heads(subject, heads, seed)
        acts = probes.probe_activations(subject, n, seed,
                                        tokens=None if inputs is None else inputs.probe_tokens, heads=heads)
        accuracy = probes.prev_token_probe_accuracy(subject, acts=acts, seed=seed)
        out = _probe_measures(subject, acts, heads, accuracy)
        if layer is None:
            out.update(dict.fromkeys(FOURIER_KEYS, float("nan")))
        else:
            source = ov_source(heads)
            out["ov_mlp_addition_accuracy"] = (float("nan") if source is None else
                                               fourier.ov_mlp_addition_accuracy(model, config, layer=layer, **source))
            grid = fourier.operand_grid(subject, "constant", seed,
                                        tokens=None if inputs is None else inputs.grid_tokens, layer=layer)
            out.update(_fourier_measures(grid, fourier.key_frequencies(grid)))
    return {k: float(out[k]) for k in MEASURE_KEYS}


def circuit_summary(subject: Subject, seed: int = 0, *, n: int = 1800,
                    threads: int | None = 1, fourier_subject: locate.FourierSubject | None = None,
                    heads: probes.Heads | str = LOCATE) -> dict:
    """Everything of :func:`circuit_measures`, plus the details (JSON-ready): ``fourier_subject`` says which
    MLP the Fourier part read (the argument: a :func:`~compose_lens.analysis.locate.fourier_subject` already
    found), ``fourier_readout`` how, and ``circuit_heads`` which heads the probes read (``heads``: see
    :func:`probe_heads`). Refuses, in one line, a model without an MLP."""
    model, config = subject.model, subject.config
    with torch_threads(threads), torch.no_grad():
        fourier_subject = fourier_subject or locate.fourier_subject(subject, seed, score_single=False)
        if fourier_subject.layer is None:
            raise ComposeLensError(f"the summary's Fourier part needs an MLP: {fourier_subject.note}")
        fourier.check_readout_layer(config, fourier_subject.layer)
        layer = fourier_subject.layer
        heads = probe_heads(subject, heads, seed)
        acts = probes.probe_activations(subject, n, seed, heads=heads)
        probe = probes.prev_token_probe(subject, acts=acts, seed=seed)
        grid = fourier.operand_grid(subject, "constant", seed, layer=layer)
        neurons = fourier.neuron_frequencies(grid)
        keys = fourier.key_frequencies(neurons)
        source = ov_source(heads)
        ov = None if source is None else fourier.ov_grid(model, config, layer=layer, **source)
        variable = fourier.operand_grid(subject, "both", seed, layer=layer)
        readout = fourier.unembed_frequency_norms(fourier.unembed_fourier(grid))
        summary = {
            **_probe_measures(subject, acts, heads, probe.test_accuracy),
            "ov_mlp_addition_accuracy": float("nan") if ov is None else ov.accuracy(),
            **_fourier_measures(grid, keys),
            "fourier_subject": fourier_subject.to_dict(),
            "fourier_readout": fourier.readout_kind(config, layer),
            "circuit_heads": heads.to_dict(),
            "equals_to_values_by_construction": probes.values_all_queried(config.task, acts.tokens),
            "key_frequencies": keys,
            "key_frequency_shares": {int(k): float(v) for k, v in fourier.frequency_shares(neurons).items()},
            "excluded_loss_by_frequency": fourier.excluded_loss(grid, keys),
            "restricted_loss_logits": fourier.restricted_loss(grid, keys, on="logits"),
            "neurons_explained_by_one_frequency": float((neurons["fraction_explained"] >= 0.5).mean()),
            "live_neurons": float((neurons["variance"] > 0).mean()),
            "constant_grid_accuracy": grid.accuracy(),
            "ov_key_frequencies": None if ov is None else fourier.key_frequencies(ov),
            "constants_vs_variables": fourier.compare_grids(grid, variable),
            "best_neurons": fourier.best_neurons(grid, keys).to_dict(orient="records"),
            "readout_frequency_norms": {int(k): float(v) for k, v in readout.items()},
            "prev_token_probe": {"train_accuracy": probe.train_accuracy, "test_accuracy": probe.test_accuracy,
                                 "n_train": probe.n_train, "n_test": probe.n_test, "chance": probe.chance},
            "scores_by_type": probes.scores_by_type(config, acts),
            "n_sequences": len(acts),
            **provenance(config, seed),
        }
    return json_safe(summary)
