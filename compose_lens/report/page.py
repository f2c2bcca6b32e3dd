"""The offline HTML page: circuitsvis views inlined, figures as data URIs, sections that fail softly.

**Offline.** circuitsvis's own HTML imports its JavaScript from a CDN (unpkg), so
it shows nothing without a network. The installed package ships the same
bundle, ``circuitsvis/dist/cdn/iife.js``, which defines a global
``CircuitsVis``. :func:`offline_page` inlines that bundle *once* in a classic
``<script>`` and each view is a ``<div>`` plus a one-line
``CircuitsVis.render(id, CircuitsVis.AttentionHeads, props)`` call
(:func:`attention_view`), so a page with many views stays one self-contained
file that opens from disk.

In a notebook, :func:`notebook_view` wraps one view with the bundle in an object
Jupyter shows as HTML (``_repr_html_``): plain ``circuitsvis.attention`` output is blank
offline, this is not.

:class:`Report` builds a page section by section: a section whose analysis fails
becomes a note on the page instead of stopping the report, and every figure is
embedded as a base64 ``data:`` URI (and saved as PNG + CSV beside the page).
"""

from __future__ import annotations

import html
import json
import traceback
import uuid
from pathlib import Path
from typing import Callable, Sequence

import torch

from compose_lens.errors import ComposeLensError
from compose_lens.markup import COMPARISON_STYLE
from compose_lens.plots import data_uri, png_bytes

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
# circuitsvis labels each head's thumbnail with an absolutely placed <h4> on top of it: a name such as
# "layer 1 (blocks.0)" is wider than the thumbnail, so it covered the pattern and ran off the tile's
# left edge. Set above the thumbnail, in the flow, it wraps within the tile's width and covers nothing.
VIEW_STYLE = ".attention-view h4{position:static!important;display:block;font-size:12px;line-height:1.25}"
STYLE += VIEW_STYLE + "\n" + COMPARISON_STYLE  # the comparison section (report --compare)


PAGE_STYLE = ("body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;color:#222}"
              "code{background:#f3f3f3;padding:0 .3em}h2{margin-top:2em}" + VIEW_STYLE)


def circuitsvis_bundle() -> str:
    """The circuitsvis browser bundle from the installed package, safe to inline."""
    import circuitsvis  # only for its file location: the bundle is read, not the Python package used

    path = Path(circuitsvis.__file__).parent / "dist" / "cdn" / "iife.js"
    if not path.exists():
        raise ComposeLensError(f"{path}: the circuitsvis package has no browser bundle; "
                               f"reinstall circuitsvis==1.43.3")
    source = path.read_text(encoding="utf-8")
    lines = [line for line in source.splitlines() if not line.startswith("//# sourceMappingURL")]
    return "\n".join(lines).replace("</script", "<\\/script")


def attention_view(patterns: torch.Tensor, tokens: Sequence[str], head_names: Sequence[str],
                   element_id: str | None = None, focus: int = 0) -> str:
    """One interactive ``AttentionHeads`` view: a div and the call that draws into it.

    ``patterns`` (heads, n, n); needs the bundle of :func:`offline_page` on the page. ``focus``: the
    head the view opens on (its index in ``head_names``). circuitsvis always opens on the first head
    and takes no option for it, so a small script clicks the thumbnail named ``head_names[focus]``
    once the view is drawn (a click locks a head, as a reader's would).
    """
    element_id = element_id or f"circuits-vis-{uuid.uuid4().hex[:12]}"
    props = {"attention": [[[round(float(v), 5) for v in row] for row in head] for head in patterns.tolist()],
             "tokens": list(tokens), "attentionHeadNames": list(head_names), "maskUpperTri": True}
    payload = json.dumps(props).replace("</", "<\\/")
    opener = ""
    if focus:
        name = json.dumps(str(head_names[focus])).replace("</", "<\\/")
        opener = (f'<script>(function () {{ var view = document.getElementById("{element_id}"), tries = 0;'
                  f" function open() {{ var names = view.querySelectorAll('h4');"
                  f" for (var i = 0; i < names.length; i++) {{ if (names[i].textContent === {name}) {{"
                  f" names[i].click(); return; }} }} if (++tries < 200) {{ setTimeout(open, 25); }} }}"
                  f" open(); }})();</script>")
    return (f'<div id="{element_id}" class="attention-view" style="margin: 15px 0;"></div>\n'
            f'<script>CircuitsVis.render("{element_id}", CircuitsVis.AttentionHeads, {payload});</script>'
            + opener)


def offline_page(title: str, body: str, style: str = "") -> str:
    """A complete HTML page with the circuitsvis bundle inlined once in the head."""
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{html.escape(title)}</title>\n<style>{style}</style>\n"
            f"<script>\n{circuitsvis_bundle()}\n</script>\n</head>\n<body>\n{body}\n</body>\n</html>\n")


def view_html(view: dict, focus: int = 0) -> str:
    """A heading and the interactive view for one entry of :func:`sequence_views`, opened on head
    ``focus`` (an index into ``view["head_names"]``: the report opens on the router's)."""
    p = view["patterns"]
    flat = p.reshape(-1, p.shape[-2], p.shape[-1])
    verdict = "correct" if view["correct"] else "wrong"
    return (f"<h3><code>{html.escape(view['text'])}</code></h3>\n"
            f"<p>model answers <b>{view['answer']}</b>, the label is {view['label']} ({verdict}); "
            f"type {view['type']}. Tokens: <code>{html.escape(' '.join(view['words']))}</code></p>\n"
            + attention_view(flat, [f"{w}" for w in view["words"]], view["head_names"], focus=focus))


class OfflineHTML:
    """HTML with the circuitsvis bundle inlined, shown by Jupyter as it is (no network needed)."""

    def __init__(self, body: str):
        self.body = body

    def _repr_html_(self) -> str:
        return f"<script>\n{circuitsvis_bundle()}\n</script>\n{self.body}"

    def save(self, path: str | Path) -> Path:
        """Write the view as a complete offline page."""
        Path(path).write_text(offline_page("compose-lens attention", self.body, PAGE_STYLE), encoding="utf-8")
        return Path(path)


def notebook_view(view: dict) -> OfflineHTML:
    """One entry of :func:`compose_lens.analysis.attention.sequence_views`, ready to display offline."""
    return OfflineHTML(view_html(view))


class Report:
    """An HTML page built section by section; a failing section becomes a note, not a crash."""

    def __init__(self, figure_dir: Path | None = None):
        self.sections: list[tuple[str, str, str]] = []  # (anchor, title, html)
        self.figure_dir = figure_dir
        self.problems: list[str] = []

    def section(self, anchor: str, title: str, build: Callable[[], str]) -> None:
        try:
            body = build()
        except Exception as exc:  # one analysis failing must not lose the rest of the report
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            self.problems.append(f"{title}: {detail}")
            body = f'<p class="missing">This section could not be made: {html.escape(detail)}</p>'
        self.sections.append((anchor, title, body))

    def figure(self, fig_and_data, name: str, caption: str) -> str:
        """Embed a (figure, data) pair; also save it as PNG + CSV under figure_dir (one render)."""
        fig, data = fig_and_data
        png = png_bytes(fig)
        if self.figure_dir is not None:
            self.figure_dir.mkdir(parents=True, exist_ok=True)
            (self.figure_dir / f"{name}.png").write_bytes(png)
            if data is not None:
                data.to_csv(self.figure_dir / f"{name}.csv", index=False)
        return (f'<figure><img alt="{html.escape(name)}" src="{data_uri(png)}">'
                f"<figcaption>{caption}</figcaption></figure>")

    def render(self, title: str, subtitle: str, banner: str = "") -> str:
        """The page: title, subtitle, ``banner`` (HTML, e.g. a stalled run's warning), contents, sections."""
        items = "".join(f'<li><a href="#{a}">{html.escape(t)}</a></li>' for a, t, _ in self.sections)
        toc = f'<nav class="toc"><b>Contents</b><ol>{items}</ol></nav>'
        body = [f"<h1>{html.escape(title)}</h1><p class=\"note\">{subtitle}</p>{banner}{toc}"]
        for anchor, title_, content in self.sections:
            body.append(f'<h2 id="{anchor}">{html.escape(title_)}</h2>\n{content}')
        return offline_page(title, "\n".join(body), STYLE)
