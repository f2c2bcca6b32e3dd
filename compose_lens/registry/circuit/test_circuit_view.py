"""The circuit graph as an interactive page (compose_lens.registry.circuit.page): one offline file holding
every edge with its score, its boxes where the PNG puts them, and a threshold slider that hides the
edges below it (checked in headless Chromium, skipped where it is not installed)."""

from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from compose_lens.registry.circuit.figure import circuit_figure, receiver_node
from compose_lens.registry.circuit.discovery import build_graph
from compose_lens.registry.circuit.page import circuit_page
from compose_lens.core.config import ModelConfig
from compose_lens.core.stats import format_estimate

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (make test installs it)")
EXTERNAL = re.compile(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", re.I)
TWO_HEADS = ModelConfig(n_layers=3, d_model=16, d_head=4, n_heads=2, d_mlp=8, n_ctx=6, d_vocab=10, d_vocab_out=7,
                        mlp_blocks=(0, 2))


def edge_table(config: ModelConfig, positions: bool, seed: int = 0) -> pd.DataFrame:
    """Every edge of the model's graph, with distinct scores of both signs."""
    graph = build_graph(config, positions)
    rng = np.random.default_rng(seed)
    scores = rng.permutation(np.linspace(-0.1, 0.4, len(graph.edges)))
    return pd.DataFrame({"sender": [e.sender for e in graph.edges], "receiver": [e.receiver for e in graph.edges],
                         "position": [e.position for e in graph.edges], "score": scores,
                         "in_circuit": np.abs(scores) > 0.05})


class Elements(HTMLParser):
    """The attributes of the page's edges (``g.edge``) and boxes (``g.node``), by name."""

    def __init__(self, text: str):
        super().__init__()
        self.edges: dict[str, dict] = {}
        self.nodes: dict[str, dict] = {}
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "g" and a.get("class") == "edge":
            self.edges[a["data-edge"]] = a
        elif tag == "g" and (a.get("class") or "").split()[:1] == ["node"]:
            self.nodes[a["data-box"]] = a


def names(table: pd.DataFrame) -> list[str]:
    return [f"{s}->{r}@{p}" for s, r, p in zip(table["sender"], table["receiver"], table["position"])]


CASES = [(ModelConfig(), False), (ModelConfig(), True), (TWO_HEADS, False)]


@pytest.mark.parametrize("config, positions", CASES)
def test_the_page_is_one_offline_file(config, positions):
    page = circuit_page(edge_table(config, positions), "t")[0]
    assert not EXTERNAL.search(page), EXTERNAL.search(page)
    assert "<link" not in page and not re.search(r"<script[^>]*\bsrc", page) and "@import" not in page
    assert page.count("<script>") == 1 and page.count("<svg") == 4  # the graph and the legend's 3 samples


@pytest.mark.parametrize("config, positions", CASES)
def test_every_edge_is_on_the_page_with_its_score(config, positions):
    table = edge_table(config, positions)
    found = Elements(circuit_page(table, "t")[0]).edges
    assert sorted(found) == sorted(names(table))
    for name, score, mine in zip(names(table), table["score"], table["in_circuit"]):
        edge = found[name]
        assert float(edge["data-score"]) == score and float(edge["data-abs"]) == abs(score)
        assert edge["data-in-circuit"] == str(bool(mine)).lower()
        assert f"score {format_estimate(score, significant=3)}\n" in edge["data-tip"]
        assert ("in the found circuit" if mine else "left out of the circuit") in edge["data-tip"]


def test_a_component_tells_its_edges_in_and_out():
    table = edge_table(ModelConfig(), False)
    nodes = Elements(circuit_page(table, "t")[0]).nodes
    into = table[table["receiver"] == "m1"]
    tip = nodes["m1@-1"]["data-tip"]
    assert tip.startswith("layer 2 (blocks.1) MLP (m1)\n")
    assert (f"in: {len(into)} edges ({int(into['in_circuit'].sum())} in the circuit), summed score "
            f"{format_estimate(into['score'].sum(), significant=3)}") in tip


def test_an_interval_in_the_table_goes_into_the_tip():
    table = edge_table(ModelConfig(), False).assign(ci_low=lambda t: t["score"] - 0.02,
                                                    ci_high=lambda t: t["score"] + 0.03)
    found = Elements(circuit_page(table, "t")[0]).edges
    for name, row in zip(names(table), table.itertuples()):
        edge = found[name]
        assert f"score {format_estimate(row.score, row.ci_low, row.ci_high)} (95 % interval)" in edge["data-tip"]
        assert float(edge["data-low"]) == row.ci_low and float(edge["data-high"]) == row.ci_high


@pytest.mark.parametrize("config, positions", CASES)
def test_the_boxes_sit_where_the_png_puts_them(config, positions):
    """The page's boxes are the PNG's boxes moved and scaled (one scale per axis, y flipped):
    both come from circuit_layout."""
    table = edge_table(config, positions)
    fig, _ = circuit_figure(table, "t")
    drawn = {p.get_gid()[5:]: (p.get_x() + p.get_width() / 2, p.get_y() + p.get_height() / 2)
             for p in fig.axes[0].patches if (p.get_gid() or "").startswith("node ")}
    nodes = Elements(circuit_page(table, "t")[0]).nodes
    assert sorted(nodes) == sorted(drawn)
    boxes = sorted(drawn)
    for axis, sign in ((0, 1), (1, -1)):
        png = np.array([drawn[b][axis] for b in boxes])
        html = np.array([float(nodes[b][("data-x", "data-y")[axis]]) for b in boxes])
        if np.ptp(png) == 0:  # one head a layer, whole graph: one row
            assert np.ptp(html) == 0
            continue
        slope, offset = np.polyfit(png, html, 1)
        assert np.sign(slope) == sign and np.abs(slope * png + offset - html).max() < 0.1


def render(page: str, tmp_path, fragment: str = "", then: str = "") -> str:
    """The DOM after the page's scripts ran (and ``then``, a script run after them), networking off."""
    path = tmp_path / "circuit.html"
    path.write_text(page.replace("</body>", f"<script>{then}</script></body>") if then else page, encoding="utf-8")
    profile = tmp_path / "profile"
    profile.mkdir(exist_ok=True)
    done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           f"--user-data-dir={profile}", "--host-resolver-rules=MAP * ~NOTFOUND",
                           "--proxy-server=127.0.0.1:9", "--dump-dom", path.as_uri() + fragment],
                          capture_output=True, text=True, timeout=120)
    assert "<g class" in done.stdout, done.stderr[-500:]
    return done.stdout


def hidden(dom: str) -> set[str]:
    edges = Elements(dom).edges
    assert all(e.get("data-hidden") in ("true", "false") for e in edges.values()), "the script never ran"
    return {name for name, e in edges.items() if e["data-hidden"] == "true" and "display: none" in e.get("style", "")}


@needs_chromium
@pytest.mark.parametrize("positions", [False, True])
def test_the_threshold_hides_the_edges_below_it(tmp_path, positions):
    table = edge_table(ModelConfig(), positions)
    page = circuit_page(table, "t")[0]
    size = table["score"].abs()
    assert hidden(render(page, tmp_path)) == set()  # opens with every edge
    threshold = float(size.median())
    dom = render(page, tmp_path, f"#threshold={threshold}")
    below = {n for n, s in zip(names(table), size) if s < threshold}
    assert hidden(dom) == below and 0 < len(below) < len(table)
    assert f"{len(table) - len(below)} of {len(table)} edges shown" in dom
    # the slider: 0.9 of the way along the colour bar's square-root scale is 0.81 of the largest |score|
    dom = render(page, tmp_path, then="var s = document.querySelector('input.threshold'); s.value = s.max * 0.9; "
                                      "s.dispatchEvent(new Event('input'));")
    assert hidden(dom) == {n for n, s in zip(names(table), size) if s < size.max() * 0.9 * 0.9}
    # a box none of whose edges is left fades
    shown = table[[n not in hidden(dom) for n in names(table)]]
    live = {f"{s}@{p}" for s, p in zip(shown["sender"], shown["position"])} | {
        f"{receiver_node(r)[0]}@{p}" for r, p in zip(shown["receiver"], shown["position"])}
    faded = {box for box, a in Elements(dom).nodes.items() if "idle" in a["class"].split()}
    assert faded == set(Elements(dom).nodes) - live and (faded or not positions)


def test_the_circuit_command_writes_the_page_beside_the_png(tmp_path, capsys):
    from compose_lens.cli import main

    out = tmp_path / "c"
    assert main(["circuit", "paper", "--n-pairs", "30", "--out", str(out), "--quiet"]) == 0
    assert "figures/circuit.html" in capsys.readouterr().out
    table = pd.read_csv(out / "circuit.csv")
    page = (out / "figures" / "circuit.html").read_text()
    assert (out / "figures" / "circuit.png").exists() and not EXTERNAL.search(page)
    found = Elements(page).edges
    assert sorted(found) == sorted(names(table))
    assert all(float(found[n]["data-score"]) == pytest.approx(s, abs=1e-12) for n, s in zip(names(table), table["score"]))


def test_the_report_section_folds_the_view_in():
    from compose_lens import registry
    from compose_lens.report import context
    from compose_lens.report.page import Report
    from compose_lens.training.subject import load_subject

    circuit = registry.by_name(registry.ANALYSES, "circuit")
    settings = circuit.with_settings({"n_pairs": 30})
    with context.Context(load_subject("paper", bridge=False), 0) as ctx:
        result = context.compute(circuit, ctx, settings)
    assert {stem for stem, *_, dpi in result.figures if dpi is None} == {"circuit.html"}
    section = circuit.section(SimpleNamespace(report=Report()), result, settings)
    view = section[section.index("<details>"):section.index("</details>")]
    assert sorted(Elements(view).edges) == sorted(names(result.tables["circuit"]))


@needs_chromium
def test_hovering_an_edge_shows_its_score(tmp_path):
    table = edge_table(ModelConfig(), False)
    strongest = names(table)[int(table["score"].abs().argmax())]
    dom = render(circuit_page(table, "t")[0], tmp_path, then=(
        f"var e = document.querySelector('g.edge[data-edge=\"{strongest}\"] path.line');"
        "e.dispatchEvent(new MouseEvent('mousemove', {bubbles: true, clientX: 5, clientY: 5}));"))
    tip = re.search(r'<div class="tip" style="([^"]*)">([^<]*)</div>', dom)
    assert tip and "display: block" in tip.group(1)
    score = table["score"].iloc[int(table["score"].abs().argmax())]
    assert tip.group(2).startswith(strongest.split("@")[0].replace(">", "&gt;"))
    assert f"score {format_estimate(score, significant=3)}" in tip.group(2)


def test_the_circuit_figures_edges_pass_over_the_boxes_they_skip():
    """No drawn edge of the paper model's circuit graph crosses a box other than its sender's and receiver's
    (a fixed bend ran 11 of them through the boxes between: embeddings into layer 2, into the MLP, into the
    logits)."""
    from pathlib import Path

    import matplotlib.patches as patches
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    table = pd.read_csv(Path(__file__).resolve().parents[3] / "experiments" / "results" / "circuit" / "eap_ig_paper"
                        / "circuit.csv")
    fig, _ = circuit_figure(table, "eap-ig")
    FigureCanvasAgg(fig).draw()
    ax = fig.axes[0]
    boxes = {p.get_gid().split()[1].split("@")[0]: p.get_window_extent() for p in ax.patches
             if isinstance(p, patches.FancyBboxPatch)}
    crossed = []
    for arrow in (p for p in ax.patches if isinstance(p, patches.FancyArrowPatch)):
        sender, receiver = arrow.get_gid().split()[1].split("@")[0].split("->")
        ends = {sender, receiver_node(receiver)[0]}
        points = ax.transData.transform(arrow.get_path().interpolated(50).vertices)
        for node, box in boxes.items():
            inside = ((points[:, 0] > box.x0 + 1) & (points[:, 0] < box.x1 - 1) & (points[:, 1] > box.y0 + 1)
                      & (points[:, 1] < box.y1 - 1))
            if node not in ends and inside.any():
                crossed.append(f"{sender}->{receiver} through {node}")
    assert len(boxes) == 5 and crossed == []
