"""The found circuit as an interactive page (``circuit.html``, beside ``circuit.png``): hover for scores,
a slider for the threshold, one offline file (SVG, style and a few lines of JavaScript inline).

* **the same picture** as :func:`compose_lens.registry.circuit.figure.circuit_figure`: the places of
  :func:`~compose_lens.registry.circuit.figure.circuit_layout`, the PNG's colours, and each edge bent as
  matplotlib's ``arc3`` bends it (a quadratic Bezier curve, control point ``rad`` times the chord's
  length off its midpoint at right angles), which SVG's ``Q`` command draws.
* **hover** an edge: its score, with its 95 % interval where the table has one (``ci_low``,
  ``ci_high``), and whether it is in the found circuit; a component: its edges in and out, how many
  are in the circuit, their summed score.
* **the threshold slider** hides every edge whose |score| is below the threshold (a component left
  with none fades). It runs on the colour bar's square-root scale, under it, so its thumb points at
  the colour of the weakest edge still shown; the page opens at the threshold in its address's
  fragment (``circuit.html#threshold=0.05``).

:func:`circuit_view` is the view as an HTML fragment (the report's circuit section folds it in);
:func:`circuit_page` the whole page, with the fragment it holds.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import textwrap

import numpy as np
import pandas as pd
from matplotlib.colors import to_hex

from compose_lens.core.markup import page, render
from compose_lens.core.stats import format_estimate
from compose_lens.registry.circuit.figure import (EDGE_CMAP, PORT_OFFSET, CircuitLayout, circuit_layout,
                                                  component_name, receiver_node)
from compose_lens.views.drawing import metric_words

LEFT_OUT = "#bbbbbb"  # the PNG's grey for an edge left out of the circuit
SCALE = {False: (200.0, 100.0), True: (200.0, 34.0)}  # px per data unit (x, y): whole graph, by position
STROKE = {False: 2.6, True: 1.5}  # px: an edge of the circuit (one left out: 1)
HEAD = {False: (9.0, 4.5), True: (6.0, 3.0)}  # arrowhead length and half width, px
SLIDER_STEPS = 1000  # the slider's positions along the colour bar

STYLE = """
.circuit-view{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;font-size:13px;color:#222}
.circuit-view .title{font-weight:600;margin:4px 0}
.circuit-view svg{display:block;max-width:100%;height:auto}
.circuit-view .node rect{fill:#fff;stroke:#555;stroke-width:1}
.circuit-view .node text{font-size:11px;fill:#222;pointer-events:none}
.circuit-view .node.idle{opacity:.3}
.circuit-view .node:hover rect{stroke:#000;stroke-width:2}
.circuit-view .edge .hit{stroke:transparent;fill:none}
.circuit-view .edge:hover .line{stroke-width:4px}
.circuit-view .label{font-size:11px;fill:#333}
.circuit-view .controls{display:grid;grid-template-columns:max-content 320px max-content;gap:2px 10px;
  align-items:center;margin:6px 0}
.circuit-view .bar{height:12px;border:1px solid #888}
.circuit-view .ticks{display:flex;justify-content:space-between;font-size:11px;color:#444}
.circuit-view input[type=range]{width:320px;margin:0}
.circuit-view .legend{font-size:12px;color:#333}
.circuit-view .legend svg{display:inline;vertical-align:middle}
.circuit-view .tip{position:fixed;display:none;background:#fffff0;border:1px solid #999;padding:4px 6px;
  font-size:12px;white-space:pre-line;pointer-events:none;z-index:10;max-width:360px}
"""

# the view's behaviour, one instance per view: ROOT is the view's element id
SCRIPT = """
(function () {
  var root = document.getElementById(ROOT);
  var slider = root.querySelector("input.threshold"), shown = root.querySelector(".shown");
  var edges = Array.prototype.slice.call(root.querySelectorAll("g.edge"));
  var nodes = Array.prototype.slice.call(root.querySelectorAll("g.node"));
  var vmax = parseFloat(root.getAttribute("data-vmax")), steps = parseFloat(slider.max);
  function apply(threshold) {
    var live = {}, kept = 0, inCircuit = 0, circuit = 0;
    edges.forEach(function (e) {
      var on = parseFloat(e.getAttribute("data-abs")) >= threshold;
      var mine = e.getAttribute("data-in-circuit") === "true";
      e.style.display = on ? "" : "none";
      e.setAttribute("data-hidden", on ? "false" : "true");
      if (mine) { circuit += 1; }
      if (on) {
        kept += 1; if (mine) { inCircuit += 1; }
        live[e.getAttribute("data-from")] = true; live[e.getAttribute("data-to")] = true;
      }
    });
    nodes.forEach(function (n) { n.classList.toggle("idle", !live[n.getAttribute("data-box")]); });
    root.setAttribute("data-threshold", threshold);
    shown.textContent = "|score| \\u2265 " + threshold.toPrecision(3) + ": " + kept + " of " + edges.length +
      " edges shown, " + inCircuit + " of the circuit's " + circuit;
  }
  slider.addEventListener("input", function () {
    var f = slider.value / steps; apply(vmax * f * f);  // the colour bar's square-root scale
  });
  var asked = /threshold=([0-9.eE+-]+)/.exec(location.hash);
  var start = asked ? parseFloat(asked[1]) : 0;
  if (!(start > 0)) { start = 0; }  // none, negative or not a number: every edge
  slider.value = Math.round(steps * Math.sqrt(Math.min(start, vmax) / vmax));
  apply(start);
  var tip = root.querySelector(".tip");
  root.addEventListener("mousemove", function (ev) {
    var t = ev.target.closest ? ev.target.closest("[data-tip]") : null;
    if (!t || !root.contains(t)) { tip.style.display = "none"; return; }
    tip.textContent = t.getAttribute("data-tip");
    tip.style.display = "block";
    tip.style.left = (ev.clientX + 14) + "px"; tip.style.top = (ev.clientY + 14) + "px";
  });
  root.addEventListener("mouseleave", function () { tip.style.display = "none"; });
})();
"""


def _attrs(**values) -> str:
    return " ".join(f'{k.replace("_", "-")}="{html.escape(str(v), quote=True)}"' for k, v in values.items())


def _box_name(node: str, position: int) -> str:
    return f"{node}@{position}"


def _place(name: str, position: int) -> str:
    return name if position < 0 else f"{name} at position {position}"


def _score_words(row) -> str:
    low, high = getattr(row, "ci_low", None), getattr(row, "ci_high", None)
    if low is not None and high is not None and not (math.isnan(low) or math.isnan(high)):
        return f"{format_estimate(row.score, low, high)} (95 % interval)"
    return format_estimate(row.score, significant=3)


def _bezier(start, end, rad: float) -> tuple[tuple, tuple, tuple]:
    """(start, control, end) of matplotlib's ``arc3`` curve between two points (in pixels)."""
    (x0, y0), (x1, y1) = start, end
    # arc3 in display space, whose y points up; in the page's pixels y points down
    control = ((x0 + x1) / 2 - rad * (y1 - y0), (y0 + y1) / 2 + rad * (x1 - x0))
    return start, control, end


def _arrow(start, control, end, length: float, half: float) -> tuple[str, str]:
    """The curve's path, stopped at the arrowhead's base, and the head's polygon points."""
    dx, dy = end[0] - control[0], end[1] - control[1]
    if math.hypot(dx, dy) < 1e-9:
        dx, dy = end[0] - start[0], end[1] - start[1]
    norm = math.hypot(dx, dy) or 1.0
    ux, uy = dx / norm, dy / norm
    base = (end[0] - length * ux, end[1] - length * uy)
    path = f"M{start[0]:.1f},{start[1]:.1f} Q{control[0]:.1f},{control[1]:.1f} {base[0]:.1f},{base[1]:.1f}"
    head = [end, (base[0] - half * uy, base[1] + half * ux), (base[0] + half * uy, base[1] - half * ux)]
    return path, " ".join(f"{x:.1f},{y:.1f}" for x, y in head)


def _colour_bar(vmax: float, scale: str) -> str:
    stops = ", ".join(to_hex(EDGE_CMAP(f)) for f in np.linspace(0, 1, 11))
    ticks = "".join(f"<span>{format_estimate(vmax * f * f, significant=2)}</span>" for f in (0, 0.25, 0.5, 0.75, 1))
    return (f'<span>{html.escape(scale)}</span><div><div class="bar" style="background:linear-gradient(to right, '
            f'{stops})"></div><div class="ticks">{ticks}</div></div><span></span>')


def _legend(by_position: bool) -> str:
    strong = to_hex(EDGE_CMAP(1.0))

    def sample(colour: str, dash: str, width: float) -> str:
        return (f'<svg width="34" height="10"><line x1="1" y1="5" x2="33" y2="5" stroke="{colour}" '
                f'stroke-width="{width}" stroke-dasharray="{dash}"/></svg>')

    parts = [sample(strong, "none", 2.5) + " in the found circuit",
             sample(strong, "7 3 1.5 3", 2.5) + " in it, negative score",
             sample(LEFT_OUT, "4 3", 1) + " left out",
             "attention inputs: q upper, k middle, v lower" if by_position
             else "attention takes q, k and v at three ports on its left edge"]
    return '<div class="legend">' + " &nbsp; ".join(parts) + "</div>"


class _Drawing:
    """The SVG of one layout: data units to the page's pixels (y down), and each element's markup."""

    def __init__(self, layout: CircuitLayout):
        self.layout = layout
        self.sx, self.sy = SCALE[layout.by_position]
        self.places = {box: layout.centre(*box) for box in layout.boxes()}
        xs = [x for x, _ in self.places.values()]
        ys = [y for _, y in self.places.values()]
        self.x_range, self.y_range = (min(xs) - 0.55, max(xs) + 0.55), (min(ys) - 0.6, max(ys) + 0.6)
        self.left, self.top = (120.0, 64.0) if layout.by_position else (20.0, 20.0)
        self.w, self.h = layout.width * self.sx, layout.height * self.sy
        self.norm = layout.colour_scale()
        self.low, self.high = 0.0, self.px((0, self.y_range[0]))[1]  # y extent, bent edges included

    def px(self, point) -> tuple[float, float]:
        return (self.left + (point[0] - self.x_range[0]) * self.sx,
                self.top + (self.y_range[1] - point[1]) * self.sy)

    def edge(self, row) -> str:
        layout = self.layout
        start, end, rad = layout.edge_path(row.sender, row.receiver, row.position, aspect=self.sy / self.sx)
        curve = _bezier(self.px(start), self.px(end), rad)
        path, head = _arrow(*curve, *HEAD[layout.by_position])
        bend = [(1 - t) ** 2 * curve[0][1] + 2 * (1 - t) * t * curve[1][1] + t ** 2 * curve[2][1]
                for t in (0.25, 0.5, 0.75)]
        self.low, self.high = min(self.low, *(y - 6 for y in bend)), max(self.high, *(y + 6 for y in bend))
        colour = to_hex(EDGE_CMAP(self.norm(abs(row.score)))) if row.in_circuit else LEFT_OUT
        stroke = STROKE[layout.by_position] if row.in_circuit else 1.0
        dash = ("none" if row.score >= 0 else "7 3 1.5 3") if row.in_circuit else "4 3"
        target = receiver_node(row.receiver)[0]
        name = f"{row.sender}->{row.receiver}"
        port = "" if target == row.receiver else f" ({row.receiver[-1]})"
        tip = (f"{_place(name, row.position)}\n{component_name(row.sender, layout.several)} -> "
               f"{component_name(target, layout.several)}{port}\nscore {_score_words(row)}\n"
               + ("in the found circuit" if row.in_circuit else "left out of the circuit"))
        interval = {}
        if "ci_low" in layout.edges and "ci_high" in layout.edges:
            interval = {"data_low": repr(float(row.ci_low)), "data_high": repr(float(row.ci_high))}
        marks = _attrs(data_edge=_box_name(name, row.position), data_score=repr(float(row.score)),
                       data_abs=repr(abs(float(row.score))), data_in_circuit=str(bool(row.in_circuit)).lower(),
                       data_from=_box_name(row.sender, row.position), data_to=_box_name(target, row.position),
                       data_tip=tip, **interval)
        return (f'<g class="edge" {marks}><path class="hit" d="{path}" stroke-width="9"/>'
                f'<path class="line" d="{path}" fill="none" stroke="{colour}" stroke-width="{stroke}" '
                f'stroke-dasharray="{dash}"/><polygon points="{head}" fill="{colour}"/></g>')

    def node(self, node: str, position: int, tip: str) -> str:
        cx, cy = self.px(self.places[(node, position)])
        w, h = self.w, self.h
        marks = _attrs(data_box=_box_name(node, position), data_x=f"{cx:.1f}", data_y=f"{cy:.1f}", data_tip=tip)
        parts = [f'<g class="node" {marks}>'
                 f'<rect x="{cx - w / 2:.1f}" y="{cy - h / 2:.1f}" width="{w:.1f}" height="{h:.1f}" rx="5"/>']
        if not self.layout.by_position:  # named in the box, as in the PNG; by position, atop each column
            lines = textwrap.wrap(component_name(node, self.layout.several), 14)
            for i, line in enumerate(lines):
                y = cy + (i - (len(lines) - 1) / 2) * 13 + 4
                parts.append(f'<text x="{cx + 6:.1f}" y="{y:.1f}" text-anchor="middle">{html.escape(line)}</text>')
            if node.startswith("a"):
                for port, offset in PORT_OFFSET.items():
                    if port:
                        parts.append(f'<text x="{cx - w / 2 + 4:.1f}" y="{cy - offset * h + 4:.1f}" '
                                     f'font-weight="bold">{port}</text>')
        return "".join(parts) + "</g>"

    def labels(self) -> list[str]:
        """By position: each row's position at its left, each column's component atop it."""
        layout = self.layout
        if not layout.by_position:
            return []
        out = []
        for p in layout.positions:
            x, y = self.px((self.x_range[0] + 0.23, layout.row(p)))
            out.append(f'<text class="label" x="{x:.1f}" y="{y + 4:.1f}" text-anchor="end">'
                       f'position {p}{" (=)" if p == max(layout.positions) else ""}</text>')
        for i, depth in enumerate(layout.columns):
            x, y = self.px((i, self.y_range[1] - 0.6))
            lines = textwrap.wrap(layout.column_name(depth), 16)
            for j, line in enumerate(lines):
                out.append(f'<text class="label" x="{x:.1f}" y="{y - self.h / 2 - 8 - 13 * (len(lines) - 1 - j):.1f}" '
                           f'text-anchor="middle">{html.escape(line)}</text>')
        return out

    def svg(self, title: str) -> str:
        layout = self.layout
        edges = [self.edge(row) for row in layout.drawing_order().itertuples()]  # faint first, strongest on top
        flows: dict[tuple, dict] = {box: {"in": [], "out": []} for box in self.places}
        for row in layout.edges.itertuples():
            flows[(row.sender, row.position)]["out"].append(row)
            flows[(receiver_node(row.receiver)[0], row.position)]["in"].append(row)
        nodes = []
        for node, position in self.places:
            words = component_name(node, layout.several)
            tip = "\n".join([_place(words, position) + (f" ({node})" if node != words else ""),
                              _flow_words(flows[(node, position)]["in"], "in"),
                              _flow_words(flows[(node, position)]["out"], "out")])
            nodes.append(self.node(node, position, tip))
        width = self.px((self.x_range[1], 0))[0] + 10
        return (f'<svg viewBox="0 {self.low:.0f} {width:.0f} {self.high - self.low:.0f}" width="{width:.0f}" '
                f'height="{self.high - self.low:.0f}" role="img" aria-label="{html.escape(title, quote=True)}">'
                + "".join(edges + nodes + self.labels()) + "</svg>")


def _flow_words(rows: list, way: str) -> str:
    """A component's edges one way (in or out): how many, how many in the circuit, their summed score."""
    if not rows:
        return f"{way}: none"
    mine = sum(bool(r.in_circuit) for r in rows)
    return (f"{way}: {len(rows)} edge{'s' * (len(rows) != 1)} ({mine} in the circuit), "
            f"summed score {format_estimate(sum(r.score for r in rows), significant=3)}")


def circuit_view(table: pd.DataFrame, title: str, metric: str = "logit_diff") -> str:
    """The graph of :func:`compose_lens.registry.circuit.discovery.edge_table`'s edges as an HTML fragment
    (module doc); ``metric`` names what the scores are shares of, as the PNG's colour bar does."""
    layout = circuit_layout(table)
    drawing = _Drawing(layout)
    vmax = float(drawing.norm.vmax)
    digest = hashlib.sha1(pd.util.hash_pandas_object(layout.edges[["score"]], index=False).values.tobytes()
                          + title.encode()).hexdigest()[:10]
    root = f"circuit-view-{digest}"  # one id per view: a report may hold several
    scale = f"|edge score| (share of the {metric_words(metric)}; sqrt scale)"
    controls = (f'<div class="controls">{_colour_bar(vmax, scale)}'
                f'<label for="{root}-threshold">hide edges below</label>'
                f'<input type="range" class="threshold" id="{root}-threshold" min="0" max="{SLIDER_STEPS}" '
                f'step="1" value="0"><span class="shown"></span></div>')
    script = SCRIPT.replace("ROOT", json.dumps(root), 1)
    return (f'<div class="circuit-view" id="{root}" data-vmax="{vmax!r}" data-edges="{len(layout.edges)}">'
            f'<p class="title">{html.escape(title)}</p>{controls}{drawing.svg(title)}{_legend(layout.by_position)}'
            f'<div class="tip"></div><style>{STYLE}</style><script>{script}</script></div>')


def circuit_page(table: pd.DataFrame, title: str, metric: str = "logit_diff") -> tuple[str, str]:
    """:func:`circuit_view` as a whole offline page (what ``circuit.html`` holds), and the view itself."""
    view = circuit_view(table, title, metric)
    style = "body{font-family:system-ui,sans-serif;margin:16px}"
    return page(title, render("circuit_intro.html") + "\n" + view, style), view
