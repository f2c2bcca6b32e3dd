"""Figures a paper would print: no "-0.00" cells, axis labels that say what is plotted, and an
ablation heatmap that shows only the ablations that change something (issue 29)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from compose_lens.registry.attention.figure import view_figure
from compose_lens.registry.ablation.figure import ablation_figure
from compose_lens.registry.dla.figure import logit_attribution_figure
from compose_lens.registry.early_jump.figure import early_jump_figure
from compose_lens.registry.fourier.figure import best_neurons_figure, fourier_neuron_figure
from compose_lens.registry.qk.figure import qk_heatmaps_figure
from compose_lens.registry.circuit.figure import EDGE_CMAP, circuit_figure
from compose_lens.registry.patching.figure import patching_figure
from compose_lens.registry.same_mlp.figure import cosine_histograms_figure, same_mlp_figure
from compose_lens.views.drawing import OKABE_ITO, png_bytes
from compose_lens.views.training import PHASE_STYLE
from compose_lens.registry.dynamics.figure import (POOL_GROUPS, _measure_unit, dynamics_figure,
                                                   progress_measures_figure, refinement_figure)


def _cell_texts(fig):
    return [t for t in fig.axes[0].texts]


def test_patching_cells_that_round_to_zero_print_without_a_sign():
    table = pd.DataFrame({"component": ["resid_pre"] * 3 + ["attn_out"] * 3, "head": -1,
                          "block": [0] * 3 + [1] * 3, "role": ["queried value", "PAD", "="] * 2,
                          "mean": [1.0, -0.0004, -1e-9, -0.003, 0.2, -0.5]})
    fig, _ = patching_figure(table, "t")
    texts = [t.get_text() for t in _cell_texts(fig)]
    assert "-0.00" not in texts and texts.count("0.00") == 3 and "-0.50" in texts
    assert len(fig.axes) == 2  # the colour bar is kept
    assert min(t.get_fontsize() for t in _cell_texts(fig)) >= 8


def test_the_patching_colour_bar_spans_the_data_not_minus_one_to_one():
    """Normalised patching runs from 0 (the corrupted run) to 1 (the clean one): the bar shows from the least
    value to 1 (issue 43: it showed -1 to 1, half of it for values no cell has), with 0 still white."""
    table = pd.DataFrame({"component": ["attn_out"] * 3, "head": -1, "block": [1] * 3,
                          "role": ["queried value", "PAD", "="], "mean": [0.97, -0.02, 0.4]})
    fig, _ = patching_figure(table, "t")
    low, high = fig.axes[1].get_ylim()
    assert low == pytest.approx(-0.02) and high == pytest.approx(1.0)
    image = fig.axes[0].images[0]
    assert image.norm.vmin == -image.norm.vmax  # diverging about 0: a zero cell is white
    plt.close(fig)


def test_the_weakest_edge_colour_stays_visible_on_white():
    """The circuit graph's weakest |score| colour has a luminance well below the page's white (issue 43:
    viridis's pale yellow end, luminance 0.9, vanished)."""
    def luminance(rgba):
        r, g, b = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in rgba[:3])
        return 0.2126 * r + 0.7152 * g + 0.0722 * b

    contrast = (1.0 + 0.05) / (luminance(EDGE_CMAP(0.0)) + 0.05)  # WCAG contrast against white
    assert contrast >= 2.0, contrast


def test_a_count_is_labelled_a_count():
    assert _measure_unit("n_key_frequencies") == "count"
    assert _measure_unit("equals_to_values_mass") == "attention weight"
    assert _measure_unit("prev_token_weight_score") == "score"


def _ablation_table(drops: dict[tuple[str, int], float], baseline: float = 0.95) -> pd.DataFrame:
    pools = ["0var_train", "2var_train"]
    rows = [{"target": target, "block": 1, "index": index, "kind": "zero", "pool": pool,
             "baseline_accuracy": baseline, "accuracy": baseline - drop * (i + 1) / 2,
             "accuracy_drop": drop * (i + 1) / 2} for (target, index), drop in drops.items()
            for i, pool in enumerate(pools)]
    return pd.DataFrame(rows)


def test_ablation_shows_only_the_rows_that_change_beyond_their_noise_and_says_so():
    """500 sequences a pool: a drop of 0.04 on a 0.95 baseline is beyond its 95 % interval (a fixed 0.05 cut
    hid it), 0.01 is not; a negative change counts too; a drawn cell within its noise is hatched."""
    table = _ablation_table({("mlp", -1): 0.9, ("head", 0): -0.04, ("frequency_neurons", 3): 0.04,
                             ("fourier_directions", 3): 0.01})
    fig, shown = ablation_figure(table, 500)
    assert sorted(set(shown["target"])) == ["frequency_neurons", "head", "mlp"]
    ax = fig.axes[0]
    assert len(ax.get_yticklabels()) == 3
    assert "1 of 4 ablations left out: no drop beyond its 95 % interval" in ax.get_title()
    assert "500 sequences each" in ax.get_title()
    assert len(ax.texts) == 3 * 2  # the values printed in the cells
    hatched = [p for p in ax.patches if p.get_hatch()]
    assert len(hatched) == 2  # the head's -0.02 and the k = 3 neurons' 0.02 on 0var_train: within their noise
    assert min(t.get_fontsize() for t in [*ax.texts, *ax.get_yticklabels(), *ax.get_xticklabels()]) >= 8


def test_ablation_with_nothing_beyond_its_noise_draws_every_row():
    table = _ablation_table({("frequency_neurons", 3): 0.01, ("fourier_directions", 3): 0.02})
    fig, shown = ablation_figure(table, 500)
    assert len(fig.axes[0].get_yticklabels()) == 2 and "left out" not in fig.axes[0].get_title()


# -- as the report shows them --------------------------------------------------------------------

REPORT_COLUMN_PX = 1218  # the report's body (1,250 px) less its padding: a wider PNG is shrunk to fit
ALLOWED = {c.lower() for c in OKABE_ITO} | {"#999999", "#bbbbbb", "#666666", "#000000", "black"} | {
    c.lower() for c, _ in PHASE_STYLE.values()}


def _shown(fig) -> tuple[int, int, float]:
    """(width px, height px, smallest font in pt) of the figure as the report embeds it (110 dpi PNG,
    never shrunk while it fits the column)."""
    from io import BytesIO

    import matplotlib.text
    from PIL import Image

    fig.canvas.draw()
    sizes = [t.get_fontsize() for t in fig.findobj(matplotlib.text.Text) if t.get_visible() and t.get_text().strip()]
    width, height = Image.open(BytesIO(png_bytes(fig, dpi=110))).size
    return width, height, min(sizes)


def assert_readable_in_the_report(fig) -> tuple[int, int]:
    width, height, smallest = _shown(fig)
    assert width <= REPORT_COLUMN_PX, f"{width} px wide: the report shrinks it and its labels"
    assert smallest >= 8, f"a {smallest} pt label"
    return width, height


def _colorbars(fig) -> int:
    return sum(1 for ax in fig.axes if getattr(ax, "_colorbar", None) is not None)


def _best_neurons(n: int = 11, p: int = 11) -> list[dict]:
    rng = np.random.default_rng(0)
    return [{"neuron": i, "frequency": i + 1, "ideal_correlation": 0.9, "fraction_explained": 0.8,
             "pattern": rng.random((p, p)) * (i + 1), "ideal": rng.random((p, p))} for i in range(n)]


def test_best_neurons_is_one_compact_grid_with_one_colour_bar():
    fig, data = best_neurons_figure(_best_neurons())
    assert _colorbars(fig) == 1  # was one per panel: 22
    _, height = assert_readable_in_the_report(fig)
    assert height < 1200  # was 3,739 px for the paper model's 11 key frequencies
    # each panel is divided by its neuron's maximum, so the one scale (0 to 1) fits them all
    assert data.groupby("neuron")["max_activation"].first().tolist() == pytest.approx(
        [float(np.max(n["pattern"])) for n in _best_neurons()])


def _same_mlp_report() -> dict:
    def bars(conditions, kinds, **extra):
        return [{"condition": c, "kind": k, "value": 0.9, "ci_low": 0.85, "ci_high": 0.95, "chance": 0.02,
                 "not_shared_prediction": 0.02, **extra} for c, k in zip(conditions, kinds)]

    interchange = (bars(["const->var1", "const->const", "random-token donor const->var1"], ["cross", "same", "control"],
                        side="left", isolation="token")
                   + bars(["const->random-token receiver, whole MLP2 input"], ["reference"], side="both",
                          isolation="none"))
    conditions, kinds = ["held-out constants", "1-var left", "2-var"], ["same", "cross", "cross"]
    probe = (bars(conditions, kinds, test="probe", metric="value decoded")
             + bars(conditions, kinds, test="subspace", metric="variance share"))
    return {"tables": {"interchange": interchange, "probe": probe,
                       "damage_profiles": [{"const": 0.1 * i, "1-var": 0.1 * i, "2-var": 0.09 * i} for i in range(9)]},
            "isolation": "token", "verdict": "supported",
            "tests": {"interchange": {"status": "passed"}, "feature_transfer": {"status": "passed"},
                      "probe_transfer": {"status": "passed", "probe": {"passed": True}, "subspace": {"passed": False}}}}


def test_same_mlp_panels_name_each_measure_once_and_no_legend_covers_a_bar():
    fig, _ = same_mlp_figure(_same_mlp_report())
    assert_readable_in_the_report(fig)  # was 1,769 px wide with 7 pt labels: about 5 pt in the report
    bar_axes = [ax for ax in fig.axes if any(type(p).__name__ == "Rectangle" for p in ax.patches)]
    assert len(bar_axes) == 3  # interchange, probe accuracy, variance share: each measure its own axis
    for ax in bar_axes:
        labels = [t.get_text() for t in ax.get_yticklabels()]
        assert len(labels) == len(set(labels)), labels  # the probe panel listed every condition twice
        assert ax.get_legend() is None  # the legend sits under the panels, over no bar
    units = sorted(ax.get_xlabel() for ax in bar_axes)
    assert units == ["accuracy", "accuracy", "share of the variance"]  # a variance share is not "accuracy"
    assert "3b" in " ".join(ax.get_title() for ax in bar_axes) and "not passed" in bar_axes[2].get_title()
    assert fig.legends and any('"not shared" prediction' in t.get_text() for t in fig.legends[0].get_texts())


def _edge_table(positions: bool) -> pd.DataFrame:
    from compose_lens.registry.circuit.discovery import build_graph
    from compose_lens.core.config import ModelConfig

    graph = build_graph(ModelConfig(), positions)
    scores = np.linspace(-0.05, 0.3, len(graph.edges))
    return pd.DataFrame({"sender": [e.sender for e in graph.edges], "receiver": [e.receiver for e in graph.edges],
                         "position": [e.position for e in graph.edges], "score": scores,
                         "in_circuit": np.abs(scores) > 0.01})


@pytest.mark.parametrize("positions", [False, True])
def test_circuit_graph_names_components_and_its_arrows_end_on_their_nodes(positions):
    table = _edge_table(positions)
    assert len(table) == (121 if positions else 16)
    fig, _ = circuit_figure(table, "t")
    assert_readable_in_the_report(fig)
    assert _colorbars(fig) == 1  # the edge-score scale
    ax = fig.axes[0]
    texts = [t.get_text().replace("\n", " ") for t in ax.texts]
    assert any("layer 1 (blocks.0) attention" in t for t in texts) and any("layer 2 (blocks.1) MLP" in t for t in texts)
    assert not {"a0.h0", "a1.h0", "m1", "embed"} & set(texts)
    boxes = {p.get_gid()[5:]: p for p in ax.patches if (p.get_gid() or "").startswith("node ")}
    arrows = [p for p in ax.patches if (p.get_gid() or "").startswith("edge ")]
    assert len(arrows) == len(table)
    fig.canvas.draw()
    for arrow in arrows:
        edge, position = arrow.get_gid()[5:].rsplit("@", 1)
        receiver = edge.split("->")[1]
        node = receiver[:-2] if receiver[-2:] in (".q", ".k", ".v") else receiver
        box = boxes[f"{node}@{position}"]
        tip = ax.transData.transform(arrow.get_path().vertices)  # in pixels
        x = tip[:, 0].max()  # left to right: the arrowhead's point is its rightmost vertex
        y = tip[tip[:, 0].argmax(), 1]
        (left, bottom), (_, top) = ax.transData.transform([(box.get_x(), box.get_y()),
                                                           (box.get_x(), box.get_y() + box.get_height())])
        # matplotlib pulls the head's path back so that its mitred outline ends on the point: by
        # lw / (2 sin 26.6 deg) = 1.12 lw for "-|>"; the old arrows stopped 0.08 units (~13 px) short
        stroke = arrow.get_linewidth() * fig.dpi / 72
        assert left - 1.15 * stroke - 0.5 <= x <= left + 0.5, arrow.get_gid()  # touches the box's left edge
        assert bottom <= y <= top


def test_circuit_graph_by_position_draws_every_position():
    plain = circuit_figure(_edge_table(False), "t")[0]
    by_position = circuit_figure(_edge_table(True), "t")[0]

    def nodes(fig):
        return [p for p in fig.axes[0].patches if (p.get_gid() or "").startswith("node ")]

    assert len(nodes(plain)) == 5  # embed, two attention layers, one MLP, logits
    assert len(nodes(by_position)) > 3 * 16  # each position's embed and both attention layers at least
    labels = [t.get_text() for t in by_position.axes[0].texts]
    assert "position 0" in labels and "position 15 (=)" in labels


def _dynamics(stalled: bool = False) -> tuple[pd.DataFrame, dict]:
    steps = np.arange(0, 3000, 100)
    rise = lambda at: 1 / (1 + np.exp(-(steps - at) / 100))  # noqa: E731
    table = pd.DataFrame({"step": steps, **{pool: rise(500 + 100 * i) for i, pool in enumerate(
        [p for pools in POOL_GROUPS.values() for p in pools])}})
    for v in "abcdefkl":
        table[f"equals_score_{v}"] = rise(800) - (v in "ak")
    for slot in ("left_k", "right_a"):
        for count in ("1var", "2var"):
            table[f"slot_{count}_{slot}"] = rise(2000)
    phases = {"addition": {"step": 500}, "assignment": {"step": 900}, "refinement": {"step": None}}
    outcome = {"outcome": "stalled" if stalled else "generalised", "why": "routing never formed" if stalled else "ok"}
    return table, {"phases": phases, "outcome": outcome}


def test_late_refinement_lines_are_told_apart_by_colour_blind_safe_colours():
    table, doc = _dynamics()
    fig, _ = refinement_figure(table, list("abcdefkl"), ("k", "a"), doc["phases"])
    assert_readable_in_the_report(fig)
    from matplotlib.colors import to_hex

    for ax in fig.axes:
        assert {to_hex(line.get_color()) for line in ax.get_lines()} <= ALLOWED
    # one legend for both panels (test_figures_issue43): each variable with a forbidden slot its own colour
    entries = [(to_hex(h.get_color()), t.get_text()) for h, t in zip(fig.legends[0].legend_handles,
                                                                      fig.legends[0].get_texts())]
    forbidden = [c for c, text in entries if "never the" in text]
    assert len(forbidden) == len(set(forbidden)) == 2


def test_cosine_histograms_are_small_multiples_of_outlines():
    rng = np.random.default_rng(0)
    groups = {f"{kind}, {side} variable": rng.normal(0.9 if kind == "matched" else 0, 0.1, 200)
              for side in ("left", "right") for kind in ("matched", "mismatched")}
    fig, data = cosine_histograms_figure(groups)
    assert_readable_in_the_report(fig)
    assert [ax.get_title() for ax in fig.axes] == ["left variable", "right variable"]  # was one panel of four
    for ax in fig.axes:
        assert len(ax.patches) == 2 and not any(p.get_fill() for p in ax.patches)  # outlines, not filled bars
        assert len(ax.get_legend().get_texts()) == 2
    assert len(data) == 800


def test_an_empty_cosine_group_is_said_in_the_legend_without_a_numpy_warning():
    """A modulus-2 model gives no mismatched pair on a side: ``report`` printed numpy's "Mean of
    empty slice" and "invalid value" warnings four times (issue #30). Any warning fails here."""
    import warnings

    groups = {"matched, left variable": np.linspace(0.5, 1.0, 20), "mismatched, left variable": np.array([])}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig, data = cosine_histograms_figure(groups)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == ["matched (mean 0.75, n = 20)", "mismatched (no such prompts, n = 0)"]
    assert len(data) == 20


@pytest.mark.parametrize("stalled", [False, True])
def test_dynamics_figure_names_the_outcome_and_marks_the_onsets(stalled):
    table, doc = _dynamics(stalled)
    fig, data = dynamics_figure(table, doc)
    assert_readable_in_the_report(fig)
    title = fig._suptitle
    assert ("stalled (routing never formed)" if stalled else "generalised") in title.get_text()
    assert (title.get_color() == OKABE_ITO[3]) == stalled  # a stall shows in vermillion
    onsets = [t.get_text() for t in fig.legends[0].get_texts()]
    assert onsets == ["addition onset (500)", "assignment onset (900)"]  # refinement not reached
    assert list(data.columns)[:2] == ["step", "0var_train"]


def test_logit_attribution_figure_fits_the_report():
    components = ["token embedding", "layer 1 (blocks.0) head 0", "layer 2 (blocks.1) MLP"]
    table = pd.DataFrame([{"kind": k, "component": c, "share": s} for k in ("0var", "2var")
                          for c, s in zip(components, (0.0, 0.1, 0.9))])
    lens = pd.DataFrame([{"kind": k, "after": a, "order": i, "accuracy": i / 2} for k in ("0var", "2var")
                         for i, a in enumerate(["embeddings", "layer 1 (blocks.0) attention",
                                                "layer 2 (blocks.1) MLP"])])
    fig, _ = logit_attribution_figure(table, lens)
    assert_readable_in_the_report(fig)
    assert sorted(t.get_text() for t in fig.axes[0].texts) == ["0.10", "0.10", "0.90", "0.90"]


def test_progress_measures_fit_the_report():
    from compose_lens.registry.probes.summary import MEASURE_KEYS

    table = pd.DataFrame({"step": [0, 100, 200], **{m: [0.1, 0.5, 0.9] for m in MEASURE_KEYS}})
    fig, _ = progress_measures_figure(table, {"addition": {"step": 100}})
    assert_readable_in_the_report(fig)  # was 16 in wide: shrunk to about 6 pt in the report
    assert sum(ax.get_xlabel() == "training step" for ax in fig.axes) == len(MEASURE_KEYS)  # every panel


# -- the report's attention, QK, jump, Fourier, patching and ablation sections at the study's size --

STUDY_TOKENS = ["PAD", "PAD", "g", "50", "k", "39", "h", "56", "i", "29", "j", "14", "+", "3", "h", "="]
STUDY_VARIABLES = list("abcdefghijkl")


def _causal(n: int, rng) -> np.ndarray:
    m = np.tril(rng.random((n, n)))
    return m / m.sum(1, keepdims=True)


def _study_section_figure(section: str):
    """The figure of one of the six sections as the report draws it on the study's model (p = 59,
    16 tokens, 12 variables, 9 pools, 27 ablation rows)."""
    from compose_lens.registry.fourier.features import FourierNeuron

    rng = np.random.default_rng(0)
    n = len(STUDY_TOKENS)
    view = {"patterns": __import__("torch").tensor(np.stack([_causal(n, rng), _causal(n, rng)])[:, None]),
            "words": STUDY_TOKENS, "marks": {0: [(15, 13, "operand")], 1: [(15, 3, "value")]},
            "text": "g=50, k=39, h=56, i=29, j=14, 3+h=?", "answer": 59 % 59, "correct": True, "label": 0}
    state = lambda step, scale: {"step": step, "pattern0": _causal(n, rng), "tokens": STUDY_TOKENS,  # noqa: E731
                                 "identity": rng.normal(0, scale, (12, 12)), "accuracy": 0.6}
    grid = np.abs(rng.normal(size=(59, 59)))
    neuron = FourierNeuron(217, 2, 0.92, 0.976, grid, grid, [2, 11])
    roles = ["queried var", "queried value", "distractor var", "distractor value", "PAD", "+", "left operand",
             "right operand", "="]
    patching = pd.DataFrame([{"component": c, "head": 0 if c == "z" else -1, "block": b, "role": r,
                              "mean": rng.random(), "clean_logit_diff": 9.0}
                             for b in (0, 1) for c in ("resid_pre", "z", "attn_out", "resid_mid", "mlp_out")
                             for r in roles])
    drops = {("head", 0): 0.9, ("mlp", -1): 0.95, **{(kind, k): 0.1 for k in (1, 2, 4, 5, 11, 15, 19, 20, 22, 27)
                                                      for kind in ("frequency_neurons", "fourier_directions")}}
    ablation = _ablation_table(drops)
    ablation = pd.concat([ablation.assign(pool=pool) for pool in
                          ["0var_train", "0var_add_restricted", "1var_train", "1var_add_restricted",
                           "1var_var_restricted", "2var_train", "2var_add_restricted", "2var_var_restricted_1",
                           "2var_var_restricted_2"]])
    draw = {"attention": lambda: view_figure(view),
            "qk": lambda: qk_heatmaps_figure(rng.normal(size=(12, 12)), rng.normal(size=(12, 12)),
                                                   STUDY_VARIABLES),
            "jump": lambda: early_jump_figure(state(5201, 2.0), state(5601, 4.0), STUDY_VARIABLES),
            "fourier": lambda: fourier_neuron_figure(neuron),
            "patching": lambda: patching_figure(patching, "activation patching, value corrupted (300 pairs)"),
            "ablation": lambda: ablation_figure(ablation, 500)}
    plt.close("all")
    return draw[section]()


@pytest.mark.parametrize("section", ["attention", "qk", "jump", "fourier", "patching", "ablation"])
def test_the_report_sections_figures_are_readable_at_the_size_shown(section):
    """At 110 dpi in the report's 1,218 px column: at most that wide (a wider PNG is shrunk, and its
    labels with it: attention, QK, jump and ablation were 1,271 to 1,310 px, their ticks 7 pt) and
    no label under 8 pt."""
    fig, _ = _study_section_figure(section)
    assert_readable_in_the_report(fig)


def test_the_jump_compares_before_and_after_on_one_scale_and_names_the_layers():
    fig, _ = _study_section_figure("jump")
    identity = [ax for ax in fig.axes if "variable identity" in ax.get_title()]
    assert len(identity) == 2
    limits = {ax.images[0].get_clim() for ax in identity}
    assert len(limits) == 1, limits  # the "after" panel's colours mean what the "before" panel's do
    titles = " ".join(ax.get_title() for ax in fig.axes)
    assert "layer 1 (blocks.0)" in titles and "layer 2 (blocks.1)" in titles


def test_the_qk_panels_are_named_in_words_not_matrix_products():
    fig, _ = _study_section_figure("qk")
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles[0].startswith("layer 1 (blocks.0)") and titles[1].startswith("layer 2 (blocks.1)")
    assert not any("QK1" in t or "E_var" in t for t in titles), titles
