"""The figures of the standard methods (:mod:`compose_lens.analysis.das`, :mod:`compose_lens.analysis.llc`).

Drawing only, from the tables those modules return, with the conventions of
:mod:`compose_lens.plots` (whose :func:`~compose_lens.plots.save` and
:func:`~compose_lens.plots.mark_phases` they use): colour-blind-safe colours (Okabe-Ito), values
written where a reader needs them, labels of at least 8 pt, layers named ``layer N (blocks.M)``.
Each function returns the matplotlib figure.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from compose_lens.plots import OKABE_ITO, mark_phases, plt

CONTROL_STYLE = {"learned": (OKABE_ITO[0], "o", "-", "learned subspace (DAS)"),
                 "random subspace": (OKABE_ITO[1], "s", "--", "random subspace, same rank"),
                 "arbitrary labels": (OKABE_ITO[3], "^", ":", "DAS towards arbitrary labels")}
SITE_TITLES = {"value_after_layer1": "value token, after layer 1 (blocks.0)",
               "equals_before_mlp2": "'=' before MLP2: after layer 2 (blocks.1) attention",
               "query_variable_after_layer1": "query's variable token, after layer 1 (blocks.0)\n(placebo site)"}


def das_figure(table: pd.DataFrame, title: str = "") -> plt.Figure:
    """Interchange-intervention accuracy against the subspace's rank, one panel per site, the
    learned subspace beside its controls, chance (1/p) dotted."""
    sites = list(dict.fromkeys(table["site"]))
    fig, axes = plt.subplots(1, len(sites), figsize=(4.2 * len(sites), 3.6), sharey=True, squeeze=False)
    ranks = sorted(table["rank"].unique())
    for ax, site in zip(axes[0], sites):
        part = table[table["site"] == site]
        for control, (colour, marker, line, label) in CONTROL_STYLE.items():
            rows = part[part["control"] == control].sort_values("rank")
            if rows.empty:
                continue
            x = [ranks.index(r) for r in rows["rank"]]
            ax.plot(x, rows["iia"], color=colour, marker=marker, ls=line, label=label)
            if control == "learned":
                for xi, v in zip(x, rows["iia"]):
                    ax.annotate(f"{v:.2f}", (xi, v), textcoords="offset points", xytext=(0, 6), ha="center",
                                fontsize=8, color=colour)
        ax.axhline(float(part["chance"].iloc[0]), color="black", lw=0.8, ls=":", label="chance (1/p)")
        ax.set_xticks(range(len(ranks)), [str(r) for r in ranks], fontsize=9)
        ax.set_xlabel("subspace dimension (rank)", fontsize=9)
        ax.set_title(SITE_TITLES.get(site, site), fontsize=9)
        ax.set_ylim(-0.03, 1.08)
        ax.tick_params(labelsize=9)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("interchange-intervention accuracy\n(answers source value + base constant)", fontsize=9)
    axes[0][-1].legend(fontsize=8, loc="center right")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def llc_figure(table: pd.DataFrame, phases: Mapping | None = None, title: str = "") -> plt.Figure:
    """The LLC of each checkpoint (mean over chains, bars: their spread; hollow: an estimate that
    failed a sanity check) above the checkpoint's training loss, the phase onsets dashed."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.5, 5.6), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 2]})
    table = table.sort_values("step")
    healthy = table["healthy"].astype(bool).to_numpy()
    colour = OKABE_ITO[0]
    top.errorbar(table["step"], table["llc_mean"], yerr=table["llc_std"], color=colour, lw=1.2, capsize=2,
                 fmt="-", label="LLC (mean of chains, bar: their s.d.)")
    top.scatter(table["step"][healthy], table["llc_mean"][healthy], color=colour, s=18, zorder=3)
    if (~healthy).any():
        top.scatter(table["step"][~healthy], table["llc_mean"][~healthy], facecolors="white", edgecolors=colour,
                    s=24, zorder=3, label="failed a sanity check (see llc.csv)")
    top.set_ylabel("local learning coefficient", fontsize=9)
    mark_phases(top, phases)
    top.legend(fontsize=8, loc="best")
    bottom.plot(table["step"], np.maximum(table["train_loss"], 1e-6), color=OKABE_ITO[2], marker="o", ms=3)
    bottom.set_yscale("log")
    bottom.set_ylabel("training loss at\nthe checkpoint", fontsize=9)
    bottom.set_xlabel("training step", fontsize=9)
    mark_phases(bottom, phases, label=False)
    for ax in (top, bottom):
        ax.tick_params(labelsize=9)
        ax.grid(alpha=0.3)
    if title:
        top.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig
