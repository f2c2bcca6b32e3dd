"""The answer lens's figure: the top-1 rate and the answer's margin after each stage, one line per pool."""

from __future__ import annotations

import pandas as pd

from compose_lens.views.drawing import OKABE_ITO, subplots


def answer_lens_figure(table: pd.DataFrame):
    """Two panels over the stages (embeddings, after each layer): the answer's top-1 rate with its 95 %
    interval, and its mean margin over the best other token; a line per pool."""
    fig, (top, margin) = subplots(1, 2, figsize=(9, 3.4))
    for i, (pool, rows) in enumerate(table.sort_values("order").groupby("pool", sort=False)):
        colour, dashes = OKABE_ITO[i % len(OKABE_ITO)], "-" if i < len(OKABE_ITO) else "--"
        top.plot(rows["order"], rows["top1"], dashes, marker="o", color=colour, label=pool)
        top.fill_between(rows["order"], rows["low"], rows["high"], color=colour, alpha=0.15)
        margin.plot(rows["order"], rows["margin"], dashes, marker="o", color=colour)
    stages = table.drop_duplicates("order").sort_values("order")
    for ax, label in ((top, "top-1 rate of the answer"), (margin, "answer margin (logits)")):
        ax.set_xticks(stages["order"], stages["stage"])
        ax.set_ylabel(label)
    top.set_ylim(-0.02, 1.02)
    margin.axhline(0, color="grey", lw=0.8)
    top.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig, table
