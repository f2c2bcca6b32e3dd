"""Figures across runs: a sweep's accuracy against its parameter (:func:`sweep_figure`, the study's
Figure 3), the threshold fits with their 95 % intervals (:func:`threshold_fit_figure`), each point's
phase onsets (:func:`onsets_figure`), and modularity against architecture (:func:`modularity_figure`).
"""

from __future__ import annotations

import math
import textwrap
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from compose_lens.analysis.thresholds import LEVELS, METRICS, LogisticFit, accuracy_of, sweep_xy
from compose_lens.views.drawing import OKABE_ITO, REPORT_WIDTH_IN, subplots
from compose_lens.views.training import PHASE_STYLE


def sweep_figure(rows: Sequence[dict], title: str = "") -> tuple[Figure, pd.DataFrame]:
    """Figure-3 style: each metric against the parameter of a sweep's ``results.csv`` rows (numeric values),
    one thin line per seed, the mean bold."""
    param = rows[0]["param"]
    seeds = sorted({int(r["seed"]) for r in rows})
    values = sorted({float(r["value"]) for r in rows})
    labels = {"zero_var_heldout": "0-var held-out accuracy", "two_var_union": "2-var union accuracy"}
    fig, axes = subplots(1, len(METRICS), figsize=(5.2 * len(METRICS), 3.8), squeeze=False)
    for ax, metric in zip(axes[0], METRICS):
        table = {(int(r["seed"]), float(r["value"])): accuracy_of(r, metric) for r in rows}
        for s in seeds:
            ys = [table.get((s, v), float("nan")) for v in values]
            ax.plot(values, ys, marker="o", ms=3, lw=1, alpha=0.55, label=f"seed {s}")
        mean = []
        for v in values:
            accs = [table[(s, v)] for s in seeds if (s, v) in table and not math.isnan(table[(s, v)])]
            mean.append(sum(accs) / len(accs) if accs else float("nan"))
        ax.plot(values, mean, color="black", lw=2.2, marker="o", ms=4, label="mean")
        for level in LEVELS:
            ax.axhline(level, color="grey", lw=0.6, ls=":")
        ax.set_xlabel(param)
        ax.set_ylabel(labels.get(metric, metric))
        ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.25)
    axes[0][0].legend(fontsize=8, loc="best")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig, pd.DataFrame(rows)


LEVEL_COLOURS = {0.5: "tab:blue", 0.9: "tab:purple"}
LABELS = {"zero_var_heldout": "0-var held-out accuracy (exhaustive)",
          "two_var_union": "2-var union accuracy (exhaustive)"}


def _fit_panel(ax: Axes, rows: Sequence[dict], found: Mapping, study: float | None) -> pd.DataFrame:
    """One metric: points per seed, the fitted curve, each crossing with its interval shaded."""
    x, y, seeds = sweep_xy(rows, found["metric"])
    for s in sorted(set(seeds.tolist())):
        ax.plot(x[seeds == s], y[seeds == s], "o", ms=4, alpha=0.7, label=f"seed {s}")
    fitted = np.full(len(x), np.nan)
    if found.get("fit"):
        curve = LogisticFit(n=len(x), **found["fit"])
        grid = np.linspace(x.min(), x.max(), 300)
        ax.plot(grid, curve(grid), color="black", lw=1.8, label="logistic fit")
        fitted = curve(x)
    for level, summary in found.get("levels", {}).items():
        colour = LEVEL_COLOURS.get(float(level), "grey")
        ax.axhline(float(level), color=colour, lw=0.6, ls=":")
        low, high = summary["ci95"]
        if low is not None or high is not None or len(set(summary["ci95_where"])) > 1:
            # an end beyond the range is shaded to that edge; an interval wholly beyond it, not at all
            ax.axvspan(x.min() if low is None else low, x.max() if high is None else high, color=colour, alpha=0.12)
        text = ("not crossed: " + summary["where"]) if summary["estimate"] is None else f"{summary['estimate']:.3g}"
        if summary["estimate"] is not None:
            ax.axvline(summary["estimate"], color=colour, lw=1.2)
        ax.plot([], [], color=colour, lw=6, alpha=0.3, label=f"{float(level):.0%} crossing {text} (95 % CI shaded)")
    if study is not None:
        ax.axvline(study, color="tab:red", ls="--", lw=1.4, label=f"study: {study:g}")
    ax.set_ylim(-0.03, 1.03)
    ax.grid(alpha=0.25)
    ax.set_ylabel(LABELS.get(found["metric"], found["metric"]))
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    return pd.DataFrame({"metric": found["metric"], "value": x, "seed": seeds, "accuracy": y, "fitted": fitted})


def threshold_fit_figure(rows: Sequence[dict], fits: Mapping[str, Mapping], param: str,
                         study: Mapping[str, float] | None = None, title: str = "") -> tuple[Figure, pd.DataFrame]:
    """One panel per fitted metric (:func:`compose_lens.analysis.thresholds.fit_thresholds`
    outputs keyed by metric): every seed's final accuracy against ``param``, the fitted
    logistic, the 50 % and 90 % crossings (solid lines) with their 95 % bootstrap intervals
    (shaded; an interval end beyond the swept range is shaded to the edge), and ``study``'s
    threshold for its metric (dashed red)."""
    fig, axes = subplots(1, len(fits), figsize=(6.2 * len(fits), 5.4), squeeze=False)
    frames = []
    for ax, (metric, found) in zip(axes[0], fits.items()):
        frames.append(_fit_panel(ax, rows, found, (study or {}).get(metric)))
        ax.set_xlabel(param)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig, pd.concat(frames, ignore_index=True)


def onsets_figure(onsets: pd.DataFrame, param: str, title: str = "") -> tuple[Figure, pd.DataFrame]:
    """Each point's phase onset steps (the dynamics rule on its logged pool accuracies) against
    ``param``, one colour per phase, drawn side by side at each value; a phase not reached
    within the run is an ``x`` at the run's last logged step (a lower bound on its onset;
    for a point still training, ``status`` pending, a provisional one)."""
    fig, ax = subplots(figsize=(6.4, 4.2))
    values = onsets["value"].astype(float)
    seeds = sorted(onsets["seed"].unique())
    span = (values.max() - values.min()) or 1.0
    by_seed = onsets["seed"].map({s: (i - (len(seeds) - 1) / 2) * 0.004 * span for i, s in enumerate(seeds)})
    for k, (name, (colour, text)) in enumerate(PHASE_STYLE.items()):
        offset = by_seed + (k - 1) * 0.012 * span  # phases side by side, seeds within a phase
        steps = pd.to_numeric(onsets[f"{name}_onset"], errors="coerce")
        ax.plot(values[steps.notna()] + offset[steps.notna()], steps[steps.notna()], "o", color=colour, ms=5,
                alpha=0.8, label=f"{text} onset")
        never = steps.isna() & onsets["last_logged_step"].notna()
        ax.plot(values[never] + offset[never], onsets["last_logged_step"][never].astype(float), "x", color=colour,
                ms=6, label=f"{text}: not within the run" if never.any() else None)
    ax.set_xlabel(param)
    ax.set_ylabel("training step")
    ax.grid(alpha=0.25)
    ax.legend(fontsize=7, loc="best")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig, onsets


# -- modularity against architecture (experiments/modularity_grid.py) ------------------------------

MODULARITY_MEASURES = (("modularity_separation", "separation (a)"),
                       ("modularity_same_adder", "same adder (b): 1 supported"),
                       ("modularity_circuit_fraction", "circuit / graph edges (c)"))
MODULARITY_CONSTANT_WORDS = {"modularity_separation": "the separation (a)",
                             "modularity_same_adder": "the same-adder test (b; 1: supported)",
                             "modularity_circuit_fraction": "the circuit fraction (c)"}


def modularity_figure(rows: pd.DataFrame, x: str, group: str | None = None, log2: bool = False,
                      separation_min: float | None = None) -> tuple[Figure, pd.DataFrame]:
    """The modularity measures (:mod:`compose_lens.registry.modularity.measures`) of a grid's points against one
    architecture axis ``x`` (``d_model``, ``n_layers``, ``n_heads``), one colour per value of ``group``.

    Each seed is a marker (seeds side by side); the line joins the mean over seeds and its error bar is
    the range over seeds; a point's own 95 % bootstrap interval (``<measure>_low`` / ``_high``, where the
    table has them) is the seed marker's bar. A panel whose every measured value is the same is not drawn:
    the title says the value instead. The legend lists only the markers drawn: an inconclusive point (no
    measure) as an x at 0, a point trained again at the study's learning rate (``remedy`` none) ringed."""
    rows = rows.copy()
    values = {c: pd.to_numeric(rows[c], errors="coerce") if c in rows else pd.Series(np.nan, index=rows.index)
              for c, _ in MODULARITY_MEASURES}
    constant = {c: float(v.dropna().iloc[0]) for c, v in values.items()
                if v.notna().sum() > 1 and v.dropna().nunique() == 1}
    shown = [(c, label) for c, label in MODULARITY_MEASURES if c not in constant]
    fig, panels = subplots(1, max(len(shown), 1), figsize=(REPORT_WIDTH_IN if len(shown) > 2 else 7.5, 3.6),
                           squeeze=False)
    seeds = sorted(rows["seed"].unique()) if "seed" in rows else [0]
    groups = list(dict.fromkeys(rows[group])) if group else [None]
    xs_all = sorted(rows[x].unique())
    drew = {"inconclusive": False, "ringed": False}

    def shifted(v, k: int, n: int):
        step = (k - (n - 1) / 2) * 0.05
        return np.asarray(v, dtype=float) * 2 ** step if log2 else np.asarray(v, dtype=float) + step * 2

    for panel, (column, label) in zip(panels[0], shown):
        for gi, g in enumerate(groups):
            part = rows if g is None else rows[rows[group] == g]
            value = values[column][part.index]
            colour = OKABE_ITO[gi % 8]
            mean = value.groupby(part[x]).mean()
            spread = value.groupby(part[x]).agg(["min", "max"]).loc[mean.index]
            ok = mean.notna()
            panel.errorbar(mean.index[ok], mean[ok], yerr=[mean[ok] - spread["min"][ok], spread["max"][ok] - mean[ok]],
                           color=colour, lw=1.4, capsize=4, label=None if g is None else f"{group} {g}")
            for si, seed in enumerate(seeds):
                sub = part[part["seed"] == seed] if "seed" in part else part
                v = values[column][sub.index]
                have = v.notna().to_numpy()
                at = shifted(sub[x], si + gi * len(seeds), len(seeds) * len(groups))
                low, high = f"{column}_low", f"{column}_high"
                err = None
                if low in sub and high in sub:
                    lo, hi = pd.to_numeric(sub[low], errors="coerce"), pd.to_numeric(sub[high], errors="coerce")
                    err = np.stack([(v - lo).to_numpy(), (hi - v).to_numpy()])[:, have]
                    err = None if not np.isfinite(err).any() else np.nan_to_num(err.clip(0))
                panel.errorbar(at[have], v[have], yerr=err, fmt="os^D"[si % 4], color=colour, ms=5, alpha=0.75,
                               ls="none", capsize=2, lw=0.8)
                if (~have).any():
                    panel.plot(at[~have], np.zeros(int((~have).sum())), "x", color="#666666", ms=7)
                    drew["inconclusive"] = True
                again = have & (sub["remedy"] == "none").to_numpy() if "remedy" in sub else np.zeros(len(sub), bool)
                if again.any():
                    panel.plot(at[again], v[again], "o", ms=12, fillstyle="none", color="black")
                    drew["ringed"] = True
        if column == "modularity_separation" and separation_min is not None:
            panel.axhline(separation_min, color="#666666", lw=0.8, ls="--")
        panel.set_xlabel(x, fontsize=9)
        panel.set_ylabel(label, fontsize=9)
        panel.set_ylim(-0.05, 1.05)
        if log2 and xs_all:  # an axis with no point yet stays linear (a log axis needs a positive value)
            panel.set_xscale("log", base=2)
        panel.set_xticks(xs_all, [str(v) for v in xs_all])
        panel.tick_params(labelsize=8)
        panel.grid(alpha=0.3)
    handles = [Line2D([], [], color="#333333", marker="os^D"[i % 4], ls="none", label=f"seed {s}")
               for i, s in enumerate(seeds)]
    handles.append(Line2D([], [], color="#333333", lw=1.4, label="mean, bar: range over the measured seeds"))
    if any(f"{c}_low" in rows for c, _ in shown):
        handles.append(Line2D([], [], color="#333333", lw=0.8, marker="|", ls="none", ms=10,
                              label="seed's bar: its 95 % bootstrap interval"))
    if separation_min is not None and any(c == "modularity_separation" for c, _ in shown):
        handles.append(Line2D([], [], color="#666666", lw=0.8, ls="--", label=f"separation bar ({separation_min:g})"))
    if drew["inconclusive"]:
        handles.append(Line2D([], [], color="#666666", marker="x", ls="none", label="inconclusive (not measured)"))
    if drew["ringed"]:
        handles.append(Line2D([], [], color="black", marker="o", ms=10, fillstyle="none", ls="none",
                              label="diverged at the proxy's rate, trained at the study's"))
    if group:
        handles += [Line2D([], [], color=OKABE_ITO[i % 8], lw=1.4, label=f"{group} {g}") for i, g in enumerate(groups)]
    title = f"modularity against {x}"
    if constant:
        title += "; " + ", ".join(f"{MODULARITY_CONSTANT_WORDS.get(c, c)} gives {v:g} at every measured point, "
                                  f"so it has no panel" for c, v in constant.items())
    fig.suptitle(textwrap.fill(title, 120), fontsize=9)
    rows_of_legend = -(-len(handles) // 4)
    fig.tight_layout(rect=(0, 0.07 * rows_of_legend + 0.02, 1, 1))
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=8, frameon=False)
    columns = [c for c in rows if c in {x, group, "seed", "remedy"} or c.startswith("modularity_")]
    return fig, rows[columns]
