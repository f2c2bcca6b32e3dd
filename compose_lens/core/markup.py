"""HTML, from one place: every page and table compose-lens writes is a jinja2 template.

The templates sit in ``compose_lens/templates/`` (package data): ``page.html``, the one skeleton of
every offline page, and the pieces pages are made of. :func:`render` fills one and escapes every value,
so a path or a sequence with ``<`` or ``&`` in it shows as text; only what is already HTML is passed
as :class:`~markupsafe.Markup`. This module sits below both the registry and the report, so both write
their tables with :func:`html_table`.

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


# circuitsvis places each head's <h4> label on top of its thumbnail, where a wide name covers the pattern:
# set in the flow above it, it wraps within the tile and covers nothing
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


# the two-model tables (compose_lens.report.compare.html_tables, in compare.html and the report), narrow enough
# for a 1,200 px window (tests/unit/test_compare.py measures it): values and intervals on one line, the words
# wrapped, the changed rows highlighted, the rows that differ with no interval to say greyed
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
