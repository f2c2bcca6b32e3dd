"""The early jump's figure: layer 1's attention on one sequence and layer 2's variable identity, before and
after the jump, on the colour scales of every attention view (:mod:`compose_lens.registry.attention.figure`)."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from compose_lens.views.drawing import (ATTENTION_SCALE, REPORT_WIDTH_IN, SCORE_LABEL, heatmap, layer_name,
                                       matrix_frame, subplots)


def early_jump_figure(before: Mapping, after: Mapping, variables: Sequence[str]) -> tuple[Figure, pd.DataFrame]:
    """Layer-1 attention on one sequence and the layer-2 identity matrix, before vs after a jump
    (``before`` / ``after``: states of :func:`compose_lens.registry.early_jump.jump.jump_states`)."""
    fig, axes = subplots(2, 2, figsize=(REPORT_WIDTH_IN, 10))
    frames = []
    # one colour scale for both identity panels: "after" is read against "before"
    shared = max(float(np.nanmax(np.abs(np.asarray(s["identity"], dtype=float)))) for s in (before, after)) or 1.0
    for col, state in enumerate((before, after)):
        labels = [f"{i}:{t}" for i, t in enumerate(state["tokens"])]
        acc = f"\nassignment accuracy {state['accuracy']:.2f}" if state.get("accuracy") is not None else ""
        heatmap(axes[0, col], state["pattern0"], labels, labels, f"step {state['step']}: {layer_name(0)} attention{acc}",
                **ATTENTION_SCALE, fontsize=8)
        heatmap(axes[1, col], state["identity"], variables, variables,
                f"step {state['step']}: {layer_name(1)} variable identity", colorbar_label=SCORE_LABEL,
                vmax=shared, fontsize=8, rotation=0)
        axes[0, col].set_xlabel("key (source) position:token")
        axes[0, col].set_ylabel("query (destination) position:token")
        axes[1, col].set_xlabel("key variable (value tagged by layer 1)")
        axes[1, col].set_ylabel("query variable (at =)")
        frames.append(matrix_frame(state["pattern0"], labels, labels, "query").assign(
            step=state["step"], matrix="layer1_attention"))
        frames.append(matrix_frame(state["identity"], variables, variables, "query").assign(
            step=state["step"], matrix="layer2_variable_identity"))
    fig.suptitle("The early generalisation jump: before and after")
    fig.tight_layout()
    return fig, pd.concat(frames)
