"""The patching figures: per site and token role or position (:func:`patching_figure`, ``patch`` and
``patch-heads``) and path patching (:func:`path_patching_figure`), each scale naming its metric in words.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from compose_lens.data.pairs import QUERY_ROLES, ROLES, VARIANT_ROLES
from compose_lens.core import stats
from compose_lens.views.drawing import OKABE_ITO, heatmap, layer_name, metric_words, subplots

def patch_scale(metric: str = "logit_diff") -> str:
    """The patching colour bar's label for ``metric``."""
    return f"normalised {metric_words(metric)} (0: corrupted, 1: clean)"


def table_metric(table: pd.DataFrame) -> str:
    """The metric a patching table was made with, read from its ``clean_<metric>`` column."""
    names = [c[len("clean_"):] for c in table.columns if c.startswith("clean_")]
    return names[0] if names else "logit_diff"


def patching_figure(table: pd.DataFrame, title: str) -> tuple[Figure, pd.DataFrame]:
    """Normalised logit difference per site (rows, in forward-pass order) and token role or position
    (columns) of :func:`compose_lens.registry.patching.tables.patching_table`; returns the table with its
    ``site`` labels. Rows below 1e-4 everywhere (an absent MLP, such as layer 1's) are left out.
    """
    site = [f"{layer_name(b)} · {c}{'' if h < 0 else f' head {h}'}"
            for c, h, b in zip(table["component"], table["head"], table["block"])]
    flow = table["component"].map({c: i for i, c in enumerate(_FLOW)}).fillna(len(_FLOW))
    table = table.assign(site=site, _order=table["block"] * 100 + flow * 10 + table["head"].clip(lower=0))
    table = table.sort_values("_order", kind="stable").drop(columns="_order")
    by_role = "position" not in table
    column = "role" if by_role else "position"
    grid = table.pivot_table(index="site", columns=column, values="mean", sort=False)
    if by_role:
        from_roles = [r for r in _ROLE_ORDER if r in grid.columns]
        grid = grid[from_roles + [c for c in grid.columns if c not in from_roles]]
        labels = list(grid.columns)
    else:
        roles = table.drop_duplicates("position").set_index("position")["role"]
        labels = [f"{p} {roles[p]}" if roles[p] != "context" else str(p) for p in grid.columns]
    grid = grid[(grid.abs() > 1e-4).any(axis=1)]
    fig, ax = subplots(figsize=(max(6.5, 0.62 * len(labels) + 3.5), max(3, 0.42 * len(grid.index) + 1.6)))
    values = grid.to_numpy()
    finite = values[np.isfinite(values)]
    lim = max(1.0, float(np.abs(finite).max()) if finite.size else 1.0)  # 0 white; 1, the clean run, full red
    low = min(0.0, float(finite.min()) if finite.size else 0.0)
    heatmap(ax, values, labels, list(grid.index), title, aspect="auto", fontsize=8, rotation=35, vmax=lim,
            colorbar_label=patch_scale(table_metric(table)), annotate=by_role, bar_range=(low, lim))
    ax.set_xlabel("token role in the clean prompt" if by_role else "position (query roles named)")
    ax.set_ylabel("patched activation", labelpad=10)  # matplotlib's 4 touched the site names
    fig.tight_layout()
    return fig, table


# a block's order (a head's query, key, value and pattern before its output)
_FLOW = ("resid_pre", "q", "k", "v", "pattern", "z", "attn_out", "resid_mid", "mlp_out", "resid_post")
# the token roles, the context's (a variant task's too) before the query's
_ROLE_ORDER = ROLES[:5] + VARIANT_ROLES + QUERY_ROLES


def path_patching_figure(table: pd.DataFrame, title: str) -> tuple[Figure, pd.DataFrame]:
    """One bar per path of :func:`compose_lens.registry.patching.tables.path_patching` (receiver ``all``, the
    sender's whole effect, last and grey), with its 95 % interval and value; 0 and 1 dotted."""
    metric = table_metric(table)
    y = np.arange(len(table))
    value = table["mean"].to_numpy()
    err = np.stack([value - table["ci_low"].to_numpy(), table["ci_high"].to_numpy() - value]).clip(min=0)
    colours = ["#999999" if r == "all" else OKABE_ITO[4] for r in table["receiver"]]
    fig, ax = subplots(figsize=(6.5, max(2.2, 0.45 * len(table) + 1.3)))
    ax.barh(y, value, xerr=err, color=colours, capsize=3, error_kw={"lw": 0.9})
    for yi, v, low, high in zip(y, value, table["ci_low"], table["ci_high"]):
        ax.text(max(v, high, 0) + 0.03, yi, stats.format_estimate(v, low, high), va="center", fontsize=8)
    labels = ["every path (the sender alone)" if r == "all" else f"→ {r}" for r in table["receiver"]]
    ax.set_yticks(y, labels, fontsize=8)
    ax.invert_yaxis()
    for x in (0, 1):
        ax.axvline(x, color="black", lw=0.8, ls=":")
    ax.set_xlim(min(-0.1, float(np.nanmin(table["ci_low"])) - 0.05), 1.6)
    ax.set_xlabel(patch_scale(metric), fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig, table
