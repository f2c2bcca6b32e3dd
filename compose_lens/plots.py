"""The study's figures, drawn with matplotlib: drawing only, from numbers.

Each ``*_figure`` function takes numbers (a dynamics table, a matrix, an
attention pattern, an analysis table), never a model, and returns ``(figure,
data)``: the matplotlib figure and the :class:`pandas.DataFrame` it plotted.
:func:`save` writes both, ``NAME.png`` beside ``NAME.csv``, so every figure can be
re-plotted or checked without re-running the analysis; :func:`png_bytes` and
:func:`data_uri` give the figure as an ``<img>`` source for the offline report.
The figures are :class:`matplotlib.figure.Figure` objects made without pyplot, so importing
this module leaves the user's matplotlib backend alone (a notebook's own plots still show)
and saving renders through the Agg canvas whatever the backend; a figure shows inline in
Jupyter as PNG (:class:`StudyFigure`).
Every figure names layers as the whole package does: ``layer 1 (blocks.0)`` is the
paper's layer 1, TransformerLens's ``blocks.0`` (:func:`layer_name`). :func:`save` writes
PNG, SVG or PDF (:data:`FORMATS`). The figures are drawn in one style, the report's by default;
``with plots.style("paper"):`` draws them for a journal (7.0 in wide, 7 to 9 pt, vector files:
:mod:`compose_lens.views.figure_style`, :data:`STYLES`). Scales are chosen for print: one-sided quantities
(attention weights, accuracy drops) use sequential colour maps from 0, two-sided ones
(scores, normalised logit differences) a diverging map centred on 0, and attention
is drawn on a square-root colour scale (:data:`ATTENTION_GAMMA`) so that weights of
0.2, which the circuit's key cells often have, are not washed out.
The numbers of the model figures come from
:mod:`compose_lens.analysis.figure_data` (which runs the model); every matrix is
drawn by the one :func:`heatmap` helper.

Training curves (SPEC section 7):

* :func:`accuracy_by_variable_count_figure`: the nine pools over training, one
  panel per variable count, with the phase onsets marked (:func:`dynamics_figure`: the same
  with the run's outcome in the title, what ``compose-lens dynamics`` writes);
* :func:`progress_measures_figure`: the circuit measures
  (:data:`compose_lens.analysis.summary.MEASURE_KEYS`) over training with the
  phase boundaries;
* :func:`refinement_figure`: the ``=`` query's score per variable key over
  training, and the forbidden-slot accuracies (``b`` as the right operand last).

Attention and QK:

* :func:`qk_heatmaps_figure`: layer 1's (blocks.0) attention from position alone, the softmax of
  its positional scores ``P QK_binder P^T / sqrt(d_head)`` in attention weight (:data:`ATTENTION_LABEL`,
  the unit of :func:`attention_figure` and :func:`early_jump_figure`), the key one back outlined (where
  a previous-token head peaks when the query is a value; on the paper model position alone peaks on
  the diagonal and the tokens make the look back), beside layer 2's (blocks.1) variable identity
  ``(E_var OV_binder) QK_router (E_var OV_binder)^T / sqrt(d_head)`` (the circuits named by role,
  :mod:`compose_lens.analysis.probes`: layer 1's OV, layer 2's QK; diagonal maxima), in attention
  score (:data:`SCORE_LABEL`, as the early-jump figure's); the figures say "layer 1 (blocks.0)",
  never "QK1";
  :func:`positional_qk_figure` and :func:`variable_identity_figure` draw each alone;
* :func:`attention_figure` / :func:`view_figure`: both layers' patterns on one
  sequence, the cells the circuit predicts outlined (``=`` to the operands in
  layer 1, ``=`` to the values in layer 2, each context value to its variable);
* :func:`early_jump_figure`: layer-1 attention and the identity matrix, just
  before and just after the variable-assignment jump.

The MLP, patching and ablation:

* :func:`fourier_neuron_figure`, :func:`frequency_shares_figure`,
  :func:`readout_fourier_figure`, :func:`best_neurons_figure`, :func:`embedding_fourier_figure`:
  the Fourier analysis;
* :func:`cosine_histograms_figure`: one MLP for constants and variables;
* :func:`patching_figure` and :func:`ablation_figure`: the causal tables as heatmaps;
* :func:`sweep_figure`: a sweep's accuracy against its parameter (Figure 3).
* :func:`threshold_fit_figure`: every seed's points, the logistic fit, its 50 % and 90 %
  crossings with 95 % intervals and the study's threshold;
  :func:`onsets_figure`: each point's phase onsets against the swept parameter.
"""

from __future__ import annotations

import base64
import io
import math
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib import colormaps, rc_context
from matplotlib.axes import Axes
from matplotlib.cm import ScalarMappable
from matplotlib.colors import ListedColormap, Normalize, PowerNorm
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

from compose_lens.core import stats
from compose_lens.analysis.figure_data import FourierNeuron
from compose_lens.analysis.probes import positional_attention
from compose_lens.analysis.summary import MEASURE_KEYS, MEASURE_WORDS
from compose_lens.analysis.thresholds import LEVELS, METRICS, LogisticFit, accuracy_of, sweep_xy
from compose_lens.core.files import atomic_path
from compose_lens.views import figure_style
from compose_lens.views.figure_style import current_style, fit, style, style_named

STYLES, FigureStyle = figure_style.STYLES, figure_style.FigureStyle  # plots.STYLES: the one place of the figure style

# phase onsets: Okabe-Ito sky blue, reddish purple and grey (colour-blind safe, and apart from the
# four colours the curves use)
PHASE_STYLE = {"addition": ("#56B4E9", "addition"),
               "assignment": ("#CC79A7", "assignment"),
               "refinement": ("#666666", "refinement")}
MARK_STYLE = {"operand": ("tab:blue", "-", "= to operand"),
              "value": ("tab:orange", "-", "= to value"),
              "previous": ("tab:green", "--", "previous token")}

POOL_GROUPS = {
    "0-var": ("0var_train", "0var_add_restricted"),
    "1-var": ("1var_train", "1var_add_restricted", "1var_var_restricted"),
    "2-var": ("2var_train", "2var_add_restricted", "2var_var_restricted_1", "2var_var_restricted_2"),
}

# shown by progress_measures_figure when a table has none of MEASURE_KEYS
PHASE_CURVES = ("addition_accuracy", "assignment_accuracy", "refinement_accuracy", "equals_score_spread")


# -- writing -------------------------------------------------------------------------------------


FORMATS = ("png", "svg", "pdf")
# colour-blind-safe categorical colours (Okabe and Ito 2008): blue, orange, green, vermillion, purple,
# sky blue, yellow, black
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
REPORT_WIDTH_IN = 11.0  # at 110 dpi 1,210 px: the report's column (1,218 px) shows such a figure unshrunk
ATTENTION_GAMMA = 0.5  # attention colour = weight ** 0.5: 0.2 shows at 45 % of full colour
# the two units of every attention heatmap's colour bar (issue 43: the QK and early-jump figures drew one
# matrix in two units under three labels): a weight after the softmax, a score (logit) before it
ATTENTION_LABEL = "attention weight (square-root colour scale)"
SCORE_LABEL = "attention score q.k / sqrt(d_head) (logit)"


def layer_name(block: int) -> str:
    """The one way figures name a layer: the paper's number and TransformerLens's block.

    >>> layer_name(0)
    'layer 1 (blocks.0)'
    """
    return f"layer {block + 1} (blocks.{block})"


class StudyFigure(Figure):
    """A matplotlib figure made without pyplot (no backend chosen, nothing kept in pyplot's list
    of open figures) that Jupyter shows inline, as PNG, when it is a cell's value.

    It remembers the figure style it was made in (:func:`style`, ``study_style``) and its
    ``tight_layout`` settings (``study_layout``), so that writing it (``savefig``, :func:`save`)
    fits it to that style (:func:`compose_lens.views.figure_style.fit`) however late it is written."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.study_style = current_style()
        self.study_layout: dict | None = None

    def tight_layout(self, **kwargs) -> None:
        self.study_layout = kwargs
        super().tight_layout(**kwargs)

    def savefig(self, *args, **kwargs) -> None:
        fit(self)
        with rc_context(self.study_style.rc):  # the settings read when writing (PDF font type) too
            super().savefig(*args, **kwargs)

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
        return buffer.getvalue()


def subplots(*grid, figsize: tuple[float, float] | None = None, **kwargs):
    """``(figure, axes)`` as ``pyplot.subplots`` gives them, on a :class:`StudyFigure`: pyplot
    is never touched, so no backend is switched or opened."""
    fig = StudyFigure(figsize=figsize)
    return fig, fig.subplots(*grid, **kwargs)


def figure_bytes(fig: Figure, dpi: int = 110, fmt: str = "png") -> bytes:
    """The figure as PNG, SVG or PDF bytes (a figure of pyplot's is closed), fitted to the style it
    was drawn in (:func:`style`; a paper style's own ``dpi`` wins over ``dpi``)."""
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r}: use one of {', '.join(FORMATS)}")
    chosen = style_named(getattr(fig, "study_style", None) or current_style())
    fit(fig, chosen)
    dpi = chosen.dpi or dpi
    buffer = io.BytesIO()
    with rc_context(chosen.rc):  # what is read when writing (margin, PDF font type): a user's figure too
        fig.savefig(buffer, format=fmt, dpi=dpi, bbox_inches="tight")
    if getattr(fig.canvas, "manager", None) is not None:  # made by pyplot (a caller's): release it there
        import matplotlib.pyplot as plt  # already imported by whoever made it

        plt.close(fig)
    return buffer.getvalue()


def png_bytes(fig: Figure, dpi: int = 110) -> bytes:
    """The figure as PNG bytes (the figure is closed)."""
    return figure_bytes(fig, dpi, "png")


def save(fig: Figure, data: pd.DataFrame | None, path: str | Path, dpi: int = 110,
         fmt: str = "png") -> list[Path]:
    """Write ``path`` as ``fmt`` (png, svg or pdf; the suffix follows the format) and ``data``
    beside it as CSV (same stem); close the figure. Each file is written whole or not at all
    (:class:`compose_lens.core.files.atomic_path`)."""
    path = Path(path).with_suffix("." + fmt)
    path.parent.mkdir(parents=True, exist_ok=True)
    image = figure_bytes(fig, dpi, fmt)
    with atomic_path(path) as tmp:
        tmp.write_bytes(image)
    written = [path]
    if data is not None:
        with atomic_path(path.with_suffix(".csv")) as tmp:
            data.to_csv(tmp, index=False)
        written.append(path.with_suffix(".csv"))
    return written


class Renderer:
    """Draws and writes figures, in this process or in one worker process beside it.

    ``renderer.save(figure_function, *numbers, path=..., dpi=..., fmt=...)`` is
    ``save(figure_function(*numbers)[0], None, path, dpi, fmt)``. With ``background=True``
    the call sends the function (by name) and its numbers to a worker process and returns
    at once, so an analysis goes on computing while its figures are drawn: matplotlib's
    layout is pure Python, and ``analyze``'s figures took ~2.5 s of an idle 12 s run.
    The worker draws the same bytes. :meth:`wait` (and leaving a ``with`` block) waits
    for every figure and raises the first failure.

    The worker is spawned, not forked, so it never inherits torch's thread pool; it starts
    when the renderer is made and imports this module while the caller goes on (start the
    renderer before loading a model and the two overlap). Spawning re-imports the caller's
    main script in the worker, which is safe for the ``compose-lens`` command (whose main
    module is guarded) but not for a user's unguarded script: only the command line asks
    for a background renderer; the library's default draws here.
    """

    def __init__(self, background: bool = False):
        self._pool = None
        self._pending: list = []
        if background:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            try:
                self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
                self._pending.append(self._pool.submit(_worker_ready))  # start it now: its imports take ~2 s
            except (OSError, RuntimeError):  # no process can be started here: draw in this one
                self.close()
                self._pending = []

    @property
    def background(self) -> bool:
        """Whether figures are drawn by the worker process."""
        return self._pool is not None

    def save(self, figure, *numbers, path: str | Path, dpi: int = 110, fmt: str = "png") -> None:
        """Draw ``figure(*numbers)`` and write it, in the figure style current here (:func:`style`),
        whichever process draws it."""
        chosen = current_style().name
        if self._pool is None:
            _draw(figure, numbers, path, dpi, fmt, chosen)
        else:
            self._pending.append(self._pool.submit(_draw, figure, numbers, path, dpi, fmt, chosen))

    def wait(self) -> None:
        """Return when every figure sent so far is written; raise the first failure."""
        pending, self._pending = self._pending, []
        for future in pending:
            future.result()

    def close(self) -> None:
        """Stop the worker (figures not yet drawn are dropped)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> "Renderer":
        return self

    def __exit__(self, kind, *_) -> None:
        try:
            if kind is None:
                self.wait()
        finally:
            self.close()


def _worker_ready() -> bool:
    return True


def _draw(figure, numbers: tuple, path: str | Path, dpi: int, fmt: str, style_name: str = "report") -> list[Path]:
    with style(style_name):
        return save(figure(*numbers)[0], None, path, dpi, fmt)


def data_uri(png: bytes) -> str:
    """PNG bytes as a ``data:image/png;base64,...`` URI for an ``<img>`` of an offline page."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


# -- training curves -----------------------------------------------------------------------------


def mark_phases(ax: Axes, phases: Mapping | None, label: bool = True) -> None:
    """Dashed vertical lines at the phase onsets of a ``phases.json`` ``phases`` entry."""
    for name, phase in (phases or {}).items():
        if phase.get("step") is None:
            continue
        color, text = PHASE_STYLE.get(name, ("gray", name))
        ax.axvline(phase["step"], color=color, ls="--", lw=1.2, alpha=0.8,
                   label=f"{text} ({phase['step']})" if label else None)


GAP_FACTOR = 3.0  # a step gap this many times its finer neighbour's is a gap in the sampling, not a stride
DENSE_MIN_CHECKPOINTS = 10  # dense_window: the fewest checkpoints at the finest stride worth enlarging


def sampling_gaps(steps: Sequence[float]) -> np.ndarray:
    """For each pair of neighbouring checkpoints (sorted steps), whether the distance between them is
    a gap in the sampling: more than :data:`GAP_FACTOR` times the finer of the distances beside it
    (the local stride). Steps 5,901, 6,001 then 7,001: the 1,000 after a stride of 100 is a gap, so a
    curve does not draw a straight line over a stretch where nothing was measured.

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
    """The longest stretch of checkpoints at the run's finest stride (the study's 2,501 to 6,001 every
    100 steps), when it holds at least :data:`DENSE_MIN_CHECKPOINTS` checkpoints and less than half
    the run: on a linear step axis it is a few pixels wide. None for an evenly sampled run."""
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
    """A curve over training checkpoints: markers at every checkpoint, a line only within a stride, and
    a thin dotted line of the same colour over each gap in the sampling (:func:`sampling_gaps`)."""
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
    """Pool accuracies over training, one panel per variable count (0, 1, 2), each pool in its own
    Okabe-Ito colour and marker, the phase onsets dashed (legend under the panels).

    Where the checkpoints are dense in a short stretch (:func:`dense_window`: the study's 2.5k-6k
    window, every 100 steps), a second row of panels enlarges it on its own linear step axis (shaded
    in the first row), so the addition and assignment jumps are not squeezed into a few pixels.
    Lines break over gaps in the sampling (:func:`plot_over_steps`).

    ``outcome``: the run's outcome (``phases.json``'s ``outcome``: generalised, stalled or
    learning, and why), written in the title; a stalled run's title is set in vermillion."""
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
    onsets = [Line2D([], [], color=c, ls="--", label=f"{t} onset ({phases[name]['step']})")
              for name, (c, t) in PHASE_STYLE.items() if (phases or {}).get(name, {}).get("step") is not None]
    handles = onsets + ([Line2D([], [], color="black", ls=":", lw=0.8, label="gap in the checkpoints")]
                        if sampling_gaps(np.sort(table["step"].to_numpy())).any() else [])
    title = "Accuracy of the nine pools over training"
    colour = "black"
    if outcome:
        title += f": {outcome['outcome']}" + (f" ({outcome['why']})" if outcome.get("why") else "")
        colour = OKABE_ITO[3] if outcome["outcome"] == "stalled" else "black"
    fig.suptitle(textwrap.fill(title, 110), fontsize=10, color=colour)
    fig.tight_layout(rect=(0, (0.3 / height) if handles else 0, 1, 1))
    if handles:
        fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=8, frameon=False)
    return fig, table[columns].copy()


def dynamics_figure(table: pd.DataFrame, document: Mapping) -> tuple[Figure, pd.DataFrame]:
    """The figure ``compose-lens dynamics`` writes: :func:`accuracy_by_variable_count_figure` of a
    dynamics table with its ``phases.json`` (phase onsets, and the outcome in the title)."""
    return accuracy_by_variable_count_figure(table, document.get("phases"), document.get("outcome"))


def progress_measures_figure(table: pd.DataFrame, phases: Mapping | None = None,
                             measures: Sequence[str] | None = None) -> tuple[Figure, pd.DataFrame]:
    """One small panel per progress measure over training, phase boundaries marked.

    Uses the circuit measures present in ``table`` (:data:`MEASURE_KEYS`, in that
    order); without them, the phase curves and the ``=`` score spread. Each panel is titled in
    words (:data:`compose_lens.analysis.summary.MEASURE_WORDS`; the restricted and excluded losses
    say what is kept or removed), has its own step axis and a y label naming the kind of number
    (:func:`_measure_unit`); a count (the number of key frequencies) is drawn in another colour
    with whole-number ticks, so it is not read as a fraction.
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
    """Left: the ``=`` query's score in layer 1 (blocks.0) for each variable key over training, each
    variable with a forbidden operand slot in its own Okabe-Ito colour and the others as one grey
    bundle (they move together). Right: the accuracy with a variable in a slot it never had in
    training, in its variable's colour, solid for 1-var and dotted for 2-var sequences, with the two
    var-restricted pools in black (dashed, dash-dotted). One legend under both panels, grouped: a
    colour per variable, then what each line style means (issue 43: eleven entries shared colours).
    Phase onsets dashed in both panels."""
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
    handles += [Line2D([], [], color=c, ls="--", lw=1.2, label=f"{t} onset ({phases[name]['step']})")
                for name, (c, t) in PHASE_STYLE.items() if (phases or {}).get(name, {}).get("step") is not None]
    rows = -(-len(handles) // 3)
    fig.tight_layout(rect=(0, 0.045 * rows + 0.02, 1, 1))
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=8, frameon=False)
    cols = ["step", *score_cols, *slot_cols] + [c for c in ("equals_score_spread",) if c in table]
    return fig, table[cols].copy()


# -- matrices and attention -----------------------------------------------------------------------


def heatmap(ax: Axes, matrix: np.ndarray, xlabels: Sequence, ylabels: Sequence, title: str,
            cmap: str = "RdBu_r", centre: bool = True, mask_upper: bool = False, fontsize: float = 7,
            rotation: float = 90, aspect: str | None = None, colorbar_label: str | None = None,
            vmax: float | None = None, gamma: float | None = None, annotate: bool = False,
            bar_range: tuple[float, float] | None = None) -> None:
    """Draw ``matrix`` on ``ax``: the one heatmap of every figure.

    ``centre``: a diverging scale symmetric about 0 (else sequential from 0 up to ``vmax``);
    ``bar_range``: the part of a diverging scale the colour bar shows (data from 0 to 1 with a few small
    negatives: the bar runs from the least value to 1, not from -1, with 0 still white);
    ``gamma``: a power-law colour scale (sequential only; 0.5 = square root);
    ``mask_upper``: blank the cells above the diagonal (a causal attention pattern);
    ``annotate``: write each cell's value in it (small tables), at ``fontsize``.
    """
    m = np.asarray(matrix, dtype=float).copy()
    if mask_upper:
        m[np.triu(np.ones_like(m, dtype=bool), 1)] = np.nan
    finite = m[np.isfinite(m)]
    if centre:
        lim = vmax or (np.abs(finite).max() if finite.size else 0) or 1.0
        im = ax.imshow(m, cmap=cmap, vmin=-lim, vmax=lim, aspect=aspect)
    else:
        top = vmax or (finite.max() if finite.size else 0) or 1.0
        norm = PowerNorm(gamma, vmin=0, vmax=top) if gamma else Normalize(vmin=0, vmax=top)
        im = ax.imshow(m, cmap=cmap, norm=norm, aspect=aspect)
    ha = "right" if 0 < rotation < 90 else "center"
    ax.set_xticks(range(len(xlabels)), [str(x) for x in xlabels], fontsize=fontsize, rotation=rotation,
                  ha=ha, rotation_mode="anchor" if ha == "right" else "default")
    ax.set_yticks(range(len(ylabels)), [str(y) for y in ylabels], fontsize=fontsize)
    ax.set_title(title, fontsize=10)
    if annotate:
        _annotate(ax, m, im, fontsize)
    bar = ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    if colorbar_label:
        bar.set_label(colorbar_label)
    if bar_range is not None:
        bar.ax.set_ylim(*bar_range)


def _annotate(ax: Axes, m: np.ndarray, im, fontsize: float = 6.5) -> None:
    """Each finite cell's value, in black or white by the cell's brightness."""
    for (i, j), v in np.ndenumerate(m):
        if np.isfinite(v):
            r, g, b, _ = im.cmap(im.norm(v))
            text = "0.00" if round(v, 2) == 0 else f"{v:.2f}"  # never -0.00
            ax.text(j, i, text, ha="center", va="center", fontsize=fontsize,
                    color="white" if 0.3 * r + 0.6 * g + 0.1 * b < 0.5 else "black")


def _matrix_frame(matrix: np.ndarray, rows: Sequence, cols: Sequence, name: str) -> pd.DataFrame:
    frame = pd.DataFrame(np.asarray(matrix), index=list(rows), columns=list(cols))
    frame.index.name = name
    return frame.reset_index()


def _positional_panel(ax: Axes, positional: np.ndarray, fontsize: float, block: int = 0) -> pd.DataFrame:
    """The binder's attention from position alone (:func:`~compose_lens.analysis.probes.positional_attention`
    of the positional scores) on ``ax``, in the unit and colours of an attention pattern, with the cells
    where the study's previous-token head peaks outlined: for a query holding a value, the key one back,
    its variable's. Any position after the first can hold a value (the padding is scattered, SPEC
    section 3), so every row has one. The data: both matrices, one row per query."""
    scores = np.asarray(positional, dtype=float)
    n = len(scores)
    weights = positional_attention(scores).numpy()
    heatmap(ax, weights, range(n), range(n), f"{layer_name(block)}: attention from position alone",
            cmap="Blues", centre=False, mask_upper=True, vmax=1.0, gamma=ATTENTION_GAMMA,
            colorbar_label=ATTENTION_LABEL, fontsize=fontsize, rotation=0)
    colour, ls, _ = MARK_STYLE["previous"]
    for i in range(1, n):
        ax.add_patch(Rectangle((i - 1.5, i - 0.5), 1, 1, fill=False, ec=colour, ls=ls, lw=2,
                               label=None if i > 1 else "previous token: where the head peaks when the query is "
                                                        "a value (its variable)"))
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
    if n > 1:  # below the axes: covers no cell
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), frameon=False)
    index = [f"pos{i}" for i in range(n)]
    return pd.concat([_matrix_frame(scores, index, index, "query_position").assign(matrix="score"),
                      _matrix_frame(weights, index, index, "query_position").assign(matrix="attention_from_position")])


def qk_heatmaps_figure(positional: np.ndarray, identity: np.ndarray, variables: Sequence[str],
                       title: str = "") -> tuple[Figure, pd.DataFrame]:
    """The binder's (layer 1's) attention from position alone beside the router's (layer 2's) variable identity.

    Left: :func:`positional_qk_figure`'s panel, the softmax over the allowed keys of the positional
    scores ``P QK_binder P^T / sqrt(d_head)`` (``positional``: those scores, query position row, key
    position column), in attention weight; right: layer 2's score for a query ``=`` carrying one variable
    against a key value tagged (through layer 1's OV) with another,
    ``(E_var OV_binder) QK_router (E_var OV_binder)^T / sqrt(d_head)`` (layer 1's OV, layer 2's QK),
    in :data:`SCORE_LABEL`. The panels' titles say this in words; the matrix products are in this docstring."""
    fig, (a, b) = subplots(1, 2, figsize=(REPORT_WIDTH_IN, 5.4))
    left = _positional_panel(a, positional, fontsize=8)
    heatmap(b, identity, variables, variables, f"{layer_name(1)}: variable identity,\n= carrying a variable against "
            f"the value tagged with one", colorbar_label=SCORE_LABEL, fontsize=8, rotation=0)
    for i in range(len(variables)):
        b.add_patch(Rectangle((i - 0.5, i - 0.5), 1, 1, fill=False, ec="black", lw=1))
    b.set_xlabel("key: value tagged with variable")
    b.set_ylabel("query: = carrying variable")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    left["matrix"] = "layer1_positional_" + left["matrix"]
    data = pd.concat([left.rename(columns={"query_position": "layer1_positional_query"}),
                      _matrix_frame(identity, list(variables), list(variables),
                                    "layer2_identity_query").assign(matrix="layer2_variable_identity")])
    return fig, data


def positional_qk_figure(positional: np.ndarray, block: int = 0) -> tuple[Figure, pd.DataFrame]:
    """The binder's (paper: layer 1's, blocks.0) attention from position alone over the context positions.

    ``positional``: the positional scores ``P QK_binder P^T / sqrt(d_head)``
    (:func:`~compose_lens.analysis.probes.positional_qk_scores`, query position row, key position
    column). Drawn is their softmax over the keys each query may attend to, in attention weight on the
    colour scale of every attention pattern (:data:`ATTENTION_LABEL`; issue 43: the scores were drawn
    as logits while the early-jump figure draws layer 1 in attention weight), the cells above the
    diagonal blank. Outlined, and named in the legend: the key one back, where the previous-token head
    peaks when the query holds a value. On the paper model position alone puts most rows' peak on the
    diagonal, not there: the look back comes from the tokens (issue 43 saw the outlines off the peak
    with nothing saying why; the report's caption counts the rows).
    The data: the scores and the weights (column ``matrix``), one row per query position. ``block``:
    the binder's (the title's layer).
    """
    fig, ax = subplots(figsize=(5, 4.8))
    data = _positional_panel(ax, positional, fontsize=10, block=block)
    fig.tight_layout()
    return fig, data


def _square_figure(matrix: np.ndarray, labels: Sequence, title: str, xlabel: str, ylabel: str) -> Figure:
    fig, ax = subplots(figsize=(5, 4.2))
    heatmap(ax, matrix, labels, labels, title, fontsize=10, rotation=0, colorbar_label=SCORE_LABEL)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    fig.tight_layout()
    return fig


def variable_identity_figure(identity: np.ndarray, variables: Sequence[str]) -> tuple[Figure, pd.DataFrame]:
    """Layer 2's (blocks.1) variable identity ``(E_var OV_binder) QK_router (E_var OV_binder)^T / sqrt(d_head)``
    (layer 1's OV, layer 2's QK), in :data:`SCORE_LABEL`: a query variable's score for each key variable,
    titled in words."""
    fig = _square_figure(identity, list(variables), f"{layer_name(1)}: variable identity,\n= carrying a variable "
                         f"against the value tagged with one", "key: value tagged with variable",
                         "query: = carrying variable")
    return fig, _matrix_frame(identity, variables, variables, "query_variable")


def attention_figure(patterns: np.ndarray, tokens: Sequence[str], marks: Mapping[int, Sequence] | None = None,
                     title: str = "", layer_names: Sequence[str] | None = None) -> tuple[Figure, pd.DataFrame]:
    """Attention patterns (layers, n, n) of one sequence, with marked cells.

    ``marks[layer]`` is a list of ``(query_position, key_position, kind)`` with kind
    ``operand``, ``value`` or ``previous`` (see :data:`MARK_STYLE`).
    """
    patterns = np.asarray(patterns, dtype=float)
    n_layers = patterns.shape[0]
    names = list(layer_names or [layer_name(i) for i in range(n_layers)])
    labels = [f"{i}:{t}" for i, t in enumerate(tokens)]
    fig, axes = subplots(1, n_layers, figsize=(min(REPORT_WIDTH_IN, 5.5 * n_layers), 5.8), squeeze=False)
    seen = set()
    for layer, ax in enumerate(axes[0]):
        heatmap(ax, patterns[layer], labels, labels, names[layer], cmap="Blues", centre=False, mask_upper=True,
                vmax=1.0, gamma=ATTENTION_GAMMA, colorbar_label=ATTENTION_LABEL,
                fontsize=8)
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
        frame = _matrix_frame(patterns[layer], labels, labels, "query")
        frames.append(frame.assign(layer=layer + 1, block=layer))
    return fig, pd.concat(frames)


def view_figure(view: Mapping) -> tuple[Figure, pd.DataFrame]:
    """:func:`attention_figure` of one :func:`compose_lens.analysis.attention.sequence_views` entry (head 0)."""
    verdict = "correct" if view["correct"] else "wrong"
    return attention_figure(view["patterns"][:, 0].numpy(), view["words"], view["marks"],
                            title=f"{view['text']}  ->  {view['answer']} ({verdict}, label {view['label']})")


def early_jump_figure(before: Mapping, after: Mapping, variables: Sequence[str]) -> tuple[Figure, pd.DataFrame]:
    """Layer-1 attention on one sequence and the layer-2 identity matrix, before vs after a jump.

    ``before`` / ``after``: ``{"step", "pattern0" (n, n), "tokens", "identity" (V, V), "accuracy"}``.
    """
    fig, axes = subplots(2, 2, figsize=(REPORT_WIDTH_IN, 10))
    frames = []
    # one colour scale for both identity panels: "after" is read against "before"
    shared = max(float(np.nanmax(np.abs(np.asarray(s["identity"], dtype=float)))) for s in (before, after)) or 1.0
    for col, state in enumerate((before, after)):
        labels = [f"{i}:{t}" for i, t in enumerate(state["tokens"])]
        acc = f"\nassignment accuracy {state['accuracy']:.2f}" if state.get("accuracy") is not None else ""
        heatmap(axes[0, col], state["pattern0"], labels, labels,
                f"step {state['step']}: {layer_name(0)} attention{acc}", cmap="Blues", centre=False,
                mask_upper=True, vmax=1.0, gamma=ATTENTION_GAMMA, colorbar_label=ATTENTION_LABEL,
                fontsize=8)
        heatmap(axes[1, col], state["identity"], variables, variables,
                f"step {state['step']}: {layer_name(1)} variable identity", colorbar_label=SCORE_LABEL,
                vmax=shared, fontsize=8, rotation=0)
        axes[0, col].set_xlabel("key (source) position:token")
        axes[0, col].set_ylabel("query (destination) position:token")
        axes[1, col].set_xlabel("key variable (value tagged by layer 1)")
        axes[1, col].set_ylabel("query variable (at =)")
        frames.append(_matrix_frame(state["pattern0"], labels, labels, "query").assign(
            step=state["step"], matrix="layer1_attention"))
        frames.append(_matrix_frame(state["identity"], variables, variables, "query").assign(
            step=state["step"], matrix="layer2_variable_identity"))
    fig.suptitle("The early generalisation jump: before and after")
    fig.tight_layout()
    return fig, pd.concat(frames)


# -- same MLP and Fourier -------------------------------------------------------------------------


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


def fourier_neuron_figure(chosen: FourierNeuron) -> tuple[Figure, pd.DataFrame]:
    """A neuron's activation over the p x p operand grid beside its ideal pattern
    (:func:`compose_lens.analysis.figure_data.fourier_neuron`), both on one colour range, so a colour means
    the same activation in both panels."""
    k = chosen.frequency
    titles = (f"MLP{chosen.block + 1} neuron {chosen.neuron} over (x, y): {chosen.fraction_explained:.0%} of its "
              f"variance at k = {k}",
              f"ideal: ReLU of the k = {k} part of its pre-activation (correlation {chosen.correlation:.3f})")
    fig, axes = subplots(1, 2, figsize=(11, 4.8))
    grids = [np.asarray(grid, dtype=float) for grid in (chosen.pattern, chosen.ideal)]
    low, high = min(float(g.min()) for g in grids), max(float(g.max()) for g in grids)  # one range: comparable colours
    for ax, grid, name in zip(axes, grids, titles):
        im = ax.imshow(grid, cmap="viridis", origin="lower", vmin=low, vmax=high)
        ax.set_xlabel("y (right operand value)")
        ax.set_ylabel("x (left operand value)")
        ax.set_title(name, fontsize=10)
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04).set_label("activation (ReLU output)")
    fig.tight_layout()
    p = np.asarray(chosen.pattern).shape[0]
    xs, ys = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    data = pd.DataFrame({"x": xs.ravel(), "y": ys.ravel(),
                         "neuron": np.asarray(chosen.pattern, dtype=float).ravel(),
                         "ideal": np.asarray(chosen.ideal, dtype=float).ravel()})
    return fig, data.assign(neuron=chosen.neuron, frequency=k, key_frequencies=" ".join(map(str, chosen.keys)))


EMBEDDING_KEY_COLOUR, EMBEDDING_OTHER_COLOUR = "#0072B2", "#BBBBBB"  # Okabe-Ito blue, light grey
CROSS_COLOUR = "#666666"  # the cross-frequency remainder of a share figure
FREQUENCY_AXIS = "frequency k (cycles over the p numbers)"


def _key_bars(ax: Axes, frequencies: Sequence[int], values: Sequence[float], keys: Sequence[int]) -> list:
    """The one palette of the Fourier bar figures: the MLP's key frequencies Okabe-Ito blue and hatched
    (readable without colour), the others light grey; returns the legend's handles."""
    is_key = [int(k) in set(int(x) for x in keys) for k in frequencies]
    bars = ax.bar(frequencies, values, width=0.8, edgecolor="black", linewidth=0.4,
                  color=[EMBEDDING_KEY_COLOUR if k else EMBEDDING_OTHER_COLOUR for k in is_key])
    for bar, k in zip(bars, is_key):
        if k:
            bar.set_hatch("//")
    handles = [Rectangle((0, 0), 1, 1, facecolor=EMBEDDING_KEY_COLOUR, hatch="//", edgecolor="black", lw=0.4,
                         label="MLP key frequency"),
               Rectangle((0, 0), 1, 1, facecolor=EMBEDDING_OTHER_COLOUR, edgecolor="black", lw=0.4, label="other")]
    return handles if any(is_key) else handles[1:]


def _frequency_bars(values: Sequence[float], frequencies: Sequence[int], keys: Sequence[int], ylabel: str,
                    title: str, column: str, remainder: float | None = None) -> tuple[Figure, pd.DataFrame]:
    """Bars per frequency in :func:`_key_bars`'s palette; ``remainder``: a last bar, apart, for what no
    single frequency holds (the cross terms ``cos kx cos k'y``, k != k'), so shares sum to 1."""
    fig, ax = subplots(figsize=(7, 3))
    handles = _key_bars(ax, frequencies, values, keys)
    data = pd.DataFrame({"frequency": list(frequencies), column: list(values),
                         "key": [k in keys for k in frequencies]})
    if remainder is not None:
        at = max(frequencies) + 2.5
        ax.bar([at], [remainder], width=1.6, color=CROSS_COLOUR, edgecolor="black", linewidth=0.4, hatch="..")
        ax.annotate(f"{remainder:.2f}", (at, remainder), ha="center", va="bottom", fontsize=8,
                    xytext=(0, 2), textcoords="offset points")
        handles.append(Rectangle((0, 0), 1, 1, facecolor=CROSS_COLOUR, hatch="..", edgecolor="black", lw=0.4,
                                 label="cross terms (k ≠ k′): no one frequency"))
        ticks = [k for k in ax.get_xticks() if 0 <= k <= max(frequencies)]
        ax.set_xticks([*ticks, at], [f"{k:g}" for k in ticks] + ["cross"])
        data = pd.concat([data.assign(cross_terms=False), pd.DataFrame(
            {"frequency": [-1], column: [remainder], "key": [False], "cross_terms": [True]})], ignore_index=True)
    ax.legend(handles=handles, fontsize=8, frameon=False, loc="upper right", ncol=len(handles))
    ax.set_ylim(0, max([*values, remainder or 0]) * 1.3 or 1)
    ax.set_xlabel(FREQUENCY_AXIS, fontsize=9)
    ax.set_ylabel(ylabel, fontsize=9)
    ax.tick_params(labelsize=8)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig, data


def frequency_shares_figure(shares: Sequence[float], keys: Sequence[int]) -> tuple[Figure, pd.DataFrame]:
    """Bars: the share of the MLP2 post-ReLU variance at each frequency
    (:func:`compose_lens.analysis.figure_data.frequency_variance_shares`, fractions of the non-constant
    variance), key frequencies blue and hatched, and the rest, the cross terms that belong to no one
    frequency, as a last bar: the bars sum to 1 (issue 43: they summed to ~0.88, the rest not shown)."""
    shares = [float(v) for v in shares]
    remainder = max(0.0, 1.0 - sum(shares))
    in_keys = sum(shares[k] for k in keys if k < len(shares))
    return _frequency_bars(shares, list(range(len(shares))), keys, "share of MLP2's\npost-ReLU variance",
                           f"MLP2 post-ReLU variance by frequency: {in_keys:.0%} in the MLP key frequencies",
                           "variance_share", remainder)


def readout_fourier_figure(norms: pd.Series, keys: Sequence[int]) -> tuple[Figure, pd.DataFrame]:
    """Bars: the norm of ``W_out W_U`` per frequency (:func:`compose_lens.analysis.fourier.unembed_frequency_norms`)."""
    return _frequency_bars(list(norms.values), list(norms.index), keys, "norm of W_out W_U",
                           "the MLP's readout W_out W_U by frequency", "norm")


def embedding_fourier_figure(table: pd.DataFrame, summary: Mapping) -> tuple[Figure, pd.DataFrame]:
    """Bars: the number embeddings' share of (non-constant) squared norm per frequency
    (:func:`compose_lens.analysis.fourier.embedding_fourier`), in :func:`_key_bars`'s palette, the
    uniform share dashed."""
    keys = summary.get("key_frequencies") or []
    fig, ax = subplots(figsize=(7, 3))
    handles = _key_bars(ax, list(table["frequency"]), list(table["share"]), keys)
    ax.axhline(summary["uniform_share"], color="black", ls="--", lw=0.8)
    handles.append(Line2D([], [], color="black", ls="--", lw=0.8, label="uniform share"))
    ax.legend(handles=handles, fontsize=8, frameon=False, loc="upper right", ncol=3)
    ax.set_xlim(0.3, len(table) + 0.7)
    ax.set_ylim(0, max(float(table["share"].max()), summary["uniform_share"]) * 1.3)
    ax.set_xlabel(FREQUENCY_AXIS, fontsize=9)
    ax.set_ylabel("share of centred\nW_E norm²", fontsize=9)
    ax.tick_params(labelsize=8)
    title = "number embeddings W_E by frequency"
    if summary.get("key_share") is not None:
        title += f": {summary['key_share']:.0%} in the MLP key frequencies"
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig, table.copy()


def best_neurons_figure(neurons: Sequence[Mapping], columns: int = 3) -> tuple[Figure, pd.DataFrame]:
    """Each key frequency's best neuron: its (p, p) pattern beside its ideal neuron, the ReLU of the
    frequency-k part of its pre-activation (:func:`compose_lens.analysis.figure_data.best_neuron_patterns`).

    A compact grid, ``columns`` neurons (pattern and ideal side by side) to a row. Each panel is
    divided by its neuron's largest activation, so one colour bar (0 to 1, viridis) serves every
    panel; the maxima are in the data (``max_activation``)."""
    n = len(neurons)
    columns = max(1, min(columns, n))
    rows = max(1, -(-n // columns))
    fig, axes = subplots(rows, 2 * columns, figsize=(REPORT_WIDTH_IN, 1.95 * rows + 0.9), squeeze=False)
    frames, image = [], None
    for i, n_ in enumerate(neurons):
        row, col = divmod(i, columns)
        top = float(np.max(n_["pattern"])) or 1.0
        for j, (grid, title) in enumerate(((n_["pattern"], f"neuron {n_['neuron']}, k = {n_['frequency']}\n"
                                                           f"{n_['fraction_explained']:.0%} of its variance"),
                                           (n_["ideal"], f"its ideal, k = {n_['frequency']}\n"
                                                         f"r = {n_['ideal_correlation']:.3f}"))):
            ax = axes[row, 2 * col + j]
            image = ax.imshow(np.asarray(grid, dtype=float) / top, cmap="viridis", origin="lower", vmin=0, vmax=1)
            ax.set_title(title, fontsize=8, pad=3)
            p = np.asarray(grid).shape[0]
            ax.set_xticks([0, p - 1])
            ax.set_yticks([0, p - 1])
            ax.tick_params(labelsize=8, length=2, pad=1)
        p = np.asarray(n_["pattern"]).shape[0]
        xs, ys = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
        frames.append(pd.DataFrame({"neuron": n_["neuron"], "frequency": n_["frequency"], "x": xs.ravel(),
                                    "y": ys.ravel(), "activation": np.asarray(n_["pattern"], dtype=float).ravel(),
                                    "ideal": np.asarray(n_["ideal"], dtype=float).ravel(),
                                    "ideal_correlation": n_["ideal_correlation"], "max_activation": top}))
    for ax in list(axes.flat)[2 * n:]:
        ax.axis("off")
    fig.suptitle("MLP2: the best neuron of each key frequency beside its ideal "
                 "(x: right operand y, up: left operand x)", fontsize=9)
    fig.tight_layout(rect=(0, 0, 0.93, 1), h_pad=0.6, w_pad=0.3)
    if image is not None:
        bar = fig.colorbar(image, cax=fig.add_axes((0.945, 0.2, 0.012, 0.6)))
        bar.set_label("activation / the neuron's maximum", fontsize=8)
        bar.ax.tick_params(labelsize=8)
    return fig, pd.concat(frames) if frames else pd.DataFrame()


# -- patching and ablation ------------------------------------------------------------------------


PATCH_SCALE = "normalised logit difference (0: corrupted, 1: clean)"
# what each patching metric of compose_lens.analysis.metrics measures, as a scale names it
METRIC_WORDS = {"logit_diff": "logit difference", "prob": "probability of the clean answer",
                "accuracy": "accuracy"}


def metric_words(metric: str) -> str:
    """How a scale names a patching metric: ``logit difference``, ``probability of the clean
    answer``, ``accuracy``, or a user's own metric by its name."""
    return METRIC_WORDS.get(metric, f"metric {metric}")


def patch_scale(metric: str = "logit_diff") -> str:
    """The patching colour bar's label for ``metric`` (:data:`PATCH_SCALE` for the default)."""
    return f"normalised {metric_words(metric)} (0: corrupted, 1: clean)"


def table_metric(table: pd.DataFrame) -> str:
    """The metric a patching table was made with, read from its ``clean_<metric>`` column
    (:func:`compose_lens.analysis.metrics.column_names`)."""
    names = [c[len("clean_"):] for c in table.columns if c.startswith("clean_")]
    return names[0] if names else "logit_diff"


def patching_figure(table: pd.DataFrame, title: str) -> tuple[Figure, pd.DataFrame]:
    """Normalised logit difference per site (rows) and token role or position (columns) of
    :func:`compose_lens.analysis.patching.patching_table`; returns the table with its ``site`` labels.

    Rows below 1e-4 everywhere (an absent MLP, such as layer 1's: zero up to float rounding)
    are left out; rows follow the forward pass, layer by layer.
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
    ax.set_ylabel("patched activation", labelpad=PATCHING_LABEL_PAD)  # clear of the long site names
    fig.tight_layout()
    return fig, table


PATCHING_LABEL_PAD = 10  # points between the patching figure's y-label and its site names (matplotlib's 4 touched)


# a block's order (a head's query, key, value and pattern before its output)
_FLOW = ("resid_pre", "q", "k", "v", "pattern", "z", "attn_out", "resid_mid", "mlp_out", "resid_post")
# the roles of analysis.patching.ROLES and VARIANT_ROLES, context first (plots does not import the
# analysis that runs models)
_ROLE_ORDER = ("queried var", "queried value", "distractor var", "distractor value", "PAD",
               "stale value", "filler", "chain var", "+", "left operand", "right operand", "=")


def path_patching_figure(table: pd.DataFrame, title: str) -> tuple[Figure, pd.DataFrame]:
    """One bar per path of :func:`compose_lens.analysis.patching.path_patching` (the sender's
    whole effect, receiver ``all``, last and grey), with its 95 % interval and value; 0 and 1
    (the corrupted and the clean run) dotted."""
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


def ablation_figure(table: pd.DataFrame, n: int) -> tuple[Figure, pd.DataFrame]:
    """Accuracy lost per pool (columns) for each ablated component (rows) of
    :func:`compose_lens.analysis.ablation.ablation_table` (single neurons left out), each pool ``n``
    sequences; returns the rows drawn.

    A drop counts only beyond its own noise: its 95 % interval (:func:`compose_lens.core.stats.difference_bounds`,
    the ablated and the baseline accuracy of ``n`` sequences each) excludes 0. A component none of whose
    drops does is left out (on the paper model most frequency ablations change nothing), and the title
    counts them; if none passes, every row is drawn. A drawn cell whose drop is within its noise is hatched.
    The drop is one-sided (an ablation rarely helps), so the colour scale is sequential from 0 to 1; a
    negative drop shows as white, its value printed in the cell.
    """
    shown = table[~table["target"].isin(["neuron", "none"])]
    rows = ["target", "block", "index", "kind"]
    low, high = stats.difference_bounds(shown["baseline_accuracy"], shown["accuracy"], n)
    shown = shown.assign(drop_low=low, drop_high=high, beyond_noise=(low > 0) | (high < 0))
    beyond = shown.groupby(rows, observed=True)["beyond_noise"].transform("any")
    n_all = len(shown.drop_duplicates(rows))
    if beyond.any():
        shown = shown[beyond]
    n_left_out = n_all - len(shown.drop_duplicates(rows))
    names = []
    for target, block, index, kind in zip(shown["target"], shown["block"], shown["index"], shown["kind"]):
        what = {"head": f"head {index}", "mlp": "MLP", "frequency_neurons": f"k = {index} neurons",
                "fourier_directions": f"k = {index} directions"}.get(target, f"{target} {index}")
        names.append(f"{what} · {layer_name(block)} · {kind}")
    shown = shown.assign(name=names)
    grid = shown.pivot_table(index="name", columns="pool", values="accuracy_drop", sort=False, observed=True)
    noise = shown.pivot_table(index="name", columns="pool", values="beyond_noise", sort=False, observed=True,
                              aggfunc="any").reindex(index=grid.index, columns=grid.columns)
    labels = [str(c).replace("_", " ") for c in grid.columns]
    fig, ax = subplots(figsize=(min(REPORT_WIDTH_IN, max(8, 0.75 * len(labels) + 5)),
                                    max(3.5, 0.36 * len(grid.index) + 2.2)))
    title = f"ablation: accuracy lost per pool ({n} sequences each)"
    if n_left_out:
        title += f"\n({n_left_out} of {n_all} ablations left out: no drop beyond its 95 % interval)"
    heatmap(ax, grid.to_numpy(), labels, list(grid.index), title, cmap="Reds",
            centre=False, vmax=1.0, aspect="auto", fontsize=8, rotation=40,
            colorbar_label="accuracy drop (fraction of the pool)", annotate=len(grid.index) <= 40)
    for (i, j), inside in np.ndenumerate(~noise.fillna(True).to_numpy(dtype=bool)):
        if inside:  # within the drop's own noise: hatched, its value still printed
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="////", edgecolor="#999999",
                                   linewidth=0))
    ax.set_xlabel("pool of sequences (hatched: a drop within its 95 % interval of 0)")
    ax.set_ylabel("ablated component · layer · ablation")
    fig.tight_layout()
    return fig, shown


# -- sweeps --------------------------------------------------------------------------------------


def sweep_figure(rows: Sequence[dict], title: str = "") -> tuple[Figure, pd.DataFrame]:
    """Figure-3 style: each metric against the parameter, one thin line per seed, the mean bold.

    ``rows`` are a sweep's ``results.csv`` rows, with numeric values.
    """
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


GRADIENT_TITLES = {"qk0": "layer 1 (blocks.0) QK: binding, value -> its variable",
                   "ov0": "layer 1 (blocks.0) OV: the variable moved to its value",
                   "qk1": "layer 2 (blocks.1) QK: routing, = -> the operands' values"}


def gradient_shares_figure(shares: pd.DataFrame, by: str | None = None, title: str = ""
                           ) -> tuple[Figure, pd.DataFrame]:
    """The theory's kept (associative-memory) term of the gradient over training: its cosine with
    the full gradient (:mod:`compose_lens.analysis.gradient_terms`), one panel per product
    (``qk0``, ``ov0``, ``qk1``), one colour per value of the column ``by`` (all one line where
    ``by`` is None): the mean over its seeds bold, each seed faint where there is a ``seed`` column.
    A cosine near 1 is the claim holding."""
    kept = shares[shares["term"] == "kept"]
    groups = list(dict.fromkeys(kept[by])) if by else [None]
    fig, axes = subplots(1, 3, figsize=(REPORT_WIDTH_IN, 3.6), sharey=True)
    for ax, matrix in zip(axes, GRADIENT_TITLES):
        for k, group in enumerate(groups):
            part = kept[(kept["matrix"] == matrix) & ((kept[by] == group) if by else True)]
            seeds = part.groupby("seed") if "seed" in part else []
            for _, seed in seeds:
                ax.plot(seed["step"], seed["cosine"], color=OKABE_ITO[k % 8], alpha=0.3, lw=0.8)
            mean = part.groupby("step")["cosine"].mean()
            n = part["seed"].nunique() if "seed" in part else 1
            label = None if group is None else f"{group} ({n} seed{'s' if n > 1 else ''})"
            ax.plot(mean.index, mean.values, "o-" if len(mean) < 15 else "-", ms=3, color=OKABE_ITO[k % 8], lw=2,
                    label=label)
        ax.set_title(GRADIENT_TITLES[matrix], fontsize=9)
        ax.set_xlabel("training step")
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_ylim(min(-0.1, float(kept["cosine"].min()) - 0.05), 1.0)
        ax.grid(alpha=0.25)
    axes[0].set_ylabel("cosine(kept term, full gradient)")
    if by:
        axes[0].legend(fontsize=7)
    fig.suptitle(title or "The associative-memory term's share of the gradient over training", fontsize=10)
    fig.tight_layout()
    return fig, kept.reset_index(drop=True)


def gradient_terms_figure(shares: pd.DataFrame, title: str = "") -> tuple[Figure, pd.DataFrame]:
    """The gradient's named terms at one model (:func:`compose_lens.analysis.gradient_terms.shares_of_model`),
    one panel per product (``qk0``, ``ov0``, ``qk1``): a bar per term, its cosine with the full gradient, the
    theory's kept term first and in blue, its share ||term|| / ||full|| printed beside it. The kept term's
    cosine near 1 is the claim holding. (:func:`gradient_shares_figure` draws the kept term over training.)"""
    fig, axes = subplots(1, 3, figsize=(REPORT_WIDTH_IN, 3.4), sharex=True)
    for ax, matrix in zip(axes, GRADIENT_TITLES):
        part = shares[shares["matrix"] == matrix]
        part = pd.concat([part[part["term"] == "kept"], part[part["term"] != "kept"]])
        y = np.arange(len(part))[::-1]
        ax.barh(y, part["cosine"], color=[OKABE_ITO[0] if t == "kept" else "#BBBBBB" for t in part["term"]],
                edgecolor="black", linewidth=0.4)
        for yi, cosine, share in zip(y, part["cosine"], part["share"]):
            ax.text(max(cosine, 0) + 0.03, yi, f"share {share:.2f}", va="center", fontsize=8)
        ax.set_yticks(y, [t.replace("_", " ") for t in part["term"]], fontsize=8)
        ax.set_title(textwrap.fill(GRADIENT_TITLES[matrix], 34), fontsize=9)
        ax.axvline(0, color="grey", lw=0.5)
        ax.set_xlim(min(-0.1, float(shares["cosine"].min()) - 0.05), 1.45)
        ax.set_xlabel("cosine with the full gradient")
        ax.grid(axis="x", alpha=0.25)
    fig.suptitle(title or "The gradient's named terms at this model: the kept (associative-memory) term in blue",
                 fontsize=10)
    fig.tight_layout()
    return fig, shares.reset_index(drop=True)


SAME_MLP_COLOURS = {"cross": OKABE_ITO[0], "same": OKABE_ITO[2], "control": OKABE_ITO[3], "reference": "#999999"}
SAME_MLP_KINDS = {"cross": "cross-type (constant <-> variable)", "same": "same-type reference",
                  "control": "control", "reference": "reference"}


def same_mlp_figure(report: dict) -> tuple[Figure, pd.DataFrame]:
    """The same-MLP tests of :mod:`compose_lens.analysis.same_mlp`, one panel per measure: operand
    interchange accuracy per condition and side (left, the full height), the constant vs variable
    damage profiles (one point per ablated unit), the probe's decoding accuracy and the share of the
    variables' variance in the constants' subspace (the probe table's two metrics, each on its own
    axis). Bars carry 95 % intervals and their value; the "not shared" prediction is a black tick,
    chance a dotted line; the colour of a bar is its kind of condition (legend at the bottom)."""
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


# -- circuit discovery -------------------------------------------------------------------------


def _node_depth(node: str) -> float:
    """Where a circuit node sits left to right: embed, then each layer's heads and its MLP, then logits."""
    if node == "embed":
        return 0.0
    if node == "logits":
        return 1e6
    layer = int(node[1:].split(".")[0])
    return 2 * layer + (1 if node.startswith("a") else 2)


def receiver_node(receiver: str) -> tuple[str, str]:
    """(node, input) of a receiver: ``a1.h0.k`` -> (``a1.h0``, ``k``); ``m1`` -> (``m1``, "")."""
    return (receiver[:-2], receiver[-1]) if receiver[-2:] in (".q", ".k", ".v") else (receiver, "")


def component_name(node: str, several_heads: bool = False) -> str:
    """A circuit node in the study's words: ``a0.h0`` -> ``layer 1 (blocks.0) attention``,
    ``m1`` -> ``layer 2 (blocks.1) MLP``; ``embed`` and ``logits`` as they are."""
    if node == "embed":
        return "embeddings (token + position)"
    if node == "logits":
        return "logits"
    layer = int(node[1:].split(".")[0])
    if node.startswith("m"):
        return f"{layer_name(layer)} MLP"
    head = node.split(".h")[1]
    return f"{layer_name(layer)} attention" + (f" head {head}" if several_heads else "")


PORT_OFFSET = {"q": 1 / 3, "k": 0.0, "v": -1 / 3, "": 0.0}  # of half a node's height: q above, v below
# |edge score|: green (weak) to dark violet (strong), viridis without its palest third, so the weakest
# edge of a circuit stays visible on the white page (issue 43: pale yellow vanished); colour-blind safe
EDGE_CMAP = ListedColormap(colormaps["viridis_r"](np.linspace(0.35, 1.0, 256)), name="edge_score")
EDGE_GAMMA = 0.5  # square-root colour scale: the many edges near 0.03 stay visible beside 0.3


EDGE_CLEARANCE = 0.08  # data units an edge keeps from a box it passes over (circuit graph)


@dataclass(frozen=True)
class CircuitLayout:
    """Where the circuit graph puts each component and each edge, in data units: one column per
    component depth (:func:`_node_depth`), x = the column's index; y = the head's place in its
    layer (whole graph, 1.4 units apart) or minus the position's row (by position). Both
    :func:`circuit_figure` (the PNG) and :mod:`compose_lens.views.circuit_view` (the interactive HTML
    view) draw from it, so the two show the same graph in the same places."""

    edges: pd.DataFrame  # the edges drawn (position -1: whole graph)
    by_position: bool
    several: bool  # a layer has several heads: name each
    nodes: frozenset
    columns: tuple  # the component depths, left to right
    positions: tuple  # the rows (by position), or (-1,)
    width: float  # of a box
    height: float
    stacked: Mapping  # node -> its offset within its column (whole graph)

    def row(self, position: int) -> float:
        """The y of a position's row (by position)."""
        return -float(self.positions.index(position))

    def centre(self, node: str, position: int) -> tuple[float, float]:
        x = float(self.columns.index(_node_depth(node)))
        return x, (self.row(position) if self.by_position else 1.4 * self.stacked[node])

    def boxes(self) -> list[tuple[str, int]]:
        """Every (component, position) an edge touches, sorted."""
        e = self.edges
        return sorted(set(zip(e["sender"], e["position"])) | {
            (receiver_node(r)[0], p) for r, p in zip(e["receiver"], e["position"])})

    def edge_path(self, sender: str, receiver: str, position: int, aspect: float = 1.0
                  ) -> tuple[tuple, tuple, float]:
        """(start, end, rad) of an edge: from its sender's right edge to its receiver's left edge (at
        the q / k / v port), bent by matplotlib's ``arc3`` ``rad`` over the boxes it skips. ``aspect``:
        how long one y unit is drawn against one x unit (``arc3`` bends in the drawing's own units).
        Over the whole graph an edge that skips boxes bends just far enough to clear every box between
        (:data:`EDGE_CLEARANCE`), over them (under them into a ``v`` port): a fixed bend ran the
        embeddings' and layer 1's long edges through the boxes between."""
        target, port = receiver_node(receiver)
        (x0, y0), (x1, y1) = self.centre(sender, position), self.centre(target, position)
        skip = x1 - x0
        start = (x0 + self.width / 2, y0)
        end = (x1 - self.width / 2, y1 + PORT_OFFSET[port] * self.height)
        if self.by_position:
            return start, end, 0.0 if skip <= 1 else -(0.1 + 0.08 * (skip - 1))  # over the boxes between
        between = [self.centre(node, p) for node, p in self.boxes()
                   if p == position and x0 < self.centre(node, p)[0] < x1 and node not in (sender, target)]
        if not between:
            return start, end, 0.0 if y0 == y1 or skip <= 0 else 0.12 * (1 if port != "v" else -1)
        up = port != "v"
        for step in range(1, 200):
            rad = (-1 if up else 1) * 0.02 * step  # arc3: a negative rad bends left of the chord, here up
            if self._clears(start, end, rad, aspect, between, up):
                return start, end, rad
        return start, end, rad

    @staticmethod
    def edge_curve(start, end, rad: float, aspect: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) in data units along ``arc3``'s quadratic curve, computed as matplotlib computes it, in
        drawn units (y stretched by ``aspect``)."""
        (sx, sy), (ex, ey) = (start[0], start[1] * aspect), (end[0], end[1] * aspect)
        cx, cy = (sx + ex) / 2 + rad * (ey - sy), (sy + ey) / 2 - rad * (ex - sx)
        t = np.linspace(0, 1, 201)
        xs = (1 - t) ** 2 * sx + 2 * t * (1 - t) * cx + t ** 2 * ex
        return xs, ((1 - t) ** 2 * sy + 2 * t * (1 - t) * cy + t ** 2 * ey) / aspect

    def _clears(self, start, end, rad: float, aspect: float, between, up: bool) -> bool:
        """Whether ``arc3``'s curve (:meth:`edge_curve`) passes every box of ``between`` by
        :data:`EDGE_CLEARANCE` on its side."""
        xs, ys = self.edge_curve(start, end, rad, aspect)
        for bx, by in between:
            near = np.abs(xs - bx) <= self.width / 2 + EDGE_CLEARANCE
            edge = by + self.height / 2 + EDGE_CLEARANCE if up else by - self.height / 2 - EDGE_CLEARANCE
            if near.any() and (np.any(ys[near] < edge) if up else np.any(ys[near] > edge)):
                return False
        return True

    def drawing_order(self) -> pd.DataFrame:
        """The edges faint first, then the circuit's, weakest first, so the strongest lie on top."""
        e = self.edges
        return e.assign(_abs=e["score"].abs()).sort_values(["in_circuit", "_abs"]).drop(columns="_abs")

    def colour_scale(self) -> PowerNorm:
        """|score| -> [0, 1] for :data:`EDGE_CMAP`: square-root scale up to the largest |score|."""
        return PowerNorm(EDGE_GAMMA, vmin=0, vmax=max(float(self.edges["score"].abs().max()), 1e-9))

    def column_name(self, depth: float) -> str:
        return component_name(next(n for n in sorted(self.nodes) if _node_depth(n) == depth), self.several)


def _drawn_aspect(fig: Figure, ax: Axes) -> float:
    """How long one y unit of ``ax`` is drawn against one x unit, at its current place and limits."""
    width, height = fig.get_size_inches()
    box = ax.get_position()
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    return (box.height * height / (y1 - y0)) / (box.width * width / (x1 - x0))


def circuit_layout(table: pd.DataFrame) -> CircuitLayout:
    """The layout of :func:`compose_lens.analysis.circuit.edge_table`'s edges (see
    :class:`CircuitLayout`). Without positions (``position`` -1 or absent) the edges are one per
    (sender, receiver), scores summed; an interval (``ci_low``, ``ci_high``) stays where each is
    one row of the table already."""
    by_position = "position" in table and bool((table["position"] >= 0).any())
    edges = table.copy()
    if "position" not in edges:
        edges["position"] = -1
    if not by_position:
        groups = edges.groupby(["sender", "receiver"], as_index=False, sort=False)
        kept = {c: (c, "first") for c in ("ci_low", "ci_high") if c in edges and groups.size()["size"].max() == 1}
        edges = groups.agg(score=("score", "sum"), in_circuit=("in_circuit", "any"), **kept).assign(position=-1)
    nodes = set(edges["sender"]) | {receiver_node(r)[0] for r in edges["receiver"]}
    several = any(n.startswith("a") and not n.endswith(".h0") for n in nodes)
    columns = sorted({_node_depth(n) for n in nodes})
    # rows: the heads of a layer one under another (whole graph), or the positions
    stacked: dict[str, float] = {}
    for d in columns:
        group = sorted(n for n in nodes if _node_depth(n) == d)
        for i, n in enumerate(group):
            stacked[n] = (len(group) - 1) / 2 - i
    positions = sorted(int(p) for p in set(edges["position"])) if by_position else [-1]
    width, height = (0.2, 0.62) if by_position else (0.62, 0.7)
    return CircuitLayout(edges, by_position, several, frozenset(nodes), tuple(columns), tuple(positions), width,
                         height, stacked)


def circuit_figure(table: pd.DataFrame, title: str, metric: str = "logit_diff") -> tuple[Figure, pd.DataFrame]:
    """The found circuit as a graph of :func:`compose_lens.analysis.circuit.edge_table`'s edges.

    Columns are the components in forward order, named as the paper does (``layer 1 (blocks.0)
    attention``). Without positions (``position`` -1) each component is one box; an attention box
    takes its query, key and value inputs at three ports on its left edge (q top, k middle, v
    bottom). With positions each row is one position of the sequence (an edge joins a sender and
    a receiver at the same position, so it runs along its row) and every (component, position)
    that an edge touches is a small box. Edge colour is the edge's |score| on a square-root scale
    (colour bar, viridis); edges of the found circuit are solid (dash-dotted where the score is
    negative), the others grey and dashed. Every arrow ends on its receiver's box; the colour bar
    names the ``metric`` the scores share (the discovery's ``summary["metric"]``). Returns the
    edges drawn (position -1: whole graph). The places are :func:`circuit_layout`'s."""
    layout = circuit_layout(table)
    edges, by_position, several, nodes = layout.edges, layout.by_position, layout.several, layout.nodes
    columns, positions, width, height = layout.columns, layout.positions, layout.width, layout.height
    centre = layout.centre
    n_cols = len(columns)
    tallest = max(sum(1 for n in nodes if _node_depth(n) == d) for d in columns)
    fig_h = (0.3 * len(positions) + 2.0) if by_position else 1.2 * tallest + 1.9
    fig, ax = subplots(figsize=(min(REPORT_WIDTH_IN, 1.9 * n_cols + 2.2), fig_h))
    norm, cmap = layout.colour_scale(), EDGE_CMAP
    lim = norm.vmax
    boxes = {}
    for node, position in layout.boxes():
        x, y = centre(node, position)
        box = FancyBboxPatch((x - width / 2, y - height / 2), width, height, boxstyle="round,pad=0,rounding_size=0.05",
                             facecolor="white", edgecolor="#555555", lw=0.8, zorder=3,
                             gid=f"node {node}@{position}")
        ax.add_patch(box)
        boxes[(node, position)] = (x, y)
        if not by_position:
            ax.text(x, y, textwrap.fill(component_name(node, several), 11), ha="center", va="center", fontsize=8,
                    zorder=4)
            if node.startswith("a"):
                for port, offset in PORT_OFFSET.items():
                    if port:
                        ax.text(x - width / 2 + 0.03, y + offset * height, port, ha="left", va="center",
                                fontsize=8, color="#333333", zorder=4, fontweight="bold")
    xs = [x for x, _ in boxes.values()]
    ys = [y for _, y in boxes.values()]
    ax.set_xlim(min(xs) - 0.55, max(xs) + 0.55)
    ax.set_ylim(min(ys) - 0.9, max(ys) + (0.9 if not by_position else 1.2))
    order = layout.drawing_order()
    if not by_position:  # room for the bends that clear the boxes, then the bends for the drawn aspect
        for _ in range(2):
            fig.tight_layout()
            bends = [y for row in order.itertuples()
                     for y in layout.edge_curve(*layout.edge_path(row.sender, row.receiver, row.position,
                                                                  _drawn_aspect(fig, ax)), _drawn_aspect(fig, ax))[1]]
            ax.set_ylim(min(min(ys) - 0.9, min(bends) - 0.15), max(max(ys) + 0.9, max(bends) + 0.15))
    aspect = _drawn_aspect(fig, ax)
    for row in order.itertuples():
        start, end, rad = layout.edge_path(row.sender, row.receiver, row.position, aspect)
        arrow = FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=8 if by_position else 11,
                                shrinkA=0, shrinkB=0, connectionstyle=f"arc3,rad={rad}",
                                color=cmap(norm(abs(row.score))) if row.in_circuit else "#bbbbbb",
                                lw=(1.2 if by_position else 2.2) if row.in_circuit else 0.7,
                                ls=("-" if row.score >= 0 else "-.") if row.in_circuit else (0, (3, 2)),
                                zorder=2 if row.in_circuit else 1,
                                gid=f"edge {row.sender}->{row.receiver}@{row.position}")
        ax.add_patch(arrow)
    ax.set_xticks([])
    ax.set_yticks([])
    for side in ax.spines.values():
        side.set_visible(False)
    if by_position:
        last = max(positions)
        for p in positions:
            ax.text(min(xs) - 0.32, layout.row(p), f"position {p}" + (" (=)" if p == last else ""),
                    ha="right", va="center", fontsize=8)
        for i, d in enumerate(columns):
            ax.text(i, max(ys) + 0.6, textwrap.fill(layout.column_name(d), 14), ha="center", va="bottom", fontsize=8)
    bar = fig.colorbar(ScalarMappable(norm, cmap), ax=ax, fraction=0.035, pad=0.02, shrink=0.9)
    bar.set_label(f"|edge score| (share of the\n{metric_words(metric)}; sqrt scale)", fontsize=8)
    bar.ax.tick_params(labelsize=8)
    handles = [Line2D([], [], color=cmap(norm(lim)), lw=2, label="in the found circuit"),
               Line2D([], [], color=cmap(norm(lim)), lw=2, ls="-.", label="in it, negative score"),
               Line2D([], [], color="#bbbbbb", lw=0.8, ls=(0, (3, 2)), label="left out")]
    if by_position:
        handles.append(Line2D([], [], color="none", label="attention inputs: q upper, k middle, v lower"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=4, fontsize=8,
              frameon=False, handlelength=2.5)
    ax.set_title(title, fontsize=9, pad=6 if not by_position else 34)
    fig.tight_layout()
    return fig, edges


def _wrap_component(label: str) -> str:
    for old, new in ((" (", "\n("), (") ", ")\n"), (" embedding", "\nembedding"), (" bias", "\nbias")):
        label = label.replace(old, new)
    return label


def _attribution_by_pool(ax: Axes, by_pool: pd.DataFrame) -> pd.DataFrame:
    """Each component's direct contribution (logits, 95 % interval) in each pool, but the one that writes
    nearly the whole margin (named in the title with its share): on one axis with it, a sign flip of
    half a logit between pools (layer 2's direct term: + on training pairs, - on add-restricted ones)
    was a sliver of a bar of 1.00 (issue 43)."""
    pools = list(dict.fromkeys(by_pool["pool"]))
    mean_share = by_pool.groupby("component", sort=False)["share"].mean()
    largest = mean_share.abs().idxmax() if mean_share.notna().any() else None  # no margin: no shares (all NaN)
    spread = by_pool[by_pool["component"] == largest]["share"]
    rest = by_pool[(by_pool["component"] != largest)]
    moving = rest.groupby("component", sort=False)["contribution"].apply(lambda v: v.abs().max() > 1e-6)
    components = [c for c in moving.index if moving[c]]
    width = 0.7 / max(len(components), 1)
    for i, pool in enumerate(pools):
        if "add_restricted" in pool:
            ax.axvspan(i - 0.45, i + 0.45, color="#999999", alpha=0.18, lw=0)
    for j, component in enumerate(components):
        part = rest[rest["component"] == component].set_index("pool").reindex(pools)
        xs = np.arange(len(pools)) + (j - (len(components) - 1) / 2) * width
        y = part["contribution"].to_numpy()
        err = None
        if {"contribution_low", "contribution_high"} <= set(part.columns):
            err = np.stack([y - part["contribution_low"].to_numpy(), part["contribution_high"].to_numpy() - y]).clip(0)
        ax.errorbar(xs, y, yerr=err, fmt="osD^v<>"[j % 7], color=OKABE_ITO[j % 8], ms=5, capsize=2, lw=1,
                    label=component)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(range(len(pools)), [p.replace("_", " ") for p in pools], fontsize=8, rotation=30, ha="right",
                  rotation_mode="anchor")
    ax.set_xlim(-0.6, len(pools) - 0.4)
    ax.set_ylabel("direct contribution to the answer margin\n(logits; bars: 95 % interval)", fontsize=9)
    left_out = ("every component drawn: the answer margin is 0, so no share of it" if largest is None else
                f"{largest} not drawn: it writes {spread.min():.2f}-{spread.max():.2f} of the margin in every pool")
    ax.set_title(f"direct logit attribution at '=' by pool (shaded: add-restricted pools)\n{left_out}", fontsize=9)
    low, high = ax.get_ylim()
    ax.set_ylim(low - 0.4 * (high - low), high)  # room under the points for the legend
    if ax.get_legend_handles_labels()[0]:  # no component drawn (all-zero weights): no legend to draw
        ax.legend(fontsize=8, loc="lower right", ncol=2, title="component", title_fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return rest[rest["component"].isin(components)]


def logit_attribution_figure(table: pd.DataFrame, lens: pd.DataFrame,
                             by_pool: pd.DataFrame | None = None) -> tuple[Figure, pd.DataFrame]:
    """Left: with ``by_pool`` (:func:`compose_lens.analysis.logit_attribution.logit_attribution` with
    ``by="pool"``), each smaller component's direct contribution per pool with its interval
    (:func:`_attribution_by_pool`); without it, each component's direct share of the answer margin at
    ``=`` per sequence kind. Right: the logit lens, accuracy of the residual stream read through the
    unembedding after each stage."""
    fig, (ax, lx) = subplots(1, 2, figsize=(REPORT_WIDTH_IN, 4.8 if by_pool is not None else 4.4),
                             gridspec_kw={"width_ratios": [3, 2]})
    kinds = list(dict.fromkeys(table["kind"]))
    data = table
    if by_pool is not None and len(by_pool):
        data = _attribution_by_pool(ax, by_pool)
    else:
        components = list(dict.fromkeys(table["component"]))
        width = 0.8 / len(kinds)
        for i, kind in enumerate(kinds):
            shares = table[table["kind"] == kind].set_index("component")["share"].reindex(components)
            xs = np.arange(len(components)) + (i - (len(kinds) - 1) / 2) * width
            bars = ax.bar(xs, shares.values, width, color=OKABE_ITO[i], label=kind)
            for bar, value in zip(bars, shares.values):
                if abs(value) >= 0.05:
                    ax.annotate(f"{value:.2f}", (bar.get_x() + bar.get_width() / 2, value), ha="center",
                                va="bottom" if value >= 0 else "top", fontsize=8, rotation=90,
                                xytext=(0, 2 if value >= 0 else -2), textcoords="offset points")
        ax.set_xticks(np.arange(len(components)), [_wrap_component(c) for c in components], fontsize=8)
        ax.axhline(0, color="black", lw=0.6)
        ax.set_ylabel("share of the answer margin", fontsize=9)
        ax.set_title("direct logit attribution at '='", fontsize=10)
        ax.legend(title="sequence kind", fontsize=8, title_fontsize=8)
    stages = list(dict.fromkeys(lens.sort_values("order")["after"]))
    for i, kind in enumerate(kinds):
        acc = lens[lens["kind"] == kind].set_index("after")["accuracy"].reindex(stages)
        lx.plot(range(len(stages)), acc.values, marker="o", color=OKABE_ITO[i], label=kind)
    lx.set_xticks(range(len(stages)), [_wrap_component(s) for s in stages], fontsize=8)
    lx.set_ylim(-0.02, 1.02)
    lx.set_ylabel("accuracy of the unembedded residual", fontsize=9)
    lx.set_title("logit lens at '='", fontsize=10)
    lx.legend(fontsize=8, title="sequence kind", title_fontsize=8)
    fig.tight_layout()
    return fig, data


# -- the standard methods: DAS (compose_lens.analysis.das) and the LLC (compose_lens.analysis.llc) --

CONTROL_STYLE = {"learned": (OKABE_ITO[0], "o", "-", "learned subspace (DAS)"),
                 "random subspace": (OKABE_ITO[1], "s", "--", "random subspace, same rank"),
                 "arbitrary labels": (OKABE_ITO[3], "^", ":", "DAS towards arbitrary labels")}
SITE_TITLES = {"value_after_layer1": "value token, after layer 1 (blocks.0)",
               "equals_before_mlp2": "'=' before MLP2: after layer 2 (blocks.1) attention",
               "query_variable_after_layer1": "query's variable token, after layer 1 (blocks.0)\n(placebo site)"}


def das_figure(table: pd.DataFrame, title: str = "") -> Figure:
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
    return fig


def llc_figure(table: pd.DataFrame, phases: Mapping | None = None, title: str = "") -> Figure:
    """The LLC of each checkpoint (mean over chains, bars: their spread; hollow and off the line: an
    estimate that failed a sanity check) above the checkpoint's training loss, the phase onsets dashed."""
    fig, (top, bottom) = subplots(2, 1, figsize=(7.5, 5.6), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 2]})
    table = table.sort_values("step")
    healthy = table["healthy"].astype(bool).to_numpy()
    colour = OKABE_ITO[0]
    # the line joins only the estimates that passed the sanity checks (issue 43: it ran through the
    # failed ones); every estimate keeps its bar and its marker
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
    return fig


# -- modularity against architecture (experiments/modularity_grid.py) ------------------------------

MODULARITY_MEASURES = (("modularity_separation", "separation (a)"),
                       ("modularity_same_adder", "same adder (b): 1 supported"),
                       ("modularity_circuit_fraction", "circuit / graph edges (c)"))
MODULARITY_CONSTANT_WORDS = {"modularity_separation": "the separation (a)",
                             "modularity_same_adder": "the same-adder test (b; 1: supported)",
                             "modularity_circuit_fraction": "the circuit fraction (c)"}


def modularity_figure(rows: pd.DataFrame, x: str, group: str | None = None, log2: bool = False,
                      separation_min: float | None = None) -> tuple[Figure, pd.DataFrame]:
    """The modularity measures (:mod:`compose_lens.analysis.modularity`) of a grid's points against one
    architecture axis ``x`` (``d_model``, ``n_layers``, ``n_heads``), one colour per value of ``group``.

    Each seed is a marker (seeds side by side); the line joins the mean over seeds and its error bar is
    the range over seeds; a point's own 95 % bootstrap interval (``<measure>_low`` / ``_high``, where the
    table has them) is the seed marker's bar. A panel whose every measured value is the same (the same
    adder test passing everywhere) is not drawn: the title says the value instead. The legend lists only
    the markers drawn: an inconclusive point (no measure) as an x at 0, a point trained again at the
    study's learning rate (``remedy`` none) ringed (issue 43: the title named markers the figure did
    not have, one panel was constant, and nothing showed the spread)."""
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
