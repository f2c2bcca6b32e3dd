"""The found circuit as a graph: :func:`circuit_layout` places the edges of
:func:`compose_lens.registry.circuit.discovery.edge_table` (a column per component depth, a row per head or
position), :func:`circuit_figure` draws the PNG, and :mod:`compose_lens.registry.circuit.page` the same layout
as an interactive page, components named in the study's words (:func:`component_name`).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.cm import ScalarMappable
from matplotlib.colors import ListedColormap, PowerNorm
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from compose_lens.views.drawing import REPORT_WIDTH_IN, layer_name, metric_words, subplots


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
# edge of a circuit stays visible on the white page; colour-blind safe
EDGE_CMAP = ListedColormap(colormaps["viridis_r"](np.linspace(0.35, 1.0, 256)), name="edge_score")
EDGE_GAMMA = 0.5  # square-root colour scale: the many edges near 0.03 stay visible beside 0.3


EDGE_CLEARANCE = 0.08  # data units an edge keeps from a box it passes over (circuit graph)


@dataclass(frozen=True)
class CircuitLayout:
    """Where the circuit graph puts each component and each edge, in data units: one column per
    component depth (:func:`_node_depth`), x = the column's index; y = the head's place in its
    layer (whole graph, 1.4 units apart) or minus the position's row (by position). Both
    :func:`circuit_figure` (the PNG) and :mod:`compose_lens.registry.circuit.page` (the interactive HTML
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
        (:data:`EDGE_CLEARANCE`), over them (under them into a ``v`` port)."""
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
    """The layout of :func:`compose_lens.registry.circuit.discovery.edge_table`'s edges (see
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
    """The found circuit as a graph at :func:`circuit_layout`'s places, and the edges drawn.

    Without positions each component is one box, an attention box taking q, k and v at three ports
    on its left edge (q top); with positions each row is one position and every (component, position)
    an edge touches is a small box. Edge colour is |score| on a square-root scale (colour bar, which
    names the ``metric``); edges of the found circuit are solid (dash-dotted where the score is
    negative), the others grey and dashed."""
    layout = circuit_layout(table)
    edges, by_position, several, nodes = layout.edges, layout.by_position, layout.several, layout.nodes
    columns, positions, width, height = layout.columns, layout.positions, layout.width, layout.height
    tallest = max(sum(1 for n in nodes if _node_depth(n) == d) for d in columns)
    fig_h = (0.3 * len(positions) + 2.0) if by_position else 1.2 * tallest + 1.9
    fig, ax = subplots(figsize=(min(REPORT_WIDTH_IN, 1.9 * len(columns) + 2.2), fig_h))
    norm, cmap = layout.colour_scale(), EDGE_CMAP
    lim = norm.vmax  # read before the colorbar, which may rewrite it (all-NaN scores)
    boxes = {}
    for node, position in layout.boxes():
        x, y = layout.centre(node, position)
        ax.add_patch(FancyBboxPatch((x - width / 2, y - height / 2), width, height,
                                    boxstyle="round,pad=0,rounding_size=0.05", facecolor="white", edgecolor="#555555",
                                    lw=0.8, zorder=3, gid=f"node {node}@{position}"))
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
