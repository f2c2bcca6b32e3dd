"""DAS's figure: interchange-intervention accuracy against the subspace's rank, per site, beside its controls."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from compose_lens.views.drawing import OKABE_ITO, subplots

CONTROL_STYLE = {"learned": (OKABE_ITO[0], "o", "-", "learned subspace (DAS)"),
                 "random subspace": (OKABE_ITO[1], "s", "--", "random subspace, same rank"),
                 "arbitrary labels": (OKABE_ITO[3], "^", ":", "DAS towards arbitrary labels")}
SITE_TITLES = {"value_after_layer1": "value token, after layer 1 (blocks.0)",
               "equals_before_mlp2": "'=' before MLP2: after layer 2 (blocks.1) attention",
               "query_variable_after_layer1": "query's variable token, after layer 1 (blocks.0)\n(placebo site)"}


def das_figure(table: pd.DataFrame, title: str = "") -> tuple[Figure, pd.DataFrame]:
    """Interchange-intervention accuracy against the subspace's rank, one panel per site, the
    learned subspace beside its controls, chance (1/p) dotted."""
    sites = list(dict.fromkeys(table["site"]))
    fig, axes = subplots(1, len(sites), figsize=(4.2 * len(sites), 3.6), sharey=True, squeeze=False)
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
    return fig, table
