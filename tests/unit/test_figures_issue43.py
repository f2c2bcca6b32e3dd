"""Issue 43's figure defects, each as a fact of the figure that was false before the fix: the pool
dynamics' dense window and sampling gaps, the progress measures' words and axes, the late refinement's
layer names and legend, the report's tables, the attention view's first layer, the Fourier shares'
remainder, the DLA's sign by pool and the modularity width figure."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from compose_lens.registry.dla.figure import logit_attribution_figure
from compose_lens.registry.early_jump.figure import early_jump_figure
from compose_lens.registry.fourier.figure import (embedding_fourier_figure, fourier_neuron_figure,
                                                  frequency_shares_figure, readout_fourier_figure)
from compose_lens.registry.gradient.figure import gradient_terms_figure
from compose_lens.registry.qk.figure import positional_qk_figure, qk_heatmaps_figure, variable_identity_figure
from compose_lens.views.drawing import layer_name, png_bytes
from compose_lens.registry.patching.figure import patching_figure
from compose_lens.views.sweeps import modularity_figure
from compose_lens.registry.dynamics.figure import (POOL_GROUPS, accuracy_by_variable_count_figure,
                                                   progress_measures_figure, refinement_figure, sampling_gaps)
from tests.unit.test_figures_for_print import assert_readable_in_the_report

# the study's checkpoint steps (../shared/reference): every 500 to 2,501, every 100 to 6,001, then sparse
STUDY_STEPS = ([1, 501, 1001, 1501, 2001] + list(range(2501, 6002, 100))
               + [7001, 8001, 9001, 10001, 12001, 14001, 14501, 15001, 15501, 16001, 18001, 20001, 25001, 30001])


def _study_dynamics() -> pd.DataFrame:
    steps = np.array(STUDY_STEPS)
    rise = lambda at: 1 / (1 + np.exp(-(steps - at) / 300))  # noqa: E731
    pools = [p for group in POOL_GROUPS.values() for p in group]
    return pd.DataFrame({"step": steps, **{pool: rise(3000 + 300 * i) for i, pool in enumerate(pools)}})


def _solid_lines(ax):
    return [line for line in ax.get_lines() if line.get_linestyle() not in ("None", ":", "--")
            and len(line.get_xdata()) > 1]


def test_pool_dynamics_enlarge_the_dense_window_and_break_lines_over_gaps():
    """On a linear axis to 30,000 steps the 36 checkpoints of 2,501-6,001 took 12 % of each panel
    (issue 43): a second row enlarges them. No solid line bridges 6,001 -> 7,001 (a stride of 100
    becoming 1,000: nothing was measured in between)."""
    fig, _ = accuracy_by_variable_count_figure(_study_dynamics(), {"addition": {"step": 3801}})
    assert len(fig.axes) == 6, "one row of three panels: the dense window squeezed"
    low, high = fig.axes[3].get_xlim()
    assert 2400 <= low <= 2501 and 6001 <= high <= 6100
    for ax in fig.axes[:3]:
        for line in _solid_lines(ax):
            x = np.asarray(line.get_xdata(), dtype=float)
            y = np.asarray(line.get_ydata(), dtype=float)
            joined = [(a, b) for a, b, ya, yb in zip(x, x[1:], y, y[1:]) if np.isfinite(ya) and np.isfinite(yb)]
            assert (6001, 7001) not in joined and (2001, 2501) not in joined, line.get_label()
    plt.close(fig)


def test_an_evenly_sampled_run_keeps_one_row_and_unbroken_lines():
    table = _study_dynamics().assign(step=np.arange(len(STUDY_STEPS)) * 100)
    fig, _ = accuracy_by_variable_count_figure(table)
    assert len(fig.axes) == 3
    assert all(np.isfinite(np.asarray(line.get_ydata(), dtype=float)).all() for line in _solid_lines(fig.axes[0]))
    assert not sampling_gaps(table["step"]).any()
    plt.close(fig)


def _progress_table() -> pd.DataFrame:
    from compose_lens.registry.probes.summary import MEASURE_KEYS

    steps = np.array(STUDY_STEPS[:12])
    table = pd.DataFrame({"step": steps, **{m: np.linspace(0.1, 0.9, len(steps)) for m in MEASURE_KEYS}})
    table["n_key_frequencies"] = np.minimum(np.arange(len(steps)), 10).astype(float)
    return table


def test_progress_measures_speak_words_and_every_panel_has_its_step_axis():
    from compose_lens.registry.probes.summary import MEASURE_KEYS

    fig, _ = progress_measures_figure(_progress_table(), {"addition": {"step": 2501}})
    drawn = [ax for ax in fig.axes if ax.get_lines()]
    assert len(drawn) == len(MEASURE_KEYS)
    titles = [ax.get_title() for ax in drawn]
    keys = [t for t in titles if "_" in t or t.replace(" ", "_") in MEASURE_KEYS]
    assert not keys, keys  # the titles were the measures' snake_case keys, "_" -> " "
    assert all(ax.get_xlabel() == "training step" for ax in drawn)  # was 4 of 16
    by_title = {ax.get_title().replace("\n", " "): ax for ax in drawn}
    restricted = [t for t in by_title if t.startswith("restricted loss")]
    excluded = [t for t in by_title if t.startswith("excluded loss")]
    assert len(restricted) == 1 and "key frequencies" in restricted[0]  # says what is kept
    assert len(excluded) == 2 and all("removed" in t for t in excluded)  # and what is taken out
    count = next(ax for t, ax in by_title.items() if "number of key frequencies" in t)
    assert count.get_ylabel() == "count"
    ticks = [t for t in count.get_yticks() if count.get_ylim()[0] <= t <= count.get_ylim()[1]]
    assert all(float(t).is_integer() for t in ticks), ticks  # whole numbers, not 2.5 frequencies
    others = {line.get_color() for ax in drawn if ax is not count for line in ax.get_lines()[:1]}
    assert count.get_lines()[0].get_color() not in others  # the count stands apart from the fractions
    plt.close(fig)


def _refinement_table() -> pd.DataFrame:
    steps = np.arange(0, 3000, 100)
    rise = lambda at: 1 / (1 + np.exp(-(steps - at) / 100))  # noqa: E731
    table = pd.DataFrame({"step": steps})
    for v in "abcdefghijkl":
        table[f"equals_score_{v}"] = rise(800) - (v in "abkl")
    for slot in ("left_k", "left_l", "right_a", "right_b"):
        for count in ("1var", "2var"):
            table[f"slot_{count}_{slot}"] = rise(2000)
    for pool in ("2var_var_restricted_1", "2var_var_restricted_2"):
        table[pool] = rise(2200)
    return table


def test_late_refinement_names_layers_as_the_study_does_with_one_grouped_legend():
    """"QK1" on the old left axis meant layer 1 (blocks.0), while ``qk1`` is layer 2 in the gradient
    table and docs/idealised.md: the figure now says layer 1 (blocks.0). Its eleven-plus legend entries
    shared colours (a colour per slot, repeated for 1-var and 2-var); now one legend gives each colour
    once (a variable) and each line style once."""
    from matplotlib.colors import to_hex

    fig, _ = refinement_figure(_refinement_table(), list("abcdefghijkl"), ("k", "l", "a", "b"),
                                     {"addition": {"step": 500}})
    words = [fig.axes[0].get_title(), fig.axes[0].get_ylabel(), fig.axes[1].get_ylabel()]
    assert not any("QK1" in w or "QK2" in w for w in words), words
    assert layer_name(0) in fig.axes[0].get_title()
    assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes)
    entries = fig.legends[0].legend_handles
    styles = [(to_hex(h.get_color()), h.get_linestyle()) for h in entries]
    assert len(styles) == len(set(styles)), styles  # no two entries drawn alike
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert len(labels) <= 11 and any("1-var" in t for t in labels) and any("2-var" in t for t in labels)
    plt.close(fig)


# -- the report's circuit-summary tables --------------------------------------------------------------

SUMMARY = {"prev_token_attention_score": 1.0, "n_key_frequencies": 11.0, "restricted_loss": 7.9e-10,
           "excluded_loss": 0.0236, "live_neurons": 0.98, "n_sequences": 1800, "seed": 0,
           "key_frequencies": [3, 4],
           "best_neurons": [{"frequency": 3, "neuron": 407, "fraction_explained": 0.817, "cos_correlation": 0.312,
                             "phase": -1.54, "ideal_neuron_correlation": 0.920}],
           "scores_by_type": {"0var": {"n": 400, "equals_to_values_score": 1.0},
                              "1var_left": {"n": 319, "equals_to_values_score": 0.5}}}


def _cells(page: str, column: int) -> list[str]:
    import re

    tables = re.findall(r"<table>(.*?)</table>", page, re.S)
    out = []
    for table in tables:
        for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)[1:]:
            cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
            if len(cells) > column:
                out.append(cells[column])
    return out


def test_the_circuit_summary_tables_speak_words_and_print_counts_as_counts():
    from compose_lens.registry import PROBES, Result

    page = PROBES.section(None, Result(documents={"circuit_summary": SUMMARY}), {})
    first = _cells(page, 0)
    assert "prev_token_attention_score" not in first and "n_sequences" not in first  # raw keys as labels
    assert any("restricted loss" in c and "key frequencies" in c for c in first)
    assert "1800" in _cells(page, 1) and "11" in _cells(page, 1) and "1800.0000" not in page
    assert "7.90e-10" in _cells(page, 1)  # a restricted loss of 7.9e-10 printed as 0.0000 read as exactly 0
    assert '<td class="num">407</td>' in page  # a count is right-aligned with the numbers
    headers = " ".join(__import__("re").findall(r"<th>(.*?)</th>", page))
    assert "cos_correlation" not in headers and "fraction_explained" not in headers and "1var_left" not in page
    assert "407" in _cells(page, 1) and "1-var, the variable on the left" in first


def test_the_forbidden_slots_row_says_which_variables_never_take_the_slot(tmp_path, tiny_config, tiny_split):
    """It read "left operand never a variable in training: k, l", as if the left operand were never a
    variable; it means k and l never stand as the left operand."""
    from compose_lens.report import study_configuration

    rows = {r[0]: r[1] for r in study_configuration(tmp_path, tiny_config, tiny_split)}
    left = [k for k in rows if "left operand" in k]
    assert left == ["task: variables never the left operand in training"], left
    assert rows[left[0]] == ", ".join(tiny_config.task.left_forbidden)


# -- the attention views open on the router -------------------------------------------------------------


def test_the_report_opens_the_attention_views_on_the_router():
    from types import SimpleNamespace

    from compose_lens.analysis.probes import PAPER_HEADS
    from compose_lens.registry.attention import router_index

    paper = SimpleNamespace(context=SimpleNamespace(heads=PAPER_HEADS), subject=SimpleNamespace(
        config=SimpleNamespace(model=SimpleNamespace(n_heads=1))))
    assert router_index(paper) == 1  # layer 2 (blocks.1), the second of the views' heads
    four = SimpleNamespace(context=SimpleNamespace(heads=SimpleNamespace(router=(1, 2))),
                           subject=SimpleNamespace(config=SimpleNamespace(model=SimpleNamespace(n_heads=4))))
    assert router_index(four) == 6


def test_the_view_shows_the_chosen_head_when_chromium_draws_it(tmp_path):
    """circuitsvis opens every view on its first head, layer 1, so the routing claim needed a click
    (issue 43); drawn in headless Chromium, the view now has layer 2's thumbnail selected."""
    import re
    import shutil
    import subprocess

    import pytest
    import torch

    from compose_lens.registry.attention.interactive import attention_view, offline_page

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no chromium here")
    patterns = torch.tril(torch.ones(2, 4, 4))
    patterns = patterns / patterns.sum(-1, keepdim=True)
    names = ["layer 1 (blocks.0)", "layer 2 (blocks.1)"]
    page = tmp_path / "view.html"
    page.write_text(offline_page("t", attention_view(patterns, list("abcd"), names, "v", focus=1)), encoding="utf-8")
    done = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           f"--user-data-dir={tmp_path / 'profile'}", "--host-resolver-rules=MAP * ~NOTFOUND",
                           "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    selected = re.findall(r'<div[^>]*box-shadow[^>]*><h4[^>]*>([^<]*)</h4>', done.stdout)
    assert selected == ["layer 2 (blocks.1)"], selected


# -- the Fourier bars -------------------------------------------------------------------------------------


def test_the_variance_shares_show_the_cross_term_remainder_and_sum_to_one():
    """The per-frequency shares of MLP2's variance sum to ~0.86 on paper (the rest is in cross terms
    cos kx cos k'y, k != k', which no single frequency holds); the figure showed no remainder."""
    shares = [0.0, 0.01, 0.3, 0.02, 0.45, 0.02]  # sums to 0.80
    fig, data = frequency_shares_figure(shares, [2, 4])
    heights = [p.get_height() for p in fig.axes[0].patches]
    assert abs(sum(heights) - 1.0) < 1e-9, sum(heights)
    assert abs(float(data.loc[data["cross_terms"], "variance_share"].iloc[0]) - 0.2) < 1e-9
    assert any("cross" in t.get_text() for t in fig.axes[0].get_legend().get_texts())
    plt.close(fig)


def test_the_fourier_bar_figures_share_one_palette_and_one_axis_wording():
    """Three palettes (red and grey; red and grey; blue hatched and light grey) and two axis wordings
    ("p residues", "p numbers") for one idea, the MLP's key frequencies."""
    from matplotlib.colors import to_hex

    keys = [2, 4]
    norms = pd.Series([1.0, 2.0, 9.0, 1.0, 8.0, 1.0], index=range(6))
    embedding = pd.DataFrame({"frequency": range(1, 6), "share": [0.05, 0.4, 0.05, 0.45, 0.05]})
    figs = [frequency_shares_figure([0.0, 0.01, 0.3, 0.02, 0.45, 0.02], keys)[0],
            readout_fourier_figure(norms, keys)[0],
            embedding_fourier_figure(embedding, {"key_frequencies": keys, "uniform_share": 0.2})[0]]
    palettes, labels = set(), set()
    for fig in figs:
        ax = fig.axes[0]
        key = {to_hex(p.get_facecolor()) for p in ax.patches
               if round(p.get_x() + p.get_width() / 2) in keys and p.get_width() < 1}
        other = {to_hex(p.get_facecolor()) for p in ax.patches
                 if round(p.get_x() + p.get_width() / 2) not in keys and p.get_width() < 1}
        palettes.add((frozenset(key), frozenset(other)))
        labels.add(ax.get_xlabel())
        plt.close(fig)
    assert len(palettes) == 1, palettes
    assert len(labels) == 1, labels


# -- direct logit attribution by pool ---------------------------------------------------------------------


def test_dla_draws_the_sign_flip_of_a_small_term_between_pools():
    """On paper layer 2's direct term is +0.49 logits on 0var_train and -0.59 on 0var_add_restricted
    (intervals clear of 0), beside an MLP term of ~45: the old figure drew shares by sequence kind, one
    visible bar of 1.00, and the flip vanished. Drawn by pool, without the term that writes the whole
    margin, both signs show on an axis a few logits tall."""
    pools = ["0var_train", "0var_add_restricted"]
    head = {"0var_train": 0.49, "0var_add_restricted": -0.59}
    rows = [{"pool": pool, "kind": "0var", "component": component, "contribution": value, "share": value / 45,
             "margin": 45.0, "contribution_low": value - 0.2, "contribution_high": value + 0.2}
            for pool in pools for component, value in (("layer 2 (blocks.1) head 0", head[pool]),
                                                       ("layer 2 (blocks.1) MLP", 45.0 - head[pool]),
                                                       ("unembedding bias", 0.0))]
    by_pool = pd.DataFrame(rows)
    by_kind = pd.DataFrame([{"kind": "0var", "component": c, "share": s} for c, s in
                            (("layer 2 (blocks.1) head 0", 0.0), ("layer 2 (blocks.1) MLP", 1.0))])
    lens = pd.DataFrame([{"kind": "0var", "after": "embeddings", "order": 0, "accuracy": 0.0}])
    fig, drawn = logit_attribution_figure(by_kind, lens, by_pool)
    ax = fig.axes[0]
    points = np.concatenate([np.asarray(line.get_ydata(), dtype=float) for line in ax.get_lines()
                             if line.get_marker() not in (None, "None", "")])
    assert points.max() > 0.4 and points.min() < -0.5  # both signs drawn
    low, high = ax.get_ylim()
    assert high - low < 5, (low, high)  # not squashed under the MLP's 45 logits
    assert set(drawn["component"]) == {"layer 2 (blocks.1) head 0"}  # the MLP is named, the zero bias left out
    assert "MLP" in ax.get_title() and [t.get_text() for t in ax.get_xticklabels()] == [
        "0var train", "0var add restricted"]
    assert_readable_in_the_report(fig)
    plt.close(fig)


# -- modularity against width ------------------------------------------------------------------------------


def _width_grid(inconclusive: bool = False) -> pd.DataFrame:
    rows = []
    for d_model, separations in ((64, (0.94, 0.93)), (128, (0.99, 0.98)), (256, (0.995, 0.984)), (512, (0.97, 0.99))):
        for seed, separation in enumerate(separations):
            missing = inconclusive and d_model == 256 and seed == 1
            rows.append({"d_model": d_model, "seed": seed, "remedy": "none" if d_model == 512 else "lr_x3",
                         "modularity_separation": "inconclusive" if missing else separation,
                         "modularity_same_adder": "inconclusive" if missing else 1.0,
                         "modularity_circuit_fraction": "inconclusive" if missing else 0.6 + 0.05 * seed})
    return pd.DataFrame(rows)


def _figure_words(fig) -> str:
    import matplotlib.text

    return " ".join(t.get_text() for t in fig.findobj(matplotlib.text.Text))


def test_the_width_figure_draws_spread_names_only_its_markers_and_drops_a_constant_panel():
    """experiments/results/modularity/width.png: its title named "x at 0: inconclusive" markers the
    width points do not have, its same-adder panel was 1.0 at every point, and nothing showed the
    spread over seeds."""
    fig, _ = modularity_figure(_width_grid(), "d_model", log2=True, separation_min=0.8)
    labels = [ax.get_ylabel() for ax in fig.axes]
    assert labels == ["separation (a)", "circuit / graph edges (c)"], labels  # the constant panel is a sentence
    words = _figure_words(fig)
    assert "inconclusive" not in words and "x at 0" not in words  # no such marker drawn
    assert "same-adder test" in fig._suptitle.get_text() and "1 at every measured point" in fig._suptitle.get_text()
    assert "diverged at the proxy's rate" in words  # the ringed d_model 512 points are drawn, and named
    from matplotlib.collections import LineCollection

    for ax in fig.axes:  # every panel has error bars of non-zero length (the seeds differ at each width)
        bars = [c for c in ax.collections if isinstance(c, LineCollection)]
        lengths = [abs(seg[1][1] - seg[0][1]) for c in bars for seg in c.get_segments()]
        assert max(lengths) > 0.005, ax.get_ylabel()
    assert_readable_in_the_report(fig)
    plt.close(fig)


def test_an_inconclusive_point_is_drawn_and_named():
    fig, _ = modularity_figure(_width_grid(inconclusive=True), "d_model", log2=True)
    assert "inconclusive (not measured)" in _figure_words(fig)
    assert any(line.get_marker() == "x" for line in fig.axes[0].get_lines())
    plt.close(fig)


def test_an_axis_with_no_point_yet_still_draws():
    fig, _ = modularity_figure(_width_grid().iloc[:0], "d_model", log2=True)
    png_bytes(fig)


def test_the_single_qk_figures_name_layers_in_words():
    """positional_qk_figure said "layer 1: P QK1 P^T" and variable_identity_figure "(E_var OV1) QK2": the
    numbers after QK / OV counted layers from 1, the gradient table's qk0 / qk1 from 0."""
    rng = np.random.default_rng(0)
    fig_a, _ = positional_qk_figure(rng.normal(size=(6, 6)))
    fig_b, _ = variable_identity_figure(rng.normal(size=(3, 3)), list("abc"))
    titles = [fig_a.axes[0].get_title(), fig_b.axes[0].get_title()]
    assert titles[0].startswith(layer_name(0)) and titles[1].startswith(layer_name(1)), titles
    assert not any(w in t for t in titles for w in ("QK1", "QK2", "OV1")), titles
    for fig in (fig_a, fig_b):
        assert_readable_in_the_report(fig)
        plt.close(fig)


def _outlined_cells(ax) -> set[tuple[int, int]]:
    """The outlined cells as (row, column) of the drawn matrix: (query, key) in an attention heatmap."""
    from matplotlib.patches import Rectangle

    return {(round(p.get_y() + 0.5), round(p.get_x() + 0.5)) for p in ax.patches
            if isinstance(p, Rectangle) and not p.get_fill()}


def _colour_bar_label(ax) -> str:
    return ax.images[0].colorbar.ax.get_ylabel()


def _paper_like_positional_scores(n: int = 12) -> np.ndarray:
    """Positional scores as the paper model's: each row's peak on the diagonal, one back the next best."""
    return 2.0 * np.eye(n) + 1.0 * np.eye(n, k=-1) + np.random.default_rng(0).normal(0, 0.1, (n, n))


def test_the_positional_figure_speaks_the_early_jump_figures_units_and_names_its_outlines():
    """Issue 43: the positional QK figure drew layer 1 in attention score (logit) where the early-jump
    figure draws layer 1 in attention weight, and the identity matrix under two labels; its outlines,
    one back in every row, said nothing while the peak sat on the diagonal. Now the panel is the
    softmax of the scores over the allowed keys, on the attention colour scale and label, and the
    outlines (query row i, key column i - 1 in the figure's own axes) are named in the legend."""
    from compose_lens.analysis.probes import positional_attention

    scores = _paper_like_positional_scores()
    n = len(scores)
    fig, data = positional_qk_figure(scores)
    ax = fig.axes[0]
    lower = np.tril(np.ones((n, n), dtype=bool))
    shown = np.ma.filled(ax.images[0].get_array().astype(float), np.nan)
    np.testing.assert_allclose(shown[lower], positional_attention(scores).numpy()[lower], rtol=1e-6)
    np.testing.assert_allclose(np.nansum(np.where(lower, shown, np.nan), axis=1), 1.0, rtol=1e-6)
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("key position", "query position")
    assert _outlined_cells(ax) == {(i, i - 1) for i in range(1, n)}
    assert "previous token" in ax.get_legend().get_texts()[0].get_text()
    assert set(data["matrix"]) == {"score", "attention_from_position"}  # the logits stay in the data

    rng = np.random.default_rng(1)
    state = lambda step: {"step": step, "pattern0": np.tril(rng.random((n, n))), "tokens": [str(i) for i in range(n)],  # noqa: E731
                          "identity": rng.normal(size=(3, 3)), "accuracy": 0.5}
    jump, _ = early_jump_figure(state(1), state(2), list("abc"))
    attention = {_colour_bar_label(a) for a in jump.axes if a.images and "attention" in a.get_title()}
    identity = {_colour_bar_label(a) for a in jump.axes if a.images and "identity" in a.get_title()}
    assert attention == {_colour_bar_label(ax)}, (attention, _colour_bar_label(ax))
    alone, _ = variable_identity_figure(rng.normal(size=(3, 3)), list("abc"))
    both, _ = qk_heatmaps_figure(scores, rng.normal(size=(3, 3)), list("abc"))
    left, right = both.axes[:2]
    assert identity == {_colour_bar_label(alone.axes[0])} == {_colour_bar_label(right)}, identity
    assert _colour_bar_label(left) == _colour_bar_label(ax) and _outlined_cells(left) == _outlined_cells(ax)
    assert ax.images[0].get_clim() == jump.axes[0].images[0].get_clim() == (0.0, 1.0)
    for figure in (fig, jump, alone, both):
        assert_readable_in_the_report(figure)
        plt.close(figure)


def test_the_positional_caption_counts_where_position_alone_peaks():
    """The report says what the outlines mark and where the rows' peaks are (on the paper model 9 of 11 on
    the diagonal: experiments/results/claims/measures.json)."""
    from compose_lens.core.config import TaskConfig
    from compose_lens.registry.qk import _positional_caption

    caption = _positional_caption(_paper_like_positional_scores(), TaskConfig(), (0, 0))
    assert "layer 1 (blocks.0) head 0" in caption and "Outlined: the key one back" in caption
    assert "on the diagonal (the query itself) in 11 of 11 query positions and one back in 0" in caption
    assert "highest in 100% of them" in caption


def test_the_fourier_neuron_panels_share_one_colour_range():
    """A colour means the same activation beside the ideal pattern: both images (and their colour bars) span
    the range of the two grids together, not each its own."""
    from compose_lens.registry.fourier.features import FourierNeuron

    grid = np.add.outer(np.arange(7.0), np.arange(7.0))
    neuron = FourierNeuron(neuron=3, frequency=2, fraction_explained=0.9, correlation=0.95, pattern=grid,
                           ideal=grid / 4, keys=[2])
    fig, _ = fourier_neuron_figure(neuron)
    limits = {image.get_clim() for ax in fig.axes for image in ax.get_images()}
    assert limits == {(0.0, 12.0)}


def test_the_patching_figures_y_label_stands_clear_of_its_site_names():
    """At least 8 points between 'patched activation' and the longest site name (matplotlib's 4-point pad
    made them touch in the report), on a patching table of the paper model."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from compose_lens.registry.patching.tables import patching_table
    from compose_lens.training.subject import load_subject

    subject = load_subject("paper", bridge=False)
    fig, _ = patching_figure(patching_table(subject, n_pairs=30), "t")
    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    label = ax.yaxis.label.get_window_extent(renderer)
    names = min(t.get_window_extent(renderer).x0 for t in ax.get_yticklabels() if t.get_text())
    assert (names - label.x1) * 72 / fig.dpi >= 8


def test_one_models_gradient_terms_are_drawn_with_titles_clear_of_each_other():
    """``analyze`` and the one-model report drew no figure of the gradient's terms (a table only): now a bar per
    term and product, the kept term first, the panels' titles not overlapping."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    shares = pd.DataFrame({"matrix": ["qk0", "qk0", "ov0", "ov0", "qk1", "qk1", "qk1"],
                           "term": ["positional", "kept", "kept", "token_other", "kept", "positional", "through_layer1"],
                           "share": [0.7, 0.1, 0.5, 0.5, 0.2, 0.3, 0.9], "cosine": [0.8, 0.05, 0.6, 0.4, 0.2, 0.3, 0.94]})
    fig, _ = gradient_terms_figure(shares)
    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    assert [len(ax.patches) for ax in fig.axes] == [2, 2, 3]
    assert [ax.get_yticklabels()[0].get_text() for ax in fig.axes] == ["kept", "kept", "kept"]  # the top bar
    boxes = [ax.title.get_window_extent(renderer) for ax in fig.axes]
    assert all(left.x1 < right.x0 for left, right in zip(boxes, boxes[1:]))
