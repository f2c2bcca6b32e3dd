"""The ``qk`` figures: the binder's attention from position alone (:func:`positional_qk_figure`, the key one
back outlined), the router's variable identity (:func:`variable_identity_figure`), both side by side
(:func:`qk_heatmaps_figure`), on the colour scales of every attention view
(:mod:`compose_lens.registry.attention.figure`).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from compose_lens.analysis.probes import positional_attention
from compose_lens.views.drawing import (ATTENTION_SCALE, MARK_STYLE, REPORT_WIDTH_IN, SCORE_LABEL, heatmap,
                                       layer_name, matrix_frame, subplots)


def _positional_panel(ax: Axes, positional: np.ndarray, fontsize: float, block: int = 0) -> pd.DataFrame:
    """The binder's attention from position alone (:func:`~compose_lens.analysis.probes.positional_attention`)
    on ``ax``, in the unit and colours of an attention pattern, with the cells where the study's
    previous-token head peaks outlined: for a query holding a value, the key one back, its variable's (any
    position after the first can hold a value: the padding is scattered, SPEC section 3). The data:
    :func:`positional_frame`."""
    scores = np.asarray(positional, dtype=float)
    n = len(scores)
    weights = positional_attention(scores).numpy()
    heatmap(ax, weights, range(n), range(n), f"{layer_name(block)}: attention from position alone",
            **ATTENTION_SCALE, fontsize=fontsize, rotation=0)
    colour, ls, _ = MARK_STYLE["previous"]
    for i in range(1, n):
        ax.add_patch(Rectangle((i - 1.5, i - 0.5), 1, 1, fill=False, ec=colour, ls=ls, lw=2,
                               label=None if i > 1 else "previous token: where the head peaks when the query is "
                                                        "a value (its variable)"))
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
    if n > 1:  # below the axes: covers no cell
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), frameon=False)
    return positional_frame(scores, weights)


def positional_frame(positional: np.ndarray, weights: np.ndarray | None = None) -> pd.DataFrame:
    """The positional figure's data: the positional scores and the attention from position alone (column
    ``matrix``: ``score``, ``attention_from_position``; ``weights``: that attention where it is computed
    already), one row per query position."""
    scores = np.asarray(positional, dtype=float)
    index = [f"pos{i}" for i in range(len(scores))]
    weights = positional_attention(scores).numpy() if weights is None else weights
    return pd.concat([matrix_frame(scores, index, index, "query_position").assign(matrix="score"),
                      matrix_frame(weights, index, index, "query_position").assign(matrix="attention_from_position")])


def qk_heatmaps_figure(positional: np.ndarray, identity: np.ndarray, variables: Sequence[str],
                       title: str = "") -> tuple[Figure, pd.DataFrame]:
    """The binder's (layer 1's) attention from position alone, the softmax over the allowed keys of
    ``P QK_binder P^T / sqrt(d_head)`` (``positional``: those scores, query position row, key position
    column), beside the router's (layer 2's) variable identity
    ``(E_var OV_binder) QK_router (E_var OV_binder)^T / sqrt(d_head)`` in :data:`SCORE_LABEL`, its diagonal
    outlined."""
    fig, (a, b) = subplots(1, 2, figsize=(REPORT_WIDTH_IN, 5.4))
    left = _positional_panel(a, positional, fontsize=8)
    _identity_panel(b, identity, variables, fontsize=8)
    for i in range(len(variables)):
        b.add_patch(Rectangle((i - 0.5, i - 0.5), 1, 1, fill=False, ec="black", lw=1))
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    left["matrix"] = "layer1_positional_" + left["matrix"]
    data = pd.concat([left.rename(columns={"query_position": "layer1_positional_query"}),
                      matrix_frame(identity, list(variables), list(variables),
                                    "layer2_identity_query").assign(matrix="layer2_variable_identity")])
    return fig, data


def positional_qk_figure(positional: np.ndarray, block: int = 0) -> tuple[Figure, pd.DataFrame]:
    """The binder's (paper: layer 1's, blocks.0; ``block``) attention from position alone over the context
    positions: the softmax over the keys each query may attend to of the positional scores
    ``P QK_binder P^T / sqrt(d_head)`` (``positional``: :func:`~compose_lens.analysis.probes.positional_qk_scores`,
    query position row, key position column), in attention weight, the cells above the diagonal blank
    (:func:`_positional_panel`). On the paper model position alone puts most rows' peak on the diagonal, not
    on the key one back: the look back comes from the tokens (the report's caption counts the rows)."""
    fig, ax = subplots(figsize=(5, 4.8))
    data = _positional_panel(ax, positional, fontsize=10, block=block)
    fig.tight_layout()
    return fig, data


def _identity_panel(ax: Axes, identity: np.ndarray, variables: Sequence[str], fontsize: float) -> None:
    heatmap(ax, identity, list(variables), list(variables), f"{layer_name(1)}: variable identity,\n= carrying a "
            f"variable against the value tagged with one", fontsize=fontsize, rotation=0, colorbar_label=SCORE_LABEL)
    ax.set_xlabel("key: value tagged with variable")
    ax.set_ylabel("query: = carrying variable")


def variable_identity_figure(identity: np.ndarray, variables: Sequence[str]) -> tuple[Figure, pd.DataFrame]:
    """Layer 2's (blocks.1) variable identity ``(E_var OV_binder) QK_router (E_var OV_binder)^T / sqrt(d_head)``
    (layer 1's OV, layer 2's QK), in :data:`SCORE_LABEL`: the score of a query ``=`` carrying one variable
    against a key value tagged (through layer 1's OV) with another."""
    fig, ax = subplots(figsize=(5, 4.2))
    _identity_panel(ax, identity, variables, fontsize=10)
    fig.tight_layout()
    return fig, matrix_frame(identity, variables, variables, "query_variable")
