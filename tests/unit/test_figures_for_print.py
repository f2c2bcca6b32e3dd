"""Figures a paper would print: no "-0.00" cells, axis labels that say what is plotted, and an
ablation heatmap that shows only the ablations that change something (issue 29)."""

from __future__ import annotations

import pandas as pd

from compose_lens import plots


def _cell_texts(fig):
    return [t for t in fig.axes[0].texts]


def test_patching_cells_that_round_to_zero_print_without_a_sign():
    table = pd.DataFrame({"component": ["resid_pre"] * 3 + ["attn_out"] * 3, "head": -1,
                          "block": [0] * 3 + [1] * 3, "role": ["queried value", "PAD", "="] * 2,
                          "mean": [1.0, -0.0004, -1e-9, -0.003, 0.2, -0.5]})
    fig, _ = plots.patching_figure(table, "t")
    texts = [t.get_text() for t in _cell_texts(fig)]
    assert "-0.00" not in texts and texts.count("0.00") == 3 and "-0.50" in texts
    assert len(fig.axes) == 2  # the colour bar is kept
    assert min(t.get_fontsize() for t in _cell_texts(fig)) >= 8


def test_a_count_is_labelled_a_count():
    assert plots._measure_unit("n_key_frequencies") == "count"
    assert plots._measure_unit("equals_to_values_mass") == "attention weight"
    assert plots._measure_unit("prev_token_weight_score") == "score"


def _ablation_table(drops: dict[tuple[str, int], float]) -> pd.DataFrame:
    pools = ["0var_train", "2var_train"]
    rows = [{"target": target, "block": 1, "index": index, "kind": "zero", "pool": pool,
             "accuracy_drop": drop * (i + 1) / 2} for (target, index), drop in drops.items()
            for i, pool in enumerate(pools)]
    return pd.DataFrame(rows)


def test_ablation_shows_only_the_rows_that_change_and_says_so():
    table = _ablation_table({("mlp", -1): 0.9, ("head", 0): -0.2, ("frequency_neurons", 3): 0.04,
                             ("fourier_directions", 3): 0.01})
    fig, shown = plots.ablation_figure(table)
    assert sorted(set(shown["target"])) == ["head", "mlp"]  # a negative change counts too
    ax = fig.axes[0]
    assert len(ax.get_yticklabels()) == 2
    assert "2 of 4 ablations left out" in ax.get_title() and "0.05" in ax.get_title()
    assert len(ax.texts) == 2 * 2  # the values printed in the cells
    assert min(t.get_fontsize() for t in [*ax.texts, *ax.get_yticklabels(), *ax.get_xticklabels()]) >= 8


def test_ablation_with_nothing_above_the_threshold_draws_every_row():
    table = _ablation_table({("frequency_neurons", 3): 0.01, ("fourier_directions", 3): 0.02})
    fig, shown = plots.ablation_figure(table)
    assert len(fig.axes[0].get_yticklabels()) == 2 and "left out" not in fig.axes[0].get_title()
