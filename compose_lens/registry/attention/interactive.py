"""Attention patterns as interactive circuitsvis views that open offline: one view, a page of them,
and a notebook cell, each made from :func:`compose_lens.registry.attention.sequences.sequence_views`
entries. Like :mod:`compose_lens.registry.circuit.page`, this module lays out and computes nothing.

circuitsvis's ``AttentionHeads`` widget draws each head's pattern as a thumbnail; a click enlarges one,
and hovering a token shows where it attends from (its row) and what attends to it (its column).

**Offline.** circuitsvis's own HTML imports its JavaScript from a CDN, so it shows nothing without a
network. The installed package ships the same bundle (``circuitsvis/dist/cdn/iife.js``, a global
``CircuitsVis``): :func:`compose_lens.core.markup.offline_page` inlines it *once*
(:func:`compose_lens.core.markup.circuitsvis_bundle`) and each view is a ``<div>`` plus a one-line
``CircuitsVis.render(id, CircuitsVis.AttentionHeads, props)`` call, so a page of many views stays one
self-contained file; the report puts its views on its page the same way. In a notebook,
:func:`notebook_view` wraps a view with the bundle (plain ``circuitsvis.attention`` output is blank offline).
"""

from __future__ import annotations

import html
import json
import uuid
from pathlib import Path
from typing import Sequence

import torch

from compose_lens.core.markup import VIEW_STYLE, circuitsvis_bundle, offline_page

# circuitsvis draws no colour scale: each view gets this one below it. A cell's colour goes from white
# (weight 0) to full colour (weight 1); the weights are a softmax row's, which sum to 1 over the positions.
SCALE = ('<div class="attention-scale"><span>attention weight</span><span>0</span><span class="bar"></span>'
         "<span>1</span><span>(white to full colour; each row, a query position, sums to 1)</span></div>")

# the style of a page of views alone (the report has its own, with VIEW_STYLE in it)
PAGE_STYLE = ("body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;color:#222}"
              "code{background:#f3f3f3;padding:0 .3em}h2{margin-top:2em}" + VIEW_STYLE)

PAGE_TITLE = "compose-lens attention"


def attention_view(patterns: torch.Tensor, tokens: Sequence[str], head_names: Sequence[str],
                   element_id: str | None = None, focus: int = 0) -> str:
    """One interactive ``AttentionHeads`` view of ``patterns`` (heads, n, n): a div and the call that draws
    into it (the page needs :func:`offline_page`'s bundle). circuitsvis always opens on the first head and
    takes no option for another, so for ``focus`` (an index into ``head_names``) a small script clicks that
    head's thumbnail once it is drawn, as a reader would."""
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


def view_html(view: dict, focus: int = 0) -> str:
    """A heading and the interactive view for one entry of
    :func:`compose_lens.registry.attention.sequences.sequence_views`, opened on head ``focus`` (an index into
    ``view["head_names"]``: the report opens on the router's)."""
    p = view["patterns"]
    flat = p.reshape(-1, p.shape[-2], p.shape[-1])
    verdict = "correct" if view["correct"] else "wrong"
    return (f"<h3><code>{html.escape(view['text'])}</code></h3>\n"
            f"<p>model answers <b>{view['answer']}</b>, the label is {view['label']} ({verdict}); "
            f"type {view['type']}. Tokens: <code>{html.escape(' '.join(view['words']))}</code></p>\n"
            + attention_view(flat, [f"{w}" for w in view["words"]], view["head_names"], focus=focus) + "\n" + SCALE)


def views_page(views: Sequence[dict], source: str = "") -> str:
    """The offline page of the ``attention`` command: a heading naming the model, one view per sequence."""
    body = [f"<h1>Attention views</h1><p>model: <code>{html.escape(source)}</code></p>",
            "<p>Click a head to enlarge it; hover a token to see where it attends.</p>"]
    body += [view_html(view) for view in views]
    return offline_page(PAGE_TITLE, "\n".join(body), PAGE_STYLE)


class OfflineHTML:
    """HTML with the circuitsvis bundle inlined, shown by Jupyter as it is (no network needed)."""

    def __init__(self, body: str):
        self.body = body

    def _repr_html_(self) -> str:
        return f"<script>\n{circuitsvis_bundle()}\n</script>\n{self.body}"

    def save(self, path: str | Path) -> Path:
        """Write the view as a complete offline page."""
        Path(path).write_text(offline_page(PAGE_TITLE, self.body, PAGE_STYLE), encoding="utf-8")
        return Path(path)


def notebook_view(view: dict) -> OfflineHTML:
    """One entry of :func:`compose_lens.registry.attention.sequences.sequence_views`, ready to display offline."""
    return OfflineHTML(view_html(view))
