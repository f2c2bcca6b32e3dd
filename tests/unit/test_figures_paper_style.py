"""One figure style for the whole toolkit (issue 43): the report's, unchanged, and a paper's (7.0 in wide,
text at 7 to 9 pt, vector files), from Python (``style``), in the background renderer and from the
command line (``--style paper``)."""

from __future__ import annotations

import math
import re
from io import BytesIO
from itertools import combinations

import matplotlib.text
import pandas as pd
import pytest
from PIL import Image

from compose_lens.registry.probes.summary import MEASURE_KEYS
from compose_lens.views.figure_style import PAPER_WIDTH_IN, STYLES, current_style, style
from compose_lens.views.drawing import Renderer, figure_bytes, save
from compose_lens.registry.same_mlp.figure import same_mlp_figure
from compose_lens.registry.dynamics.figure import dynamics_figure, progress_measures_figure

from test_figures_for_print import _dynamics, _same_mlp_report, _study_section_figure


def _progress():
    table = pd.DataFrame({"step": [0, 100, 200], **{m: [0.1, 0.5, 0.9] for m in MEASURE_KEYS}})
    return progress_measures_figure(table, {"addition": {"step": 100}})


def _same_mlp_five_probe_rows():
    """The paper model's probe table: five conditions, the last a two-line name (its rows touched at 7 in)."""
    report = _same_mlp_report()
    probe = report["tables"]["probe"]
    for test in ("probe", "subspace"):
        row = next(r for r in probe if r["test"] == test)
        probe += [{**row, "condition": name} for name in ("1-var right", "random-token terms (constant prompts)")]
    return same_mlp_figure(report)


BUSIEST = {"progress measures (12 panels)": _progress,
           "same MLP (4 panels, long labels)": lambda: same_mlp_figure(_same_mlp_report()),
           "same MLP (five probe rows)": _same_mlp_five_probe_rows,
           "nine pools": lambda: dynamics_figure(*_dynamics()),
           "ablation (27 rows x 9 pools)": lambda: _study_section_figure("ablation"),
           "early jump (4 heatmaps)": lambda: _study_section_figure("jump")}


def _texts(fig) -> list[matplotlib.text.Text]:
    """The texts drawn: a tick label only where its tick is inside the axis's view (a locator's
    ticks beyond it are kept by matplotlib but not drawn)."""
    fig.draw_without_rendering()
    ticks, drawn = set(), []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                ticks |= {tick.label1, tick.label2}
                if low - 1e-9 * (high - low) <= tick.get_loc() <= high + 1e-9 * (high - low):
                    drawn += [label for label in (tick.label1, tick.label2) if label.get_visible()]
    drawn += [t for t in fig.findobj(matplotlib.text.Text) if t not in ticks and t.get_visible()]
    return [t for t in drawn if t.get_text().strip()]


def _drawn_in(name: str, draw):
    with style(name):
        fig, _ = draw()
    png = figure_bytes(fig, 110, "png")  # written as a command writes it: fitted to its style
    return fig, png


def _png_inches(png: bytes) -> tuple[float, float]:
    image = Image.open(BytesIO(png))
    dpi = image.info["dpi"][0]
    return image.size[0] / dpi, image.size[1] / dpi


@pytest.mark.parametrize("name", list(BUSIEST))
def test_a_paper_figure_is_a_column_wide_with_its_text_at_paper_sizes(name):
    fig, png = _drawn_in("paper", BUSIEST[name])
    width, _ = _png_inches(png)
    assert PAPER_WIDTH_IN - 0.6 < width <= PAPER_WIDTH_IN + 0.005, f"{width:.2f} in wide"  # was 11 in
    assert Image.open(BytesIO(png)).info["dpi"][0] == pytest.approx(300, abs=1)
    sizes = sorted({t.get_fontsize() for t in _texts(fig)})
    assert 7 <= sizes[0] and sizes[-1] <= 9, sizes  # the report's run from 6.5 or 8 to 10 pt
    ticks = [t for ax in fig.axes for t in ax.get_xticklabels() + ax.get_yticklabels() if t.get_text()]
    assert ticks and all(7 <= t.get_fontsize() <= 9 for t in ticks)


def _side_by_side(a, b, renderer) -> bool:
    """Two texts turned by the same angle (a heatmap's slanted column labels), whose upright boxes
    overlap, are apart when their baselines are at least a line apart across the slant."""
    angle = math.radians(a.get_rotation())
    if a.get_rotation() == 0 or a.get_rotation() != b.get_rotation():
        return False
    (xa, ya), (xb, yb) = (t.get_transform().transform(t.get_position()) for t in (a, b))
    across = abs(-(xb - xa) * math.sin(angle) + (yb - ya) * math.cos(angle))
    return across >= 0.9 * max(a.get_fontsize(), b.get_fontsize()) * renderer.points_to_pixels(1.0)


@pytest.mark.parametrize("name", list(BUSIEST))
def test_no_text_overlaps_another_in_the_busiest_figures_at_paper_width(name):
    fig, _ = _drawn_in("paper", BUSIEST[name])
    renderer = fig._get_renderer()
    texts = _texts(fig)
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
    overlapping = [(a.get_text(), b.get_text())
                   for (a, (_, box_a)), (b, (_, box_b)) in combinations(zip(texts, boxes), 2)
                   if box_a.shrunk(0.98, 0.9).overlaps(box_b.shrunk(0.98, 0.9)) and not _side_by_side(a, b, renderer)]
    assert not overlapping, overlapping[:5]
    figure = fig.bbox.padded(1)  # and none is cut by the figure's edge
    assert all(figure.x0 <= box.x0 and box.x1 <= figure.x1 for _, box in boxes), \
        [text for text, box in boxes if box.x0 < figure.x0 or box.x1 > figure.x1]


@pytest.mark.parametrize("name", ["progress measures (12 panels)", "ablation (27 rows x 9 pools)"])
def test_the_report_style_changes_no_byte(name):
    """The report's figures are what they were: drawn outside any style, in the report's style, and
    after a paper figure was drawn, the same PNG bytes, 11 in wide, with the function's own fonts."""
    plain = figure_bytes(BUSIEST[name]()[0], 110, "png")
    _drawn_in("paper", BUSIEST[name])
    fig, report = _drawn_in("report", BUSIEST[name])
    assert report == plain
    assert _png_inches(report)[0] > 10  # the report's 11 in, less the tight crop
    if name.startswith("progress"):
        assert fig._suptitle.get_fontsize() == 9.5 and fig.axes[0].title.get_fontsize() == 8.5
    assert current_style() is STYLES["report"]


def test_a_figure_remembers_its_style_and_a_paper_pdf_keeps_its_text_as_text(tmp_path):
    with style("paper"):
        fig, data = _progress()
    written = save(fig, data, tmp_path / "progress", fmt="pdf")  # outside the block
    pdf = written[0].read_bytes()
    width_pt = float(re.search(rb"MediaBox \[ 0 0 ([0-9.]+)", pdf).group(1))
    assert width_pt / 72 <= PAPER_WIDTH_IN + 0.005
    assert b"FontFile2" in pdf  # TrueType embedded (Type 42): a journal's checks and a search find the words


def test_the_background_renderer_draws_in_the_callers_style(tmp_path):
    table = pd.DataFrame({"step": [0, 100, 200], **{m: [0.1, 0.5, 0.9] for m in MEASURE_KEYS}})
    with style("paper"), Renderer(background=True) as renderer:
        renderer.save(progress_measures_figure, table, {"addition": {"step": 100}},
                      path=tmp_path / "paper", fmt="png")
    with Renderer(background=True) as renderer:
        renderer.save(progress_measures_figure, table, {"addition": {"step": 100}},
                      path=tmp_path / "report", fmt="png")
    assert _png_inches((tmp_path / "paper.png").read_bytes())[0] <= PAPER_WIDTH_IN + 0.005
    assert _png_inches((tmp_path / "report.png").read_bytes())[0] > 10


def test_an_unknown_style_is_refused_in_one_line():
    with pytest.raises(ValueError, match="use one of report, paper"):
        with style("poster"):
            pass


def test_style_paper_on_the_command_line_writes_pdf_and_a_bad_style_exits_2(monkeypatch, capsys):
    from compose_lens import cli
    from compose_lens.cli import common

    seen = {}

    def command(args):  # what a figure-writing command sees while it runs
        seen.update(fmt=args.fmt, style=current_style().name)
        return 0

    parser = cli.build_parser()
    for argv, expected in ((["fourier", "paper", "--out", "o", "--style", "paper"], ("pdf", "paper")),
                           (["fourier", "paper", "--out", "o", "--style", "paper", "--format", "svg"],
                            ("svg", "paper")),
                           (["analyze", "paper", "--out", "o"], ("png", "report"))):
        args = parser.parse_args(argv)
        args.func = command
        with common.figure_style(args):
            args.func(args)
        assert (seen["fmt"], seen["style"]) == expected
    assert set(common.STYLES) == set(STYLES)  # the CLI's list (no matplotlib import for --help) is the package's
    assert cli.main(["fourier", "paper", "--out", "o", "--style", "poster"]) == 2
    assert "invalid choice: 'poster'" in capsys.readouterr().err
