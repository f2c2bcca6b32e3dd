"""The LLC's figure: each checkpoint's local learning coefficient above its training loss, the phases marked."""

from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from compose_lens.views.drawing import OKABE_ITO, subplots
from compose_lens.views.training import mark_phases


def llc_figure(table: pd.DataFrame, phases: Mapping | None = None, title: str = "") -> tuple[Figure, pd.DataFrame]:
    """The LLC of each checkpoint (mean over chains, bars: their spread; hollow and off the line: an
    estimate that failed a sanity check) above the checkpoint's training loss, the phase onsets dashed."""
    fig, (top, bottom) = subplots(2, 1, figsize=(7.5, 5.6), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 2]})
    table = table.sort_values("step")
    healthy = table["healthy"].astype(bool).to_numpy()
    colour = OKABE_ITO[0]
    # the line joins only the estimates that passed the sanity checks; every one keeps its bar and marker
    top.errorbar(table["step"], table["llc_mean"], yerr=table["llc_std"], color=colour, lw=1.2, capsize=2,
                 fmt="none")
    top.plot(table["step"][healthy], table["llc_mean"][healthy], "-o", color=colour, lw=1.2, ms=4, zorder=3,
             label="LLC (mean of chains, bar: their s.d.)")
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
    return fig, table
