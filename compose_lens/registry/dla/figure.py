"""The ``dla`` figure: what writes the answer, each component's direct contribution to the answer margin at
``=`` beside the logit lens, the residual stream read through the unembedding after each stage
(:func:`logit_attribution_figure`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from compose_lens.views.drawing import OKABE_ITO, REPORT_WIDTH_IN, subplots

def _wrap_component(label: str) -> str:
    for old, new in ((" (", "\n("), (") ", ")\n"), (" embedding", "\nembedding"), (" bias", "\nbias")):
        label = label.replace(old, new)
    return label


def _attribution_by_pool(ax: Axes, by_pool: pd.DataFrame) -> pd.DataFrame:
    """Each component's direct contribution (logits, 95 % interval) in each pool, but the one that writes
    nearly the whole margin (named in the title with its share): beside it, a sign flip of half a logit
    between pools (layer 2's direct term: + on training pairs, - on add-restricted ones) would not show."""
    pools = list(dict.fromkeys(by_pool["pool"]))
    mean_share = by_pool.groupby("component", sort=False)["share"].mean()
    largest = mean_share.abs().idxmax() if mean_share.notna().any() else None  # no margin: no shares (all NaN)
    spread = by_pool[by_pool["component"] == largest]["share"]
    rest = by_pool[(by_pool["component"] != largest)]
    moving = rest.groupby("component", sort=False)["contribution"].apply(lambda v: v.abs().max() > 1e-6)
    components = [c for c in moving.index if moving[c]]
    width = 0.7 / max(len(components), 1)
    for i, pool in enumerate(pools):
        if "add_restricted" in pool:
            ax.axvspan(i - 0.45, i + 0.45, color="#999999", alpha=0.18, lw=0)
    for j, component in enumerate(components):
        part = rest[rest["component"] == component].set_index("pool").reindex(pools)
        xs = np.arange(len(pools)) + (j - (len(components) - 1) / 2) * width
        y = part["contribution"].to_numpy()
        err = None
        if {"contribution_low", "contribution_high"} <= set(part.columns):
            err = np.stack([y - part["contribution_low"].to_numpy(), part["contribution_high"].to_numpy() - y]).clip(0)
        ax.errorbar(xs, y, yerr=err, fmt="osD^v<>"[j % 7], color=OKABE_ITO[j % 8], ms=5, capsize=2, lw=1,
                    label=component)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(range(len(pools)), [p.replace("_", " ") for p in pools], fontsize=8, rotation=30, ha="right",
                  rotation_mode="anchor")
    ax.set_xlim(-0.6, len(pools) - 0.4)
    ax.set_ylabel("direct contribution to the answer margin\n(logits; bars: 95 % interval)", fontsize=9)
    left_out = ("every component drawn: the answer margin is 0, so no share of it" if largest is None else
                f"{largest} not drawn: it writes {spread.min():.2f}-{spread.max():.2f} of the margin in every pool")
    ax.set_title(f"direct logit attribution at '=' by pool (shaded: add-restricted pools)\n{left_out}", fontsize=9)
    low, high = ax.get_ylim()
    ax.set_ylim(low - 0.4 * (high - low), high)  # room under the points for the legend
    if ax.get_legend_handles_labels()[0]:  # no component drawn (all-zero weights): no legend to draw
        ax.legend(fontsize=8, loc="lower right", ncol=2, title="component", title_fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return rest[rest["component"].isin(components)]


def logit_attribution_figure(table: pd.DataFrame, lens: pd.DataFrame,
                             by_pool: pd.DataFrame | None = None) -> tuple[Figure, pd.DataFrame]:
    """Left: with ``by_pool`` (:func:`compose_lens.registry.dla.attribution.logit_attribution` with
    ``by="pool"``), each smaller component's direct contribution per pool with its interval
    (:func:`_attribution_by_pool`); without it, each component's direct share of the answer margin at
    ``=`` per sequence kind. Right: the logit lens, accuracy of the residual stream read through the
    unembedding after each stage."""
    fig, (ax, lx) = subplots(1, 2, figsize=(REPORT_WIDTH_IN, 4.8 if by_pool is not None else 4.4),
                             gridspec_kw={"width_ratios": [3, 2]})
    kinds = list(dict.fromkeys(table["kind"]))
    data = table
    if by_pool is not None and len(by_pool):
        data = _attribution_by_pool(ax, by_pool)
    else:
        components = list(dict.fromkeys(table["component"]))
        width = 0.8 / len(kinds)
        for i, kind in enumerate(kinds):
            shares = table[table["kind"] == kind].set_index("component")["share"].reindex(components)
            xs = np.arange(len(components)) + (i - (len(kinds) - 1) / 2) * width
            bars = ax.bar(xs, shares.values, width, color=OKABE_ITO[i], label=kind)
            for bar, value in zip(bars, shares.values):
                if abs(value) >= 0.05:
                    ax.annotate(f"{value:.2f}", (bar.get_x() + bar.get_width() / 2, value), ha="center",
                                va="bottom" if value >= 0 else "top", fontsize=8, rotation=90,
                                xytext=(0, 2 if value >= 0 else -2), textcoords="offset points")
        ax.set_xticks(np.arange(len(components)), [_wrap_component(c) for c in components], fontsize=8)
        ax.axhline(0, color="black", lw=0.6)
        ax.set_ylabel("share of the answer margin", fontsize=9)
        ax.set_title("direct logit attribution at '='", fontsize=10)
        ax.legend(title="sequence kind", fontsize=8, title_fontsize=8)
    stages = list(dict.fromkeys(lens.sort_values("order")["after"]))
    for i, kind in enumerate(kinds):
        acc = lens[lens["kind"] == kind].set_index("after")["accuracy"].reindex(stages)
        lx.plot(range(len(stages)), acc.values, marker="o", color=OKABE_ITO[i], label=kind)
    lx.set_xticks(range(len(stages)), [_wrap_component(s) for s in stages], fontsize=8)
    lx.set_ylim(-0.02, 1.02)
    lx.set_ylabel("accuracy of the unembedded residual", fontsize=9)
    lx.set_title("logit lens at '='", fontsize=10)
    lx.legend(fontsize=8, title="sequence kind", title_fontsize=8)
    fig.tight_layout()
    return fig, data
