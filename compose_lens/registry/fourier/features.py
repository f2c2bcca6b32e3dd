"""The numbers only the fourier analysis reads (the shared Fourier measures are :mod:`compose_lens.analysis.fourier`'s).

A neuron's ideal is :func:`fourier.ideal_neuron`: the nonlinearity of the frequency-k part of its own
pre-activation (a bare ``cos k(x + y)`` misses the ReLU's clipping and reads far lower).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from compose_lens.analysis import fourier, locate
from compose_lens.core.config import RunConfig
from compose_lens.model import tl, weights
from compose_lens.training.subject import Subject


def embedding_fourier(model: tl.Model, config: RunConfig, keys: list[int] | None = None) -> tuple[pd.DataFrame, dict]:
    """The number embeddings ``W_E[0..p-1]`` (p, d_model) in the Fourier basis over the token axis.

    Table: per frequency k = 1 .. p // 2 its ``share`` of the embeddings' non-constant squared norm (cos k
    and sin k together, summed over d_model; the constant, the mean embedding, says nothing of which number
    it is), and ``key``: whether k is one of ``keys`` (the MLP's key frequencies). Summary:
    ``top_frequencies`` (above the uniform share ``1 / (p // 2)``, largest first), ``top_share``,
    ``constant_share`` (of the whole squared norm), and, given ``keys``, ``key_share``,
    ``key_share_if_uniform`` (``len(keys) / (p // 2)``, what a flat spectrum would give) and ``overlap``
    (the top frequencies that are keys); without ``keys`` those three are None."""
    p = config.task.modulus
    W_E = weights.detached_parameters(model)["embed.weight"][:p].double()  # rows: the numbers 0..p-1
    power = fourier.fft1d(W_E, dim=0).pow(2).sum(dim=1)  # (p,) per basis row
    per_frequency = power.new_zeros(p // 2 + 1).index_add_(0, fourier.basis_frequencies(p), power)
    non_constant = per_frequency[1:].sum()
    shares = (per_frequency[1:] / non_constant.clamp_min(1e-30)).tolist()
    frequencies = list(range(1, p // 2 + 1))
    key_set = set(keys or [])
    table = pd.DataFrame({"frequency": frequencies, "share": shares, "key": [k in key_set for k in frequencies]})
    uniform = 1.0 / len(frequencies) if frequencies else 0.0
    top = table[table["share"] > uniform].sort_values("share", ascending=False, kind="stable")
    top_frequencies = [int(k) for k in top["frequency"]]
    summary = {
        "top_frequencies": top_frequencies,
        "top_share": float(top["share"].sum()),
        "uniform_share": uniform,
        "constant_share": float(per_frequency[0] / power.sum().clamp_min(1e-30)),
        "key_frequencies": None if keys is None else sorted(int(k) for k in keys),
        "key_share": None if keys is None else float(table.loc[table["key"], "share"].sum()),
        "key_share_if_uniform": None if keys is None else len(key_set & set(frequencies)) * uniform,
        "overlap": None if keys is None else [k for k in top_frequencies if k in key_set],
    }
    return table, summary


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


def fourier_neuron(subject: Subject, frequency: int | None = None,
                   seed: int = 0, block: int | None = None) -> FourierNeuron:
    """:func:`fourier.best_neurons`'s neuron for ``frequency`` (default: the key frequency whose best
    neuron it explains most), over all (x, y) of constant-operand sequences, in the MLP of ``block``
    (default: :func:`compose_lens.analysis.locate.mlp_block`), beside its ideal (:func:`fourier.ideal_neuron`:
    the nonlinearity of the frequency-k part of the neuron's own pre-activation)."""
    block = locate.mlp_block(subject, seed) if block is None else block
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
    """Per row of :func:`fourier.best_neurons`: the neuron's (p, p) pattern and its ideal, with their correlation."""
    out = []
    for row in best.itertuples():
        pattern = grid.mlp_post[:, :, row.neuron]
        ideal = fourier.ideal_neuron(grid.mlp_pre[:, :, row.neuron], row.frequency)
        out.append({"neuron": row.neuron, "frequency": row.frequency,
                    "ideal_correlation": row.ideal_neuron_correlation,
                    "fraction_explained": row.fraction_explained,
                    "pattern": pattern.numpy(), "ideal": ideal.numpy()})
    return out
