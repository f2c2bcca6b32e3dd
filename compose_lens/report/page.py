"""The offline HTML page of the report: sections that fail softly, figures as data URIs, circuitsvis inlined.

:class:`Report` builds a page section by section: a failing section becomes a note on the page (a full disk
stops the page instead), and every figure is embedded as a base64 ``data:`` URI (and saved as PNG + CSV beside
the page). The page is :func:`compose_lens.core.markup.offline_page`, the circuitsvis bundle inlined once in its
head (:mod:`compose_lens.registry.attention.interactive`), from the templates of :mod:`compose_lens.core.markup`.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Callable

from markupsafe import Markup

from compose_lens.core.markup import COMPARISON_STYLE, VIEW_STYLE, offline_page, render
from compose_lens.data.safety import FULL
from compose_lens.views.drawing import data_uri, png_bytes

STYLE = """
body{font-family:system-ui,-apple-system,sans-serif;max-width:1250px;margin:1.5em auto;padding:0 1em;color:#222;
line-height:1.45}
h1{margin-bottom:.2em}h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:2.2em}
table{border-collapse:collapse;margin:.8em 0}td,th{border:1px solid #ccc;padding:.3em .7em;text-align:left}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
img{max-width:100%;border:1px solid #eee;margin:.5em 0}code{background:#f3f3f3;padding:0 .3em}
.note{color:#666;font-size:.92em}.missing{color:#a33}
nav.toc{background:#f7f7f7;border:1px solid #ddd;padding:.6em 1.2em;display:inline-block}
nav.toc ol{margin:.3em 0 0;padding-left:1.4em;columns:2;column-gap:3em}
details>summary{cursor:pointer;color:#555}
figure{margin:1em 0}figcaption{color:#555;font-size:.92em}
"""
STYLE += VIEW_STYLE + "\n" + COMPARISON_STYLE  # the attention views and the comparison section (report --compare)


class Report:
    """An HTML page built section by section; a failing section becomes a note, not a crash."""

    def __init__(self, figure_dir: Path | None = None):
        self.sections: list[tuple[str, str, str]] = []  # (anchor, title, html)
        self.figure_dir = figure_dir
        self.problems: list[str] = []

    def section(self, anchor: str, title: str, build: Callable[[], str]) -> None:
        """Add the section ``build`` makes, or a note of why it failed. A full disk is not the section's
        failure: it stops the page at once (the command says so in one line), as nothing more can be saved."""
        try:
            body = build()
        except Exception as exc:  # one analysis failing must not lose the rest of the report
            if isinstance(exc, OSError) and exc.errno in FULL:
                raise
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            self.problems.append(f"{title}: {detail}")
            body = render("missing.html", detail=detail)
        self.sections.append((anchor, title, body))

    def figure(self, fig_and_data, name: str, caption: str) -> str:
        """Embed a (figure, data) pair; also save it as PNG + CSV under figure_dir. A figure already written
        (an analysis's ``figures/`` file) is embedded as those bytes, not encoded again."""
        fig, data = fig_and_data
        png = getattr(fig, "written_png", None) or png_bytes(fig)
        if self.figure_dir is not None:
            self.figure_dir.mkdir(parents=True, exist_ok=True)
            (self.figure_dir / f"{name}.png").write_bytes(png)
            if data is not None:
                data.to_csv(self.figure_dir / f"{name}.csv", index=False)
        return render("figure.html", name=name, uri=data_uri(png), caption=Markup(caption))

    def render(self, title: str, subtitle: str, banner: str = "") -> str:
        """The page: title, subtitle, ``banner`` (HTML, e.g. a stalled run's warning), contents, sections."""
        body = render("report.html", title=title, subtitle=Markup(subtitle), banner=Markup(banner),
                      sections=[(anchor, name, Markup(content)) for anchor, name, content in self.sections])
        return offline_page(title, body, STYLE)
