"""Figures of the adder MLP's Fourier features: neurons over the p x p grid of constant operands beside
their ideal, and bars per frequency of the MLP's variance, its readout ``W_out W_U`` and the number
embeddings, the key frequencies blue and hatched in every one (:func:`_key_bars`).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from compose_lens.registry.fourier.features import FourierNeuron
from compose_lens.views.drawing import OKABE_ITO, REPORT_WIDTH_IN, subplots

def fourier_neuron_figure(chosen: FourierNeuron) -> tuple[Figure, pd.DataFrame]:
    """A neuron's activation over the p x p operand grid beside its ideal pattern
    (:func:`compose_lens.registry.fourier.features.fourier_neuron`), both on one colour range, so a colour means
    the same activation in both panels."""
    k = chosen.frequency
    titles = (f"MLP{chosen.block + 1} neuron {chosen.neuron} over (x, y): {chosen.fraction_explained:.0%} of its "
              f"variance at k = {k}",
              f"ideal: ReLU of the k = {k} part of its pre-activation (correlation {chosen.correlation:.3f})")
    fig, axes = subplots(1, 2, figsize=(11, 4.8))
    grids = [np.asarray(grid, dtype=float) for grid in (chosen.pattern, chosen.ideal)]
    low, high = min(float(g.min()) for g in grids), max(float(g.max()) for g in grids)  # one range: comparable colours
    for ax, grid, name in zip(axes, grids, titles):
        im = ax.imshow(grid, cmap="viridis", origin="lower", vmin=low, vmax=high)
        ax.set_xlabel("y (right operand value)")
        ax.set_ylabel("x (left operand value)")
        ax.set_title(name, fontsize=10)
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04).set_label("activation (ReLU output)")
    fig.tight_layout()
    p = np.asarray(chosen.pattern).shape[0]
    xs, ys = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    data = pd.DataFrame({"x": xs.ravel(), "y": ys.ravel(),
                         "neuron": np.asarray(chosen.pattern, dtype=float).ravel(),
                         "ideal": np.asarray(chosen.ideal, dtype=float).ravel()})
    return fig, data.assign(neuron=chosen.neuron, frequency=k, key_frequencies=" ".join(map(str, chosen.keys)))


EMBEDDING_KEY_COLOUR, EMBEDDING_OTHER_COLOUR = OKABE_ITO[0], "#BBBBBB"  # Okabe-Ito blue, light grey
CROSS_COLOUR = "#666666"  # the cross-frequency remainder of a share figure
FREQUENCY_AXIS = "frequency k (cycles over the p numbers)"


def _key_bars(ax: Axes, frequencies: Sequence[int], values: Sequence[float], keys: Sequence[int]) -> list:
    """The one palette of the Fourier bar figures: the MLP's key frequencies Okabe-Ito blue and hatched
    (readable without colour), the others light grey; returns the legend's handles."""
    is_key = [int(k) in set(int(x) for x in keys) for k in frequencies]
    bars = ax.bar(frequencies, values, width=0.8, edgecolor="black", linewidth=0.4,
                  color=[EMBEDDING_KEY_COLOUR if k else EMBEDDING_OTHER_COLOUR for k in is_key])
    for bar, k in zip(bars, is_key):
        if k:
            bar.set_hatch("//")
    handles = [Rectangle((0, 0), 1, 1, facecolor=EMBEDDING_KEY_COLOUR, hatch="//", edgecolor="black", lw=0.4,
                         label="MLP key frequency"),
               Rectangle((0, 0), 1, 1, facecolor=EMBEDDING_OTHER_COLOUR, edgecolor="black", lw=0.4, label="other")]
    return handles if any(is_key) else handles[1:]


def _frequency_bars(values: Sequence[float], frequencies: Sequence[int], keys: Sequence[int], ylabel: str,
                    title: str, column: str, remainder: float | None = None) -> tuple[Figure, pd.DataFrame]:
    """Bars per frequency in :func:`_key_bars`'s palette; ``remainder``: a last bar, apart, for what no
    single frequency holds (the cross terms ``cos kx cos k'y``, k != k'), so shares sum to 1."""
    fig, ax = subplots(figsize=(7, 3))
    handles = _key_bars(ax, frequencies, values, keys)
    data = pd.DataFrame({"frequency": list(frequencies), column: list(values),
                         "key": [k in keys for k in frequencies]})
    if remainder is not None:
        at = max(frequencies) + 2.5
        ax.bar([at], [remainder], width=1.6, color=CROSS_COLOUR, edgecolor="black", linewidth=0.4, hatch="..")
        ax.annotate(f"{remainder:.2f}", (at, remainder), ha="center", va="bottom", fontsize=8,
                    xytext=(0, 2), textcoords="offset points")
        handles.append(Rectangle((0, 0), 1, 1, facecolor=CROSS_COLOUR, hatch="..", edgecolor="black", lw=0.4,
                                 label="cross terms (k ≠ k′): no one frequency"))
        ticks = [k for k in ax.get_xticks() if 0 <= k <= max(frequencies)]
        ax.set_xticks([*ticks, at], [f"{k:g}" for k in ticks] + ["cross"])
        data = pd.concat([data.assign(cross_terms=False), pd.DataFrame(
            {"frequency": [-1], column: [remainder], "key": [False], "cross_terms": [True]})], ignore_index=True)
    ax.legend(handles=handles, fontsize=8, frameon=False, loc="upper right", ncol=len(handles))
    ax.set_ylim(0, max([*values, remainder or 0]) * 1.3 or 1)
    ax.set_xlabel(FREQUENCY_AXIS, fontsize=9)
    ax.set_ylabel(ylabel, fontsize=9)
    ax.tick_params(labelsize=8)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig, data


def frequency_shares_figure(shares: Sequence[float], keys: Sequence[int]) -> tuple[Figure, pd.DataFrame]:
    """Bars: the share of the MLP2 post-ReLU variance at each frequency
    (:func:`compose_lens.registry.fourier.features.frequency_variance_shares`), and the rest, the cross terms
    that belong to no one frequency, as a last bar: the bars sum to 1."""
    shares = [float(v) for v in shares]
    remainder = max(0.0, 1.0 - sum(shares))
    in_keys = sum(shares[k] for k in keys if k < len(shares))
    return _frequency_bars(shares, list(range(len(shares))), keys, "share of MLP2's\npost-ReLU variance",
                           f"MLP2 post-ReLU variance by frequency: {in_keys:.0%} in the MLP key frequencies",
                           "variance_share", remainder)


def readout_fourier_figure(norms: pd.Series, keys: Sequence[int]) -> tuple[Figure, pd.DataFrame]:
    """Bars: the norm of ``W_out W_U`` per frequency (:func:`compose_lens.analysis.fourier.unembed_frequency_norms`)."""
    return _frequency_bars(list(norms.values), list(norms.index), keys, "norm of W_out W_U",
                           "the MLP's readout W_out W_U by frequency", "norm")


def embedding_fourier_figure(table: pd.DataFrame, summary: Mapping) -> tuple[Figure, pd.DataFrame]:
    """Bars: the number embeddings' share of (non-constant) squared norm per frequency
    (:func:`compose_lens.registry.fourier.features.embedding_fourier`), the uniform share dashed."""
    keys = summary.get("key_frequencies") or []
    fig, ax = subplots(figsize=(7, 3))
    handles = _key_bars(ax, list(table["frequency"]), list(table["share"]), keys)
    ax.axhline(summary["uniform_share"], color="black", ls="--", lw=0.8)
    handles.append(Line2D([], [], color="black", ls="--", lw=0.8, label="uniform share"))
    ax.legend(handles=handles, fontsize=8, frameon=False, loc="upper right", ncol=3)
    ax.set_xlim(0.3, len(table) + 0.7)
    ax.set_ylim(0, max(float(table["share"].max()), summary["uniform_share"]) * 1.3)
    ax.set_xlabel(FREQUENCY_AXIS, fontsize=9)
    ax.set_ylabel("share of centred\nW_E norm²", fontsize=9)
    ax.tick_params(labelsize=8)
    title = "number embeddings W_E by frequency"
    if summary.get("key_share") is not None:
        title += f": {summary['key_share']:.0%} in the MLP key frequencies"
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig, table.copy()


def best_neurons_figure(neurons: Sequence[Mapping], columns: int = 3) -> tuple[Figure, pd.DataFrame]:
    """Each key frequency's best neuron beside its ideal
    (:func:`compose_lens.registry.fourier.features.best_neuron_patterns`), ``columns`` neurons to a row. Each
    panel is divided by its neuron's largest activation, so one colour bar (0 to 1) serves every panel; the
    maxima are in the data (``max_activation``)."""
    n = len(neurons)
    columns = max(1, min(columns, n))
    rows = max(1, -(-n // columns))
    fig, axes = subplots(rows, 2 * columns, figsize=(REPORT_WIDTH_IN, 1.95 * rows + 0.9), squeeze=False)
    frames, image = [], None
    for i, n_ in enumerate(neurons):
        row, col = divmod(i, columns)
        top = float(np.max(n_["pattern"])) or 1.0
        for j, (grid, title) in enumerate(((n_["pattern"], f"neuron {n_['neuron']}, k = {n_['frequency']}\n"
                                                           f"{n_['fraction_explained']:.0%} of its variance"),
                                           (n_["ideal"], f"its ideal, k = {n_['frequency']}\n"
                                                         f"r = {n_['ideal_correlation']:.3f}"))):
            ax = axes[row, 2 * col + j]
            image = ax.imshow(np.asarray(grid, dtype=float) / top, cmap="viridis", origin="lower", vmin=0, vmax=1)
            ax.set_title(title, fontsize=8, pad=3)
            p = np.asarray(grid).shape[0]
            ax.set_xticks([0, p - 1])
            ax.set_yticks([0, p - 1])
            ax.tick_params(labelsize=8, length=2, pad=1)
        p = np.asarray(n_["pattern"]).shape[0]
        xs, ys = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
        frames.append(pd.DataFrame({"neuron": n_["neuron"], "frequency": n_["frequency"], "x": xs.ravel(),
                                    "y": ys.ravel(), "activation": np.asarray(n_["pattern"], dtype=float).ravel(),
                                    "ideal": np.asarray(n_["ideal"], dtype=float).ravel(),
                                    "ideal_correlation": n_["ideal_correlation"], "max_activation": top}))
    for ax in list(axes.flat)[2 * n:]:
        ax.axis("off")
    fig.suptitle("MLP2: the best neuron of each key frequency beside its ideal "
                 "(x: right operand y, up: left operand x)", fontsize=9)
    fig.tight_layout(rect=(0, 0, 0.93, 1), h_pad=0.6, w_pad=0.3)
    if image is not None:
        bar = fig.colorbar(image, cax=fig.add_axes((0.945, 0.2, 0.012, 0.6)))
        bar.set_label("activation / the neuron's maximum", fontsize=8)
        bar.ax.tick_params(labelsize=8)
    return fig, pd.concat(frames) if frames else pd.DataFrame()
