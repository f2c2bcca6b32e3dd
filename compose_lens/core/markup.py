"""HTML, from one place: every page and table compose-lens writes is a jinja2 template.

The templates sit in ``compose_lens/templates/`` (package data): ``page.html``, the one skeleton of
every offline page (the report, ``compare.html``, ``circuit.html``, the attention views), and the
pieces pages are made of (``table.html``, ``report.html``, ``figure.html``, ``comparison.html``,
...). :func:`render` fills one; the environment escapes every value (autoescape), so a model's path,
a sequence or an error message with ``<`` or ``&`` in it shows as text, and only what is already HTML
(a rendered piece, a stylesheet, the circuitsvis bundle) is passed as :class:`~markupsafe.Markup`.
This module is below both the registry and the report, so the registry's declared sections
(:mod:`compose_lens.registry`) and the report's own sections (:mod:`compose_lens.report`) write their
tables with :func:`html_table` without the registry needing anything of the report.
:data:`COMPARISON_STYLE` is the look of a two-model table (:func:`compose_lens.report.compare.html_tables`),
in ``compare.html`` and in the report's comparison section alike.

>>> html_table([["prev_token_attention_score", 0.98765], ["steps", 1800.0], ["restricted loss", 7.9e-10]],
...            ["measure", "value"])
'<table><tr><th>measure</th><th>value</th></tr><tr><td>prev_token_attention_score</td><td class="num">0.9877</td></tr><tr><td>steps</td><td class="num">1800</td></tr><tr><td>restricted loss</td><td class="num">7.90e-10</td></tr></table>'
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jinja2
from markupsafe import Markup

from compose_lens.core.errors import ComposeLensError


def _cell(value) -> Markup:
    """One ``<td>``: a float right-aligned at the digits it needs, an integer right-aligned, Markup as the HTML
    it is, anything else as text."""
    if isinstance(value, float):
        # a count kept as a float (1800.0) reads as the count, a measure to four places, and one too small
        # for four places (a restricted loss of 7.9e-10) in powers of ten rather than as 0.0000
        text = (f"{value:.0f}" if value.is_integer() and abs(value) < 1e15
                else f"{value:.2e}" if 0 < abs(value) < 5e-5 else f"{value:.4f}")
        return Markup('<td class="num">{}</td>').format(text)
    if isinstance(value, int) and not isinstance(value, bool):  # a count: right-aligned like the numbers
        return Markup('<td class="num">{}</td>').format(value)
    return Markup("<td>{}</td>").format(value if isinstance(value, Markup) else str(value))  # Markup: already HTML


TEMPLATES = jinja2.Environment(loader=jinja2.PackageLoader("compose_lens", "templates"), autoescape=True,
                               undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
TEMPLATES.filters["cell"] = _cell


def render(template: str, **values) -> str:
    """``compose_lens/templates/<template>`` filled with ``values`` (each escaped unless it is Markup: pass
    HTML as ``Markup(text)``). A plain string: adding one to another never escapes either."""
    return TEMPLATES.get_template(template).render(**values)


def page(title: str, body: str, style: str = "", script: str = "") -> str:
    """A complete offline HTML page: ``title`` (text), ``body`` (HTML), its stylesheet and (``script``)
    one inline script in the head. The one page skeleton of compose-lens (``page.html``)."""
    return render("page.html", title=title, body=Markup(body), style=Markup(style), script=Markup(script))


# circuitsvis labels each head's thumbnail with an absolutely placed <h4> on top of it: a name such as
# "layer 1 (blocks.0)" is wider than the thumbnail, so it covered the pattern and ran off the tile's
# left edge. Set above the thumbnail, in the flow, it wraps within the tile's width and covers nothing.
VIEW_STYLE = (".attention-view h4{position:static!important;display:block;font-size:12px;line-height:1.25}"
              ".attention-scale{font-size:12px;color:#444;display:flex;align-items:center;gap:6px;margin:2px 0 14px}"
              ".attention-scale .bar{display:inline-block;width:160px;height:10px;border:1px solid #999;"
              "background:linear-gradient(to right,#ffffff,#0000ff)}")  # circuitsvis: white to pure blue

def circuitsvis_bundle() -> str:
    """The circuitsvis browser bundle from the installed package (found, not imported), safe to inline."""
    spec = importlib.util.find_spec("circuitsvis")
    path = Path(spec.origin).parent / "dist" / "cdn" / "iife.js" if spec and spec.origin else None
    if path is None or not path.exists():
        raise ComposeLensError(f"{path or 'circuitsvis'}: the circuitsvis package has no browser bundle; "
                               f"reinstall circuitsvis==1.43.3")
    source = path.read_text(encoding="utf-8")
    lines = [line for line in source.splitlines() if not line.startswith("//# sourceMappingURL")]
    return "\n".join(lines).replace("</script", "<\\/script")


def offline_page(title: str, body: str, style: str = "") -> str:
    """A complete HTML page with the circuitsvis bundle inlined once in the head."""
    return page(title, body, style, script=circuitsvis_bundle())


def html_table(rows: list[list], header: list[str], row_classes: list[str | None] | None = None) -> str:
    """A plain ``<table>``: the header, then one row per list; floats right-aligned (class ``num``).
    ``row_classes``: a CSS class for each row (None: none), for a page's style to mark rows by.

    >>> html_table([["a", 1.0]], ["x", "y"], row_classes=["changed"])
    '<table><tr><th>x</th><th>y</th></tr><tr class="changed"><td>a</td><td class="num">1</td></tr></table>'
    """
    classes = [None] * len(rows) if row_classes is None else row_classes
    if len(classes) != len(rows):
        raise ValueError(f"{len(classes)} row classes for {len(rows)} rows")
    return render("table.html", header=header, rows=list(zip(rows, classes)))


# the two-model tables inside <div class="comparison"> (compose_lens.report.compare.html_tables), narrow enough for
# compare.html's 1,200 px page and the report's 1,250 px column at a 1,200 px window (the findings table, with
# its "what it measures" column, was 1,316 px in a 1,137 px box and hid "changed" behind a scrollbar;
# tests/unit/test_compare.py measures it in Chromium): the values and intervals kept on one line, the words
# (measure, what it measures, how the interval was had) wrapped, a long measure name after its underscores,
# the changed rows highlighted, the rows that differ with no interval to say greyed
COMPARISON_STYLE = """
.comparison{overflow-x:auto}
.comparison table{font-size:.92em}
.comparison td,.comparison th{padding:.25em .5em}
.comparison td:nth-last-child(3),.comparison td:nth-last-child(4),.comparison td:nth-last-child(5){white-space:nowrap}
.comparison td:first-child{min-width:9em}
.comparison td:nth-last-child(6):not(:first-child){min-width:10em}
.comparison td:nth-last-child(2){min-width:7em}
.comparison tr.changed{background:#ffe3b3}
.comparison tr.changed td:last-child{font-weight:700;color:#8a3b00}
.comparison tr.unsure{background:#eeeeee}
.comparison tr.unsure td:last-child{font-style:italic}
.comparison .key span{padding:1px 6px;margin-right:8px}
"""
