"""The dynamics' figures, the phase onsets marked in each (SPEC section 7): the nine pools
(:func:`accuracy_by_variable_count_figure`, :func:`dynamics_figure`), the circuit's progress measures
(:func:`progress_measures_figure`) and the late refinement (:func:`refinement_figure`). Checkpoints are
rarely evenly spaced: a curve breaks over a gap in the sampling (:func:`plot_over_steps`) and a dense
stretch is enlarged (:func:`dense_window`).
"""

from __future__ import annotations

import textwrap
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from compose_lens.registry.probes.summary import MEASURE_KEYS, MEASURE_WORDS
from compose_lens.views.drawing import OKABE_ITO, REPORT_WIDTH_IN, layer_name, subplots
from compose_lens.views.training import PHASE_STYLE, mark_phases

POOL_GROUPS = {
    "0-var": ("0var_train", "0var_add_restricted"),
    "1-var": ("1var_train", "1var_add_restricted", "1var_var_restricted"),
    "2-var": ("2var_train", "2var_add_restricted", "2var_var_restricted_1", "2var_var_restricted_2"),
}

PHASE_CURVES = ("addition_accuracy", "assignment_accuracy", "refinement_accuracy", "equals_score_spread")


def onset_handles(phases: Mapping | None, **style) -> list[Line2D]:
    """The legend's entries for the onsets :func:`mark_phases` draws, each with its step."""
    return [Line2D([], [], color=c, ls="--", label=f"{t} onset ({phases[name]['step']})", **style)
            for name, (c, t) in PHASE_STYLE.items() if (phases or {}).get(name, {}).get("step") is not None]


GAP_FACTOR = 3.0  # a step gap this many times its finer neighbour's is a gap in the sampling, not a stride
DENSE_MIN_CHECKPOINTS = 10  # dense_window: the fewest checkpoints at the finest stride worth enlarging


def sampling_gaps(steps: Sequence[float]) -> np.ndarray:
    """For each pair of neighbouring checkpoints (sorted steps), whether the distance between them is a gap
    in the sampling: more than :data:`GAP_FACTOR` times the finer of the distances beside it (the local
    stride), as 1,000 steps after a stride of 100.

    >>> sampling_gaps([0, 100, 200, 1200, 2200]).tolist()
    [False, False, True, False]
    """
    steps = np.asarray(steps, dtype=float)
    d = np.diff(steps)
    if len(d) < 2:
        return np.zeros(len(d), dtype=bool)
    before = np.concatenate([[np.inf], d[:-1]])
    after = np.concatenate([d[1:], [np.inf]])
    return d > GAP_FACTOR * np.minimum(before, after)


def dense_window(steps: Sequence[float]) -> tuple[float, float] | None:
    """The longest stretch of checkpoints at the run's finest stride (the study's 2,501 to 6,001 every 100
    steps), when it holds at least :data:`DENSE_MIN_CHECKPOINTS` checkpoints and less than half the run."""
    steps = np.sort(np.asarray(steps, dtype=float))
    d = np.diff(steps)
    if len(d) < DENSE_MIN_CHECKPOINTS:
        return None
    finest = d.min()
    best, run_start = (0, 0), 0
    for i in range(len(d) + 1):
        if i == len(d) or not np.isclose(d[i], finest):
            if i - run_start > best[1] - best[0]:
                best = (run_start, i)
            run_start = i + 1
    first, last = steps[best[0]], steps[best[1]]
    if best[1] - best[0] + 1 < DENSE_MIN_CHECKPOINTS or last - first >= 0.5 * (steps[-1] - steps[0]):
        return None
    return float(first), float(last)


def plot_over_steps(ax: Axes, steps: Sequence[float], values: Sequence[float], **style) -> None:
    """A curve over training checkpoints, a thin dotted line of its colour over each gap in the sampling."""
    steps = np.asarray(steps, dtype=float)
    values = np.asarray(values, dtype=float)
    order = np.argsort(steps)
    steps, values = steps[order], values[order]
    gaps = np.flatnonzero(sampling_gaps(steps))
    xs = np.insert(steps, gaps + 1, np.nan)  # a NaN between the two ends of a gap breaks the line
    ys = np.insert(values, gaps + 1, np.nan)
    (line,) = ax.plot(xs, ys, **style)
    for i in gaps:
        ax.plot(steps[i:i + 2], values[i:i + 2], ls=":", lw=0.8, color=line.get_color(), label="_gap")


def accuracy_by_variable_count_figure(table: pd.DataFrame, phases: Mapping | None = None,
                                      outcome: Mapping | None = None) -> tuple[Figure, pd.DataFrame]:
    """Pool accuracies over training, one panel per variable count (0, 1, 2), the phase onsets dashed.
    Where the checkpoints are dense in a short stretch (:func:`dense_window`), a second row of panels
    enlarges it (shaded in the first row), so the addition and assignment jumps are not squeezed into a
    few pixels. ``outcome`` (``phases.json``'s) goes in the title, a stalled run's in vermillion."""
    window = dense_window(table["step"])
    rows = 2 if window else 1
    height = 4.3 if rows == 1 else 7.6
    fig, axes = subplots(rows, 3, figsize=(REPORT_WIDTH_IN, height), sharey=True, squeeze=False)
    columns = ["step"]
    markers = "osD^"
    for col, (title, pools) in enumerate(POOL_GROUPS.items()):
        for row in range(rows):
            ax = axes[row, col]
            part = table if row == 0 else table[table["step"].between(*window)]
            for i, pool in enumerate(pools):
                if pool in table:
                    plot_over_steps(ax, part["step"], part[pool], marker=markers[i], ms=2.5, lw=1.2,
                                    color=OKABE_ITO[i], label=pool.split("_", 1)[1].replace("_", " "))
                    if row == 0:
                        columns.append(pool)
            mark_phases(ax, phases, label=False)
            if row == 0:
                ax.set_title(f"{title} sequences", fontsize=9)
                ax.legend(fontsize=8, loc="best", title="pool", title_fontsize=8)
                if window:
                    ax.axvspan(*window, color="#999999", alpha=0.15, lw=0)
            else:
                ax.set_title(f"{title}: steps {window[0]:,.0f} to {window[1]:,.0f} enlarged", fontsize=9)
                ax.set_xlim(window[0] - 0.02 * (window[1] - window[0]), window[1] + 0.02 * (window[1] - window[0]))
            ax.set_xlabel("training step", fontsize=9)
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
            ax.tick_params(labelsize=8)
        if rows == 2:
            axes[0, col].set_xlabel("training step (shaded: enlarged below)", fontsize=9)
    for row in range(rows):
        axes[row, 0].set_ylabel("accuracy at =", fontsize=9)
    handles = onset_handles(phases) + ([Line2D([], [], color="black", ls=":", lw=0.8, label="gap in the checkpoints")]
                        if sampling_gaps(np.sort(table["step"].to_numpy())).any() else [])
    title = "Accuracy of the nine pools over training"
    if outcome:
        title += f": {outcome['outcome']}" + (f" ({outcome['why']})" if outcome.get("why") else "")
    colour = OKABE_ITO[3] if outcome and outcome["outcome"] == "stalled" else "black"
    fig.suptitle(textwrap.fill(title, 110), fontsize=10, color=colour)
    fig.tight_layout(rect=(0, (0.3 / height) if handles else 0, 1, 1))
    if handles:
        fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=8, frameon=False)
    return fig, table[columns].copy()


def dynamics_figure(table: pd.DataFrame, document: Mapping) -> tuple[Figure, pd.DataFrame]:
    """The figure ``compose-lens dynamics`` writes: :func:`accuracy_by_variable_count_figure` with ``phases.json``."""
    return accuracy_by_variable_count_figure(table, document.get("phases"), document.get("outcome"))


def progress_measures_figure(table: pd.DataFrame, phases: Mapping | None = None,
                             measures: Sequence[str] | None = None) -> tuple[Figure, pd.DataFrame]:
    """One small panel per progress measure over training, phase boundaries marked: the circuit measures
    present in ``table`` (:data:`MEASURE_KEYS`), else the phase curves. Each is titled in words
    (:data:`~compose_lens.registry.probes.summary.MEASURE_WORDS`) with a y label naming the kind of number
    (:func:`_measure_unit`); a count is drawn in another colour with whole-number ticks.
    """
    from matplotlib.ticker import MaxNLocator

    if measures is None:
        measures = [m for m in MEASURE_KEYS if m in table] or [m for m in PHASE_CURVES if m in table]
    n = len(measures)
    cols = min(4, max(n, 1))
    rows = max(1, -(-n // cols))
    height = 2.6 * rows + 0.9
    fig, axes = subplots(rows, cols, figsize=(REPORT_WIDTH_IN, height), squeeze=False)
    for ax, name in zip(axes.flat, measures):
        unit = _measure_unit(name)
        plot_over_steps(ax, table["step"], table[name], marker=".", ms=3, lw=1,
                        color=OKABE_ITO[3] if unit == "count" else "black")
        mark_phases(ax, phases, label=False)
        ax.set_title(textwrap.fill(MEASURE_WORDS.get(name, name.replace("_", " ")), 34), fontsize=8.5)
        ax.set_xlabel("training step", fontsize=8)
        ax.set_ylabel(unit, fontsize=8)
        ax.tick_params(which="both", labelsize=8)  # the log axes' minor labels too
        ax.grid(alpha=0.3)
        if unit == "count":
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        if "loss" in name and (table[name] > 0).all():
            ax.set_yscale("log")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    handles = [Line2D([], [], color=c, ls="--", label=f"{t} onset") for c, t in PHASE_STYLE.values()]
    fig.suptitle("Progress measures over training (dashed: phase onsets; layer 1 = blocks.0, layer 2 = blocks.1, "
                 "MLP2 = the adder's MLP)", fontsize=9.5, y=0.995)
    # the legend gets its own strip between the title and the panels, so it covers no panel title
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.6 / height), h_pad=0.9, w_pad=0.6)
    fig.legend(handles=handles, loc="upper center", ncol=3, fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, 1 - 0.28 / height))
    return fig, table[["step", *measures]].copy()


def _measure_unit(name: str) -> str:
    """The y-axis label of a progress measure: what kind of number it is."""
    if "accuracy" in name or name.endswith("_probe"):
        return "accuracy (fraction)"
    if "loss" in name:
        return "loss (nats)"
    if "share" in name or "fraction" in name or "strength" in name:
        return "fraction"
    if name.startswith("n_"):  # n_key_frequencies: how many
        return "count"
    if name.endswith("_mass"):
        return "attention weight"
    return "score"


def refinement_figure(table: pd.DataFrame, variables: Sequence[str], forbidden: Sequence[str] = (),
                      phases: Mapping | None = None) -> tuple[Figure, pd.DataFrame]:
    """Left: the ``=`` query's score in layer 1 for each variable key over training, each variable with a
    forbidden operand slot in its own colour, the others one grey bundle (they move together). Right: the
    accuracy with a variable in a slot it never had in training, in its variable's colour, solid for 1-var
    and dotted for 2-var sequences, the two var-restricted pools in black. Phase onsets dashed in both."""
    fig, (left, right) = subplots(1, 2, figsize=(REPORT_WIDTH_IN, 5.4))
    score_cols = [f"equals_score_{v}" for v in variables if f"equals_score_{v}" in table]
    slot_cols = [c for c in table if c.startswith("slot_")]
    slots = list(dict.fromkeys(c.split("_", 2)[2] for c in slot_cols))  # left_k, right_a, ...
    in_slots = [s.split("_")[1] for s in slots]
    colour_of = {v: OKABE_ITO[i % 4] for i, v in enumerate(dict.fromkeys(
        [v for v in variables if v in forbidden] + [v for v in in_slots if v not in forbidden]))}
    others = [c for c in score_cols if c.rsplit("_", 1)[1] not in colour_of]
    for col in others:
        plot_over_steps(left, table["step"], table[col], lw=0.8, color="#999999", alpha=0.8)
    for col in score_cols:
        v = col.rsplit("_", 1)[1]
        if v in colour_of:
            plot_over_steps(left, table["step"], table[col], lw=2, color=colour_of[v])
    mark_phases(left, phases, label=False)
    left.set_title(f"{layer_name(0)}: score of the = query for each variable's key", fontsize=9)
    left.set_xlabel("training step", fontsize=9)
    left.set_ylabel("attention score from the weights (logit)", fontsize=9)
    for col in slot_cols:
        count, slot = col.split("_", 2)[1:]
        plot_over_steps(right, table["step"], table[col], lw=1.6 if count == "1var" else 1.3,
                        color=colour_of.get(slot.split("_")[1], "#999999"), ls="-" if count == "1var" else ":")
    pool_style = {"2var_var_restricted_1": ("--", "pool 2-var var-restricted 1 (one variable in a forbidden slot)"),
                  "2var_var_restricted_2": ("-.", "pool 2-var var-restricted 2 (both in forbidden slots)")}
    for pool, (ls, _) in pool_style.items():
        if pool in table:
            plot_over_steps(right, table["step"], table[pool], color="black", lw=1.8, ls=ls)
    mark_phases(right, phases, label=False)
    right.set_title("accuracy with a variable in a slot it never had in training", fontsize=9)
    right.set_xlabel("training step", fontsize=9)
    right.set_ylim(-0.02, 1.02)
    right.set_ylabel("accuracy at =", fontsize=9)
    for ax in (left, right):
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    slot_words = {v: [s.split("_")[0] for s in slots if s.split("_")[1] == v] for v in colour_of}
    handles = [Line2D([], [], color=c, lw=2, label=f"{v}" + (f": never the {' or '.join(slot_words[v])} operand"
                                                            if slot_words[v] else ""))
               for v, c in colour_of.items()]
    if others:
        handles.append(Line2D([], [], color="#999999", lw=0.8, label=f"the other {len(others)} variables (left)"))
    if slot_cols:
        handles += [Line2D([], [], color="black", lw=1.6, ls="-", label="right: 1-var sequences"),
                    Line2D([], [], color="black", lw=1.3, ls=":", label="right: 2-var sequences")]
    handles += [Line2D([], [], color="black", lw=1.8, ls=ls, label=text)
                for pool, (ls, text) in pool_style.items() if pool in table]
    handles += onset_handles(phases, lw=1.2)
    rows = -(-len(handles) // 3)
    fig.tight_layout(rect=(0, 0.045 * rows + 0.02, 1, 1))
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=8, frameon=False)
    cols = ["step", *score_cols, *slot_cols] + [c for c in ("equals_score_spread",) if c in table]
    return fig, table[cols].copy()
