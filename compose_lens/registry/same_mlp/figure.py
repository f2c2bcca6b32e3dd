"""Figures of one MLP for constants and variables: the three tests of :mod:`compose_lens.registry.same_mlp.comparisons`
that can fail, with their controls and the "not shared" prediction (:func:`same_mlp_figure`), and the
correlational view, the MLP2 input's cosines between constant and variable operands
(:func:`cosine_histograms_figure`).
"""

from __future__ import annotations

import textwrap
from typing import Mapping

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from compose_lens.views.drawing import OKABE_ITO, REPORT_WIDTH_IN, StudyFigure, subplots

COSINE_TITLE = "MLP2 input (centred): + x y = against the same values through a variable, and against other values"


def cosine_histograms_figure(groups: Mapping[str, np.ndarray], title: str = COSINE_TITLE
                             ) -> tuple[Figure, pd.DataFrame]:
    """Step-outline histograms of cosine similarities, one panel per side (the part of a group's
    name after ", ": ``left variable``, ``right variable``), each group's outline in its own
    Okabe-Ito colour with its mean dashed and printed in the legend."""
    def split(name: str) -> tuple[str, str]:
        kind, _, side = name.partition(", ")
        return kind, side or "all"

    sides = list(dict.fromkeys(split(n)[1] for n in groups))
    kinds = list(dict.fromkeys(split(n)[0] for n in groups))
    fig, axes = subplots(1, len(sides), figsize=(min(REPORT_WIDTH_IN, 4.6 * len(sides) + 0.6), 3.6),
                             squeeze=False, sharey=True)
    bins = np.linspace(-1, 1, 81)
    for name, values in groups.items():
        kind, side = split(name)
        ax = axes[0, sides.index(side)]
        values = np.asarray(values, dtype=float).ravel()
        colour = OKABE_ITO[kinds.index(kind) % 7]
        if not len(values):  # a task too small to give any such pair (modulus 2): said, not drawn
            ax.plot([], [], color=colour, lw=1.8, label=f"{kind} (no such prompts, n = 0)")
            continue
        ax.hist(values, bins=bins, density=True, histtype="step", lw=1.8, color=colour,
                label=f"{kind} (mean {values.mean():.2f}, n = {len(values)})")
        ax.axvline(values.mean(), color=colour, ls="--", lw=1)
    for ax, side in zip(axes[0], sides):
        ax.set_title(side, fontsize=9)
        ax.set_xlabel("cosine similarity of the MLP2 input", fontsize=9)
        ax.tick_params(labelsize=8)
        ax.legend(fontsize=8, loc="upper left", frameon=False)
        ax.grid(alpha=0.25)
    axes[0, 0].set_ylabel("density", fontsize=9)
    fig.suptitle(textwrap.fill(title, 100), fontsize=9)
    fig.tight_layout()
    data = pd.concat([pd.DataFrame({"group": name, "cosine": np.asarray(v, dtype=float).ravel()})
                      for name, v in groups.items()])
    return fig, data


SAME_MLP_COLOURS = {"cross": OKABE_ITO[0], "same": OKABE_ITO[2], "control": OKABE_ITO[3], "reference": "#999999"}
SAME_MLP_KINDS = {"cross": "cross-type (constant <-> variable)", "same": "same-type reference",
                  "control": "control", "reference": "reference"}


def same_mlp_figure(report: dict) -> tuple[Figure, pd.DataFrame]:
    """The same-MLP tests of :mod:`compose_lens.registry.same_mlp.comparisons`, one panel per measure: operand
    interchange accuracy per condition and side (left, the full height), the constant vs variable
    damage profiles (one point per ablated unit), the probe's accuracy and the variables' variance share
    in the constants' subspace, each on its own axis (:func:`_interval_bars`; a bar's colour: its kind)."""
    tables = {name: pd.DataFrame(rows) for name, rows in report["tables"].items()}
    fig = StudyFigure(figsize=(REPORT_WIDTH_IN, 8.6))
    grid = fig.add_gridspec(3, 2, width_ratios=[1.25, 1], hspace=0.75, wspace=0.5)
    inter = tables["interchange"]
    inter = inter[(inter["isolation"] == report["isolation"]) | (inter["kind"] == "reference")]
    ax = fig.add_subplot(grid[:, 0])
    _interval_bars(ax, [f"{c} ({s})" for c, s in zip(inter["condition"], inter["side"])], inter, "accuracy")
    ax.set_title(f"1. operand interchange ({report['tests']['interchange']['status']})", fontsize=9)
    profiles = tables["damage_profiles"]
    ax = fig.add_subplot(grid[0, 1])
    for (name, marker), colour in zip((("1-var", "o"), ("2-var", "s")), (OKABE_ITO[0], OKABE_ITO[1])):
        if name in profiles:
            ax.scatter(profiles["const"], profiles[name], s=12, marker=marker, label=f"{name} prompts",
                       alpha=0.75, color=colour)
    ax.set_xlabel("damage on constant prompts\n(logit margin lost)", fontsize=8)
    ax.set_ylabel("damage on\nvariable prompts", fontsize=8)
    ax.tick_params(labelsize=8)
    ax.legend(fontsize=8, loc="upper left", frameon=False, handletextpad=0.1)
    ax.set_title(f"2. feature transfer ({report['tests']['feature_transfer']['status']}):\n"
                 "one point per ablated MLP2 unit", fontsize=9)
    probe = tables["probe"]
    transfer = report["tests"].get("probe_transfer", {})
    measures = [("probe", "value decoded by a probe trained\non constants", "accuracy"),
                ("subspace", "variables' variance inside the\nconstants' subspace", "share of the variance")]
    for row, (test, title, unit) in enumerate(measures, start=1):
        part = probe[probe["test"] == test] if "test" in probe else probe
        if part.empty:
            continue
        ax = fig.add_subplot(grid[row, 1])
        _interval_bars(ax, list(part["condition"]), part, unit, wrap=22)
        passed = (transfer.get(test) or {}).get("passed")
        status = "" if passed is None else f" ({'passed' if passed else 'not passed'})"
        ax.set_title(f"3{'ab'[row - 1]}. {title}{status}", fontsize=9)
    kinds = [k for k in SAME_MLP_COLOURS if k in set(inter["kind"]) | set(probe["kind"])]
    handles = [Rectangle((0, 0), 1, 1, color=SAME_MLP_COLOURS[k], label=SAME_MLP_KINDS[k]) for k in kinds]
    handles += [Line2D([], [], color="black", marker="|", ls="", ms=10, mew=1.5,
                           label='"not shared" prediction'),
                Line2D([], [], color="black", ls=":", lw=1, label="chance")]
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=8, frameon=False, bbox_to_anchor=(0.5, 0))
    fig.suptitle(f"Same MLP for constants and variables: {report['verdict']}", fontsize=10)
    fig.subplots_adjust(left=0.3, right=0.97, top=0.92, bottom=0.14)
    return fig, inter


def _interval_bars(ax, labels, table: pd.DataFrame, unit: str, wrap: int = 60) -> None:
    """Horizontal bars with 95 % intervals and their values; the "not shared" prediction as a black
    tick, chance dotted."""
    y = np.arange(len(labels))
    value = table["value"].to_numpy()
    err = np.stack([value - table["ci_low"].to_numpy(), table["ci_high"].to_numpy() - value])
    ax.barh(y, value, xerr=err, color=[SAME_MLP_COLOURS.get(k, "#999999") for k in table["kind"]],
            capsize=2, error_kw={"lw": 0.8})
    ax.scatter(table["not_shared_prediction"], y, marker="|", s=90, color="black", zorder=3, linewidths=1.5)
    ax.axvline(float(table["chance"].iloc[0]), color="black", lw=0.8, ls=":")
    for yi, v, high, tick in zip(y, value, table["ci_high"].to_numpy(), table["not_shared_prediction"]):
        ax.text(max(v, high, tick) + 0.025, yi, f"{v:.2f}", va="center", fontsize=8)
    ax.set_yticks(y, [textwrap.fill(str(label), wrap) for label in labels], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.22)
    ax.set_xticks([0, 0.25, 0.5, 0.75, 1.0])
    ax.tick_params(axis="x", labelsize=8)
    ax.set_xlabel(unit, fontsize=8)
