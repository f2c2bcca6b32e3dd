"""The ``ablation`` figure: the accuracy each pool loses to each ablation (:func:`ablation_figure`), a drop
counted only beyond its own noise."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from compose_lens.core import stats
from compose_lens.views.drawing import REPORT_WIDTH_IN, heatmap, layer_name, subplots


def ablation_figure(table: pd.DataFrame, n: int) -> tuple[Figure, pd.DataFrame]:
    """Accuracy lost per pool (columns, ``n`` sequences each) for each ablated component (rows) of
    :func:`compose_lens.registry.ablation.ablations.ablation_table`, single neurons left out; returns the rows drawn.

    A drop counts only where its 95 % interval (:func:`compose_lens.core.stats.difference_bounds`) excludes 0:
    a component none of whose drops does is left out, and the title counts them (if none passes, every row
    is drawn); a drawn cell within its noise is hatched. The colour scale is sequential from 0 to 1 (an
    ablation rarely helps): a negative drop shows as white, its value printed in the cell.
    """
    shown = table[~table["target"].isin(["neuron", "none"])]
    rows = ["target", "block", "index", "kind"]
    low, high = stats.difference_bounds(shown["baseline_accuracy"], shown["accuracy"], n)
    shown = shown.assign(drop_low=low, drop_high=high, beyond_noise=(low > 0) | (high < 0))
    beyond = shown.groupby(rows, observed=True)["beyond_noise"].transform("any")
    n_all = len(shown.drop_duplicates(rows))
    if beyond.any():
        shown = shown[beyond]
    n_left_out = n_all - len(shown.drop_duplicates(rows))
    names = []
    for target, block, index, kind in zip(shown["target"], shown["block"], shown["index"], shown["kind"]):
        what = {"head": f"head {index}", "mlp": "MLP", "frequency_neurons": f"k = {index} neurons",
                "fourier_directions": f"k = {index} directions"}.get(target, f"{target} {index}")
        names.append(f"{what} · {layer_name(block)} · {kind}")
    shown = shown.assign(name=names)
    grid = shown.pivot_table(index="name", columns="pool", values="accuracy_drop", sort=False, observed=True)
    noise = shown.pivot_table(index="name", columns="pool", values="beyond_noise", sort=False, observed=True,
                              aggfunc="any").reindex(index=grid.index, columns=grid.columns)
    labels = [str(c).replace("_", " ") for c in grid.columns]
    fig, ax = subplots(figsize=(min(REPORT_WIDTH_IN, max(8, 0.75 * len(labels) + 5)),
                                    max(3.5, 0.36 * len(grid.index) + 2.2)))
    title = f"ablation: accuracy lost per pool ({n} sequences each)"
    if n_left_out:
        title += f"\n({n_left_out} of {n_all} ablations left out: no drop beyond its 95 % interval)"
    heatmap(ax, grid.to_numpy(), labels, list(grid.index), title, cmap="Reds",
            centre=False, vmax=1.0, aspect="auto", fontsize=8, rotation=40,
            colorbar_label="accuracy drop (fraction of the pool)", annotate=len(grid.index) <= 40)
    for (i, j), inside in np.ndenumerate(~noise.fillna(True).to_numpy(dtype=bool)):
        if inside:  # within the drop's own noise: hatched, its value still printed
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="////", edgecolor="#999999",
                                   linewidth=0))
    ax.set_xlabel("pool of sequences (hatched: a drop within its 95 % interval of 0)")
    ax.set_ylabel("ablated component · layer · ablation")
    fig.tight_layout()
    return fig, shown
