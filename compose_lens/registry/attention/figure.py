"""Figures of attention: :func:`attention_figure` / :func:`view_figure` both layers' patterns on one
sequence, the cells the circuit predicts outlined, on the colour scale every attention heatmap shares
(:data:`compose_lens.views.drawing.ATTENTION_SCALE`: attention weight after the softmax, on a square-root
scale so that weights of 0.2, which the circuit's cells often have, are not washed out). The patterns
come from :func:`compose_lens.registry.attention.sequences.sequence_views`.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from compose_lens.views.drawing import (ATTENTION_SCALE, MARK_STYLE, REPORT_WIDTH_IN, heatmap, layer_name,
                                       matrix_frame, subplots)


def attention_figure(patterns: np.ndarray, tokens: Sequence[str], marks: Mapping[int, Sequence] | None = None,
                     title: str = "", layer_names: Sequence[str] | None = None) -> tuple[Figure, pd.DataFrame]:
    """Attention patterns (layers, n, n) of one sequence, with marked cells: ``marks[layer]`` lists
    ``(query_position, key_position, kind)``, kind a key of :data:`MARK_STYLE`."""
    patterns = np.asarray(patterns, dtype=float)
    n_layers = patterns.shape[0]
    names = list(layer_names or [layer_name(i) for i in range(n_layers)])
    labels = [f"{i}:{t}" for i, t in enumerate(tokens)]
    fig, axes = subplots(1, n_layers, figsize=(min(REPORT_WIDTH_IN, 5.5 * n_layers), 5.8), squeeze=False)
    seen = set()
    for layer, ax in enumerate(axes[0]):
        heatmap(ax, patterns[layer], labels, labels, names[layer], **ATTENTION_SCALE, fontsize=8)
        for q, k, kind in (marks or {}).get(layer, ()):
            color, ls, text = MARK_STYLE[kind]
            ax.add_patch(Rectangle((k - 0.5, q - 0.5), 1, 1, fill=False, ec=color, ls=ls, lw=2,
                                   label=text if (layer, kind) not in seen else None))
            seen.add((layer, kind))
        ax.set_xlabel("key (source)")
        ax.set_ylabel("query (destination)")
        if any(kind for _, _, kind in (marks or {}).get(layer, ())):  # below the axes: covers no cell
            ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    frames = []
    for layer in range(n_layers):
        frame = matrix_frame(patterns[layer], labels, labels, "query")
        frames.append(frame.assign(layer=layer + 1, block=layer))
    return fig, pd.concat(frames)


def view_figure(view: Mapping) -> tuple[Figure, pd.DataFrame]:
    """:func:`attention_figure` of one :func:`compose_lens.registry.attention.sequences.sequence_views` entry
    (head 0)."""
    verdict = "correct" if view["correct"] else "wrong"
    return attention_figure(view["patterns"][:, 0].numpy(), view["words"], view["marks"],
                            title=f"{view['text']}  ->  {view['answer']} ({verdict}, label {view['label']})")
