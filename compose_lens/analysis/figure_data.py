"""The numbers behind the study's model figures, as arrays and tables (no drawing here).

:mod:`compose_lens.views` draws; it never runs a model. Each function below runs
the analyses of this package on one model (or two checkpoints) and returns what
one figure shows, so the offline report, the ``experiments/fig_*.py`` scripts and
the ``compose-lens`` output writers draw the same numbers the same way:

* :func:`fourier_neuron`: the MLP2 (the adder's MLP: layer 2's, blocks.1, in the paper) neuron
  best explained by a key frequency and its ideal pattern (:mod:`.fourier`);
* :func:`frequency_variance_shares` and :func:`best_neuron_patterns`: the MLP2
  variance per frequency, and each best neuron's pattern beside its ideal
  (:func:`fourier.ideal_neuron`: the ReLU of the frequency-k part of its own
  pre-activation; a bare ``cos k(x + y)`` misses the ReLU's clipping and reads far lower).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from compose_lens.analysis import fourier, locate
from compose_lens.core.errors import ComposeLensError
from compose_lens.training.subject import Subject


# -- the MLP adds in the Fourier basis -----------------------------------------------------------


@dataclass
class FourierNeuron:
    """The best neuron of a key frequency: its (p, p) activation and its ideal pattern."""

    neuron: int
    frequency: int
    fraction_explained: float
    correlation: float  # with the ideal neuron
    pattern: np.ndarray
    ideal: np.ndarray
    keys: list[int]
    block: int = 1  # the block whose MLP holds the neuron (blocks.1: the paper's MLP2)


def mlp_block(subject: Subject, seed: int = 0) -> int:
    """The block whose MLP the figures read: the Fourier analyses' MLP
    (:func:`compose_lens.analysis.locate.fourier_subject`: the model's only MLP, or the located adder
    wherever it sits), blocks.1 for the paper architecture. A model without an MLP is refused, in words
    (issue #45: the figures read blocks.1 of a 3-layer model whose MLP is in blocks.2)."""
    subject = locate.fourier_subject(subject, seed, score_single=False)
    if subject.layer is None:
        raise ComposeLensError(f"this figure reads an MLP, and the model has {subject.note}")
    return subject.layer


def fourier_neuron(subject: Subject, frequency: int | None = None,
                   seed: int = 0, block: int | None = None) -> FourierNeuron:
    """:func:`fourier.best_neurons`'s neuron for ``frequency`` (default: the key frequency whose best
    neuron it explains most), over all (x, y) of constant-operand sequences, in the MLP of ``block``
    (default: :func:`mlp_block`).

    The ideal is :func:`fourier.ideal_neuron`: the nonlinearity applied to the
    frequency-k part of the neuron's own pre-activation.
    """
    block = mlp_block(subject, seed) if block is None else block
    grid = fourier.operand_grid(subject, "constant", seed, layer=block)
    keys = [frequency] if frequency is not None else fourier.key_frequencies(grid)
    if not keys:
        raise ValueError("the MLP has no key frequency yet (no neuron is explained by one frequency)")
    best = fourier.best_neurons(grid, keys).sort_values("fraction_explained", ascending=False)
    row = best.iloc[0]
    k, neuron = int(row["frequency"]), int(row["neuron"])
    return FourierNeuron(neuron=neuron, frequency=k, fraction_explained=float(row["fraction_explained"]),
                         correlation=float(row["ideal_neuron_correlation"]),
                         pattern=grid.mlp_post[:, :, neuron].numpy(),
                         ideal=fourier.ideal_neuron(grid.mlp_pre[:, :, neuron], k).numpy(), keys=list(keys),
                         block=block)


def frequency_variance_shares(grid: fourier.AdditionGrid) -> np.ndarray:
    """(p // 2 + 1,) share of the MLP2 activation variance at each frequency (neurons weighted by variance)."""
    shares = fourier.frequency_fractions(grid.mlp_post, grid.mlp_post_coefficients)
    variance = grid.mlp_post.flatten(0, 1).var(0, unbiased=False)
    return ((shares * variance).sum(1) / variance.sum().clamp_min(1e-30)).numpy()


def best_neuron_patterns(grid: fourier.AdditionGrid, best: pd.DataFrame) -> list[dict]:
    """Per row of :func:`fourier.best_neurons`: the neuron's (p, p) pattern and its ideal neuron
    (:func:`fourier.ideal_neuron`), with their correlation."""
    out = []
    for row in best.itertuples():
        pattern = grid.mlp_post[:, :, row.neuron]
        ideal = fourier.ideal_neuron(grid.mlp_pre[:, :, row.neuron], row.frequency)
        out.append({"neuron": row.neuron, "frequency": row.frequency,
                    "ideal_correlation": row.ideal_neuron_correlation,
                    "fraction_explained": row.fraction_explained,
                    "pattern": pattern.numpy(), "ideal": ideal.numpy()})
    return out
