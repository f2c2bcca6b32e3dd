"""How every figure of :mod:`compose_lens.views` is made, written and shared: drawing only, from numbers.

A figure function takes numbers (a table, a matrix), never a model, and returns ``(figure, data)``:
the figure and the :class:`pandas.DataFrame` it plotted. :func:`save` writes both (``NAME.png``
beside ``NAME.csv``: PNG, SVG or PDF), :func:`png_bytes` and :func:`data_uri` give an ``<img>`` for
the offline report, and a :class:`Renderer` draws in a worker process while the analyses go on.
Figures are :class:`StudyFigure` s made without pyplot, so importing the views leaves the user's
matplotlib backend alone, and they are drawn in the report's style unless ``with
figure_style.style("paper"):`` says otherwise (:mod:`compose_lens.views.figure_style`).

What every figure shares lives here once: the palette, the report's width, how a layer is named
(:func:`layer_name`), the one :func:`heatmap` every matrix is drawn with, the colour scales of every
attention heatmap and the words for a patching metric (:func:`metric_words`).
"""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
from matplotlib import rc_context
from matplotlib.axes import Axes
from matplotlib.colors import Normalize, PowerNorm
from matplotlib.figure import Figure

from compose_lens.views.figure_style import current_style, fit, style, style_named
from compose_lens.core.files import atomic_path

FORMATS = ("png", "svg", "pdf")
# colour-blind-safe categorical colours (Okabe and Ito 2008): blue, orange, green, vermillion, purple,
# sky blue, yellow, black
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
REPORT_WIDTH_IN = 11.0  # at 110 dpi 1,210 px: the report's column (1,218 px) shows such a figure unshrunk

ATTENTION_GAMMA = 0.5  # attention colour = weight ** 0.5: 0.2 shows at 45 % of full colour
# the two units of every attention heatmap's colour bar: a weight after the softmax, a score (logit) before it
ATTENTION_LABEL = "attention weight (square-root colour scale)"
SCORE_LABEL = "attention score q.k / sqrt(d_head) (logit)"
ATTENTION_SCALE = {"cmap": "Blues", "centre": False, "mask_upper": True, "vmax": 1.0, "gamma": ATTENTION_GAMMA,
                   "colorbar_label": ATTENTION_LABEL}  # every attention pattern's heatmap
MARK_STYLE = {"operand": ("tab:blue", "-", "= to operand"),
              "value": ("tab:orange", "-", "= to value"),
              "previous": ("tab:green", "--", "previous token")}

METRIC_WORDS = {"logit_diff": "logit difference", "prob": "probability of the clean answer",
                "accuracy": "accuracy"}


def metric_words(metric: str) -> str:
    """How a scale names a patching metric: ``logit difference``, ``probability of the clean
    answer``, ``accuracy``, or a user's own metric by its name."""
    return METRIC_WORDS.get(metric, f"metric {metric}")


def layer_name(block: int) -> str:
    """The one way figures name a layer: the paper's number and TransformerLens's block.

    >>> layer_name(0)
    'layer 1 (blocks.0)'
    """
    return f"layer {block + 1} (blocks.{block})"


class StudyFigure(Figure):
    """A matplotlib figure made without pyplot (no backend chosen, nothing kept open) that Jupyter shows
    inline. It remembers the style it was made in and its ``tight_layout`` settings, so that writing it
    fits it to that style (:func:`compose_lens.views.figure_style.fit`) however late it is written, and the
    PNG it was last written as (:func:`figure_bytes`), which the report embeds instead of encoding it again."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.study_style = current_style()
        self.study_layout: dict | None = None
        self.written_png: bytes | None = None

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
    """``(figure, axes)`` as ``pyplot.subplots`` gives them, on a :class:`StudyFigure`."""
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
    if fmt == "png" and isinstance(fig, StudyFigure):
        fig.written_png = buffer.getvalue()
    if getattr(fig.canvas, "manager", None) is not None:  # made by pyplot (a caller's): release it there
        import matplotlib.pyplot as plt  # already imported by whoever made it

        plt.close(fig)
    return buffer.getvalue()


def png_bytes(fig: Figure, dpi: int = 110) -> bytes:
    """The figure as PNG bytes (the figure is closed)."""
    return figure_bytes(fig, dpi, "png")


def save(fig: Figure, data: pd.DataFrame | None, path: str | Path, dpi: int = 110,
         fmt: str = "png") -> list[Path]:
    """Write ``path`` as ``fmt`` (the suffix follows the format) and ``data`` beside it as CSV (same stem),
    each atomically; close the figure."""
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
    ``save(figure_function(*numbers)[0], None, path, dpi, fmt)``. With ``background=True`` a
    worker process draws the same bytes while the analysis goes on computing (``analyze``'s figures
    took ~2.5 s of an idle 12 s run); :meth:`wait` (and leaving a ``with`` block) waits for every
    figure and raises the first failure.

    The worker is spawned, not forked (it never inherits torch's thread pool), when the renderer is
    made. Spawning re-imports the caller's main script, safe for the guarded ``compose-lens`` command
    but not a user's unguarded script: only the command line asks for a background renderer.
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


def heatmap(ax: Axes, matrix: np.ndarray, xlabels: Sequence, ylabels: Sequence, title: str,
            cmap: str = "RdBu_r", centre: bool = True, mask_upper: bool = False, fontsize: float = 7,
            rotation: float = 90, aspect: str | None = None, colorbar_label: str | None = None,
            vmax: float | None = None, gamma: float | None = None, annotate: bool = False,
            bar_range: tuple[float, float] | None = None) -> None:
    """Draw ``matrix`` on ``ax``: the one heatmap of every figure.

    ``centre``: a diverging scale symmetric about 0 (else sequential from 0 up to ``vmax``);
    ``bar_range``: the part of a diverging scale the colour bar shows (e.g. from the least value to 1,
    not from -1); ``gamma``: a power-law sequential scale (0.5 = square root); ``mask_upper``: blank the
    cells above the diagonal; ``annotate``: write each cell's value in it.
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


def matrix_frame(matrix: np.ndarray, rows: Sequence, cols: Sequence, name: str) -> pd.DataFrame:
    frame = pd.DataFrame(np.asarray(matrix), index=list(rows), columns=list(cols))
    frame.index.name = name
    return frame.reset_index()
