"""One figure style for the whole toolkit: the report's, or a paper's.

Every figure of :mod:`compose_lens.views` is drawn for the offline report: 11 in wide
(:data:`compose_lens.views.drawing.REPORT_WIDTH_IN`), its fonts 8 to 10 pt, written as PNG at 110 dpi. A paper
wants the same figure at a journal's width, its text at the size of the caption beside it, and vector
files. A :class:`FigureStyle` says all of that in one place, and :data:`STYLES` holds the two:

* ``report``: what the figures always were; nothing is changed;
* ``paper``: a two-column journal's full text width, :data:`PAPER_WIDTH_IN` = 7.0 in (a narrower
  figure keeps its width), text at 7 to 9 pt, thin lines, PDF by default, PNG at 300 dpi, fonts
  embedded as text (PDF Type 42, SVG text), so a typesetter and a reader's search find the labels.

The figure functions set their own sizes and font sizes; rather than teach each of them a second
layout, the style is applied in two steps that work for every figure, a user's own included:

1. while drawing, inside :func:`style`, matplotlib's settings (:attr:`FigureStyle.rc`) give every
   size the figure does not set itself (tick labels, legends, line widths);
2. when the figure is written (:func:`fit`), a figure wider than the style's width is narrowed to
   it, its height by the square root of that factor (panels keep room for their titles), every text
   is set to the style's size (:meth:`FigureStyle.font_size`), long titles are wrapped again, the
   layout is run again, touching number ticks are thinned, touching row names get more height and a
   title left high above square panels comes down: no label overlaps another
   (``tests/unit/test_figures_paper_style.py`` checks the busiest figures' text boxes).

A figure remembers the style it was drawn in, so saving it later, outside the ``with`` block, still
writes it in that style. From Python or a notebook::

    from compose_lens.views.figure_style import style
    from compose_lens.views.drawing import save
    from compose_lens.registry.dynamics.figure import progress_measures_figure
    with style("paper"):
        fig, data = progress_measures_figure(table, phases)
        save(fig, data, "figures/progress", fmt="pdf")   # 7.0 in wide, 7-9 pt

On the command line, ``--style paper`` on every command that writes figures (the registered
analyses' commands, ``analyze``, ``attention``, ``llc``) draws them so and writes PDF unless
``--format`` says otherwise.
"""

from __future__ import annotations

import textwrap
import warnings
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Iterator

import matplotlib
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import MaxNLocator

PAPER_WIDTH_IN = 7.0  # a two-column journal's text width (both columns); one column is about 3.3 to 3.5 in


@dataclass(frozen=True)
class FigureStyle:
    """How figures look: ``rc`` (matplotlib settings while drawing), ``width`` (in inches: a wider
    figure is narrowed to it when written; None: figures keep their size), ``fonts`` (the smallest
    and largest text size in pt, None: text keeps its size), ``dpi`` (of PNG files and raster
    images; None: the caller's) and ``format`` (the file format a command writes by default)."""

    name: str
    rc: dict = field(default_factory=dict)
    width: float | None = None
    fonts: tuple[float, float] | None = None
    font_shift: float = 0.0
    dpi: int | None = None
    format: str = "png"

    def font_size(self, size: float) -> float:
        """The size in this style of a text drawn at ``size`` pt for the report: one point smaller
        (the paper's figures sit beside 9 to 10 pt body text), kept within :attr:`fonts`."""
        if self.fonts is None:
            return size
        low, high = self.fonts
        return min(max(size + self.font_shift, low), high)


STYLES = {
    "report": FigureStyle("report"),
    "paper": FigureStyle(
        "paper", width=PAPER_WIDTH_IN, fonts=(7.0, 9.0), font_shift=-1.0, dpi=300, format="pdf",
        rc={"font.family": "sans-serif", "font.size": 8, "axes.titlesize": 9, "axes.labelsize": 8,
            "xtick.labelsize": 7, "ytick.labelsize": 7, "legend.fontsize": 7, "figure.titlesize": 9,
            "lines.linewidth": 1.0, "lines.markersize": 3.5, "axes.linewidth": 0.6, "patch.linewidth": 0.6,
            "grid.linewidth": 0.5, "xtick.major.width": 0.6, "ytick.major.width": 0.6,
            "xtick.major.size": 2.5, "ytick.major.size": 2.5, "savefig.dpi": 300, "savefig.pad_inches": 0.03,
            "pdf.fonttype": 42, "ps.fonttype": 42, "svg.fonttype": "none"}),
}

_CURRENT: ContextVar[FigureStyle] = ContextVar("compose_lens_figure_style", default=STYLES["report"])


def style_named(name: str | FigureStyle) -> FigureStyle:
    """The style called ``name`` (a :class:`FigureStyle` is returned as it is); a ValueError names
    the styles there are."""
    if isinstance(name, FigureStyle):
        return name
    if name not in STYLES:
        raise ValueError(f"figure style {name!r}: use one of {', '.join(STYLES)}")
    return STYLES[name]


def current_style() -> FigureStyle:
    """The style figures are drawn in now (``report`` outside any :func:`style` block)."""
    return _CURRENT.get()


@contextmanager
def style(name: str | FigureStyle = "paper") -> Iterator[FigureStyle]:
    """Draw (and write) the figures made inside the block in the style ``name`` (:data:`STYLES`)."""
    chosen = style_named(name)
    token = _CURRENT.set(chosen)
    try:
        with matplotlib.rc_context(chosen.rc):
            yield chosen
    finally:
        _CURRENT.reset(token)


def fit(fig: Figure, chosen: str | FigureStyle | None = None) -> Figure:
    """Size ``fig`` and its text for ``chosen`` (default: the style it was drawn in, else the current
    one), once; see the module docstring. The report's style leaves the figure as it is."""
    chosen = style_named(chosen or getattr(fig, "study_style", None) or current_style())
    if getattr(fig, "_fitted_to", None) == chosen.name or (chosen.width is None and chosen.fonts is None):
        return fig
    width, height = fig.get_size_inches()
    if chosen.width is not None and width > chosen.width:
        factor = chosen.width / width
        fig.set_size_inches(chosen.width, height * factor ** 0.5)
    fig.draw_without_rendering()  # makes the tick labels there will be, so that they are sized too
    # ticks made again at draw time take their axis's label size, not the old Text's: set both, from the report's
    tick_sizes = {(axis, which): ticks[0].label1.get_fontsize() for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)
                  for which, ticks in (("major", axis.get_major_ticks()), ("minor", axis.get_minor_ticks())) if ticks}
    for text in fig.findobj(Text):
        text.set_fontsize(chosen.font_size(text.get_fontsize()))
    for (axis, which), size in tick_sizes.items():
        axis.set_tick_params(which=which, labelsize=chosen.font_size(size))
    for _ in range(2):  # the layout narrows the axes the titles were wrapped for: wrap and lay out again
        _rewrap(fig)
        if fig.axes:
            _lay_out(fig, dict(getattr(fig, "study_layout", None) or {}))
    _thin_ticks(fig)
    for _ in range(4):  # named ticks (a bar chart's conditions) are never dropped: give them the height
        if not _names_touch(fig):
            break
        fig.set_size_inches(fig.get_figwidth(), fig.get_figheight() * 1.12)
        _lay_out(fig, dict(getattr(fig, "study_layout", None) or {}))
    _title_down(fig)
    # the file is the drawn box and a margin (bbox_inches="tight"): text reaching out of the figure, a
    # colour bar's label, would make it wider than the column
    target = None if chosen.width is None else chosen.width - 2 * chosen.rc.get("savefig.pad_inches", 0.1) - 0.01
    for _ in range(3):
        drawn = fig.get_tightbbox(fig._get_renderer()).width
        if target is None or drawn <= target + 0.001:
            break
        fig.set_size_inches(fig.get_figwidth() - (drawn - target) - 0.01, fig.get_figheight())
        if fig.axes:
            _lay_out(fig, dict(getattr(fig, "study_layout", None) or {}))
    fig._fitted_to = chosen.name
    return fig


def _lay_out(fig: Figure, layout: dict) -> None:
    """Place the axes again at the new size with ``tight_layout`` (run twice: the second is exact) and
    the figure's own pads, between its title and legends. A grid's own spacing, chosen for the report's
    width, is dropped; axes placed by hand keep their placement (constrained layout squeezed
    :func:`compose_lens.registry.same_mlp.figure.same_mlp_figure`'s panels to slivers)."""
    _below_title(fig)
    for grid in {ax.get_subplotspec().get_topmost_subplotspec().get_gridspec() for ax in fig.axes
                 if ax.get_subplotspec() is not None}:
        grid.update(**dict.fromkeys(grid.locally_modified_subplot_params()))  # spacing set for 11 in: recomputed
    rect = _free_rect(fig)
    title = fig._suptitle
    counted = title is not None and title.get_in_layout()
    if counted:  # tight_layout would take its height off the top of ``rect`` again
        title.set_in_layout(False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        try:
            for _ in range(2):
                Figure.tight_layout(fig, **{**layout, "rect": rect})
        except UserWarning:  # "not compatible with tight_layout": it has changed nothing
            pass
    if counted:
        title.set_in_layout(True)


def _below_title(fig: Figure) -> None:
    """Move a legend placed at the top of the figure below the figure's title where the title,
    wrapped again for the narrower figure, now reaches down onto it."""
    if fig._suptitle is None or not fig._suptitle.get_text().strip():
        return
    renderer, inverse = fig._get_renderer(), fig.transFigure.inverted()
    title = fig._suptitle.get_window_extent(renderer).transformed(inverse)
    for legend in fig.legends:
        box = legend.get_window_extent(renderer).transformed(inverse)
        if box.y1 > title.y0 and (box.y0 + box.y1) / 2 > 0.5:
            legend.set_loc("upper center")
            legend.set_bbox_to_anchor(((box.x0 + box.x1) / 2, title.y0 - 0.005), transform=fig.transFigure)


def _title_down(fig: Figure) -> None:
    """Bring the figure's title down to its axes where square panels (heatmaps, drawn at a fixed
    aspect) left the narrowed figure's top empty; the file is then cropped to what is drawn. A
    figure with a legend at its top keeps its title where it is."""
    title = fig._suptitle
    if title is None or not title.get_text().strip() or not fig.axes:
        return
    renderer, inverse = fig._get_renderer(), fig.transFigure.inverted()
    if any(legend.get_window_extent(renderer).transformed(inverse).y0 > 0.5 for legend in fig.legends):
        return
    top = max(ax.get_tightbbox(renderer).transformed(inverse).y1 for ax in fig.axes if ax.get_visible())
    gap = title.get_window_extent(renderer).transformed(inverse).y0 - top
    if gap > 0.03:
        title.set_y(title.get_position()[1] - gap + 0.015)


def _names_touch(fig: Figure) -> bool:
    """Whether two neighbouring y tick labels that name rows (not numbers) overlap."""
    renderer = fig._get_renderer()
    for ax in fig.axes:
        if isinstance(ax.yaxis.get_major_locator(), MaxNLocator):
            continue
        boxes = [t.get_window_extent(renderer) for t in ax.get_yticklabels() if t.get_visible() and t.get_text()]
        if any(a.overlaps(b) for a, b in zip(boxes, boxes[1:])):
            return True
    return False


def _thin_ticks(fig: Figure) -> None:
    """Halve the ticks of a number axis whose tick labels now touch (a panel made shorter keeps
    the report's nine ticks otherwise); named ticks (a heatmap's tokens) are never dropped."""
    renderer = fig._get_renderer()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            locator = axis.get_major_locator()
            for _ in range(3):
                if not isinstance(locator, MaxNLocator):
                    break
                low, high = sorted(axis.get_view_interval())
                boxes = [tick.label1.get_window_extent(renderer) for tick in axis.get_major_ticks()
                         if tick.label1.get_visible() and tick.label1.get_text() and low <= tick.get_loc() <= high]
                if not any(a.overlaps(b) for a, b in zip(boxes, boxes[1:])):
                    break
                locator.set_params(nbins=max(2, len(boxes) // 2))
                fig.draw_without_rendering()


def _rewrap(fig: Figure) -> None:
    """Wrap again each axis title, axis label and the figure's title that is now wider than what
    it labels (its axis, or the figure): at the report's width the figures wrap their text by hand."""
    renderer = fig._get_renderer()  # the figure's own (a canvas without pyplot has none)
    room = [(t, ax.get_window_extent(renderer).width) for ax in fig.axes
            for t in (ax.title, ax._left_title, ax._right_title, ax.xaxis.label)]
    if fig._suptitle is not None:
        room.append((fig._suptitle, fig.bbox.width))
    for text, width in room:
        drawn = text.get_window_extent(renderer).width if text.get_text().strip() else 0
        if drawn > width * 1.02:  # each line the figure broke stays a line of its own, wrapped if long
            lines = text.get_text().split("\n")
            per_line = max(8, int(max(map(len, lines)) * width / drawn))
            original = getattr(text, "_report_words", None) or text.get_text()  # wrapped again from the figure's
            text._report_words = original
            text.set_text("\n".join(textwrap.fill(line, per_line, break_on_hyphens=False, break_long_words=False)
                                     for line in original.split("\n")))


def _free_rect(fig: Figure) -> tuple[float, float, float, float]:
    """The part of the figure (in figure fractions) below its title and legends placed on top and
    above its legends placed at the bottom: where ``tight_layout`` may put the axes."""
    renderer = fig._get_renderer()  # the figure's own (a canvas without pyplot has none)
    bottom, top = 0.0, 1.0
    above = [legend.get_window_extent(renderer) for legend in fig.legends]
    if fig._suptitle is not None and fig._suptitle.get_text().strip():
        above.append(fig._suptitle.get_window_extent(renderer))
    for box in above:
        box = box.transformed(fig.transFigure.inverted())
        if (box.y0 + box.y1) / 2 > 0.5:
            top = min(top, box.y0 - 0.01)
        else:
            bottom = max(bottom, box.y1 + 0.01)
    return (0.0, bottom, 1.0, top)
