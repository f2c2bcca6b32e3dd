"""The theory's gradient claim: each product's gradient as its named terms at one model
(:func:`gradient_terms_figure`), and the kept, associative-memory term's cosine with the full gradient
over training (:func:`gradient_shares_figure`; :mod:`compose_lens.registry.gradient.terms`).
"""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from compose_lens.views.drawing import OKABE_ITO, REPORT_WIDTH_IN, subplots

GRADIENT_TITLES = {"qk0": "layer 1 (blocks.0) QK: binding, value -> its variable",
                   "ov0": "layer 1 (blocks.0) OV: the variable moved to its value",
                   "qk1": "layer 2 (blocks.1) QK: routing, = -> the operands' values"}


def gradient_shares_figure(shares: pd.DataFrame, by: str | None = None, title: str = "") -> tuple[Figure, pd.DataFrame]:
    """The kept term's cosine with the full gradient over training, one panel per product, one colour per
    value of the column ``by`` (one line where ``by`` is None): the mean over its seeds bold, each seed faint
    where there is a ``seed`` column."""
    kept = shares[shares["term"] == "kept"]
    groups = list(dict.fromkeys(kept[by])) if by else [None]
    fig, axes = subplots(1, 3, figsize=(REPORT_WIDTH_IN, 3.6), sharey=True)
    for ax, matrix in zip(axes, GRADIENT_TITLES):
        for k, group in enumerate(groups):
            part = kept[(kept["matrix"] == matrix) & ((kept[by] == group) if by else True)]
            seeds = part.groupby("seed") if "seed" in part else []
            for _, seed in seeds:
                ax.plot(seed["step"], seed["cosine"], color=OKABE_ITO[k % 8], alpha=0.3, lw=0.8)
            mean = part.groupby("step")["cosine"].mean()
            n = part["seed"].nunique() if "seed" in part else 1
            label = None if group is None else f"{group} ({n} seed{'s' if n > 1 else ''})"
            ax.plot(mean.index, mean.values, "o-" if len(mean) < 15 else "-", ms=3, color=OKABE_ITO[k % 8], lw=2,
                    label=label)
        ax.set_title(GRADIENT_TITLES[matrix], fontsize=9)
        ax.set_xlabel("training step")
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_ylim(min(-0.1, float(kept["cosine"].min()) - 0.05), 1.0)
        ax.grid(alpha=0.25)
    axes[0].set_ylabel("cosine(kept term, full gradient)")
    if by:
        axes[0].legend(fontsize=7)
    fig.suptitle(title or "The associative-memory term's share of the gradient over training", fontsize=10)
    fig.tight_layout()
    return fig, kept.reset_index(drop=True)


def gradient_terms_figure(shares: pd.DataFrame, title: str = "") -> tuple[Figure, pd.DataFrame]:
    """The gradient's named terms at one model (:func:`compose_lens.registry.gradient.terms.shares_of_model`),
    one panel per product: a bar per term, its cosine with the full gradient, the kept term first and in
    blue, its share ||term|| / ||full|| printed beside it."""
    fig, axes = subplots(1, 3, figsize=(REPORT_WIDTH_IN, 3.4), sharex=True)
    for ax, matrix in zip(axes, GRADIENT_TITLES):
        part = shares[shares["matrix"] == matrix]
        part = pd.concat([part[part["term"] == "kept"], part[part["term"] != "kept"]])
        y = np.arange(len(part))[::-1]
        ax.barh(y, part["cosine"], color=[OKABE_ITO[0] if t == "kept" else "#BBBBBB" for t in part["term"]],
                edgecolor="black", linewidth=0.4)
        for yi, cosine, share in zip(y, part["cosine"], part["share"]):
            ax.text(max(cosine, 0) + 0.03, yi, f"share {share:.2f}", va="center", fontsize=8)
        ax.set_yticks(y, [t.replace("_", " ") for t in part["term"]], fontsize=8)
        ax.set_title(textwrap.fill(GRADIENT_TITLES[matrix], 34), fontsize=9)
        ax.axvline(0, color="grey", lw=0.5)
        ax.set_xlim(min(-0.1, float(shares["cosine"].min()) - 0.05), 1.45)
        ax.set_xlabel("cosine with the full gradient")
        ax.grid(axis="x", alpha=0.25)
    fig.suptitle(title or "The gradient's named terms at this model: the kept (associative-memory) term in blue",
                 fontsize=10)
    fig.tight_layout()
    return fig, shares.reset_index(drop=True)
