"""One onset per run (compose_lens.training.phases.measure_phases): the reading, its interval, the stride flag."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from compose_lens.training.phases import PHASE_RULES, measure_phases, phase_line

SEEDS = Path(__file__).resolve().parents[2] / "experiments" / "results" / "seeds"


@pytest.fixture(scope="module")
def seed42() -> pd.DataFrame:
    return pd.read_csv(SEEDS / "dynamics_seed42.csv")


def test_seed42_onsets_and_their_intervals(seed42):
    found = measure_phases(seed42, pool_size=2000, available_steps=seed42["step"])
    assert [found[r.name]["step"] for r in PHASE_RULES] == [1200, 5000, 24600]  # docs/reproduction.md's row
    for rule in PHASE_RULES:
        phase = found[rule.name]
        low, high = phase["interval"]
        assert low <= phase["bracket"][0] < phase["step"] <= high and not phase["stride_may_move"]
    # pool sampling alone: the training log's pools (another draw of the same accuracies) read
    # 1,400 and 23,100 for this run; the intervals hold both
    assert found["addition"]["interval"][0] <= 1400 <= found["addition"]["interval"][1]
    assert found["refinement"]["interval"][0] <= 23100 <= found["refinement"]["interval"][1]


def test_a_stride_that_moves_an_onset_says_so(seed42):
    dense = measure_phases(seed42, pool_size=2000, available_steps=seed42["step"])
    sparse_table = seed42.iloc[::25]  # every 2,500 steps
    sparse = measure_phases(sparse_table, pool_size=2000, available_steps=seed42["step"])
    moved = [r.name for r in PHASE_RULES if sparse[r.name]["step"] != dense[r.name]["step"]]
    # at this spacing every reading moves, refinement to 22,600, earlier than the dense 24,600: the
    # stride skipped the checkpoints where the curve dips again
    assert moved == ["addition", "assignment", "refinement"] and sparse["refinement"]["step"] == 22600
    assert all(sparse[name]["stride_may_move"] for name in moved)
    assert "a denser reading can move it" in phase_line(sparse["refinement"])
    # without the run's checkpoint list there is nothing to compare with: no flag
    assert not any(p["stride_may_move"] for p in measure_phases(sparse_table, pool_size=2000).values())
