"""Phase onsets of every sweep point from its metrics.jsonl, by the dynamics rule, and the
"addition comes first" column."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from compose_lens.registry.dynamics.checkpoints import addition_first_summary, sweep_onsets
from compose_lens.training.phases import ASSIGNMENT_POOLS, PHASE_RULES, REFINEMENT_POOLS
from compose_lens.data.sampler import POOL_NAMES
from compose_lens.training.runs import METRICS_FILE


def write_run(directory, addition_at, assignment_at, refinement_at, last=1500):
    """A metrics.jsonl whose phase curves jump from 0.1 to 1.0 at the given steps (None: never)."""
    directory.mkdir(parents=True)
    lines = []
    for step in range(100, last + 1, 100):
        def level(at):
            return 1.0 if at is not None and step >= at else 0.1
        line = {"step": step, **{pool: 0.5 for pool in POOL_NAMES}}
        line["0var_add_restricted"] = level(addition_at)
        line.update({pool: level(assignment_at) for pool in ASSIGNMENT_POOLS})
        line.update({pool: level(refinement_at) for pool in REFINEMENT_POOLS})
        lines.append(line)
    (directory / METRICS_FILE).write_text("".join(json.dumps(x) + "\n" for x in lines))
    return str(directory)


def row(run_dir, value, seed=0):
    return {"param": "f", "value": value, "seed": seed, "status": "done", "run_dir": run_dir}


def test_onsets_are_read_from_each_points_metrics(tmp_path):
    rows = [row(write_run(tmp_path / "a", 300, 600, 900), "0.5"),
            row(write_run(tmp_path / "b", 800, 400, None), "0.3"),
            row(write_run(tmp_path / "c", None, None, None), "0.1")]
    table = sweep_onsets(rows).set_index("value")
    assert table.loc["0.5", ["addition_onset", "assignment_onset", "refinement_onset"]].tolist() == [300, 600, 900]
    assert pd.isna(table.loc["0.3", "refinement_onset"])
    assert table.loc["0.5", "addition_first"] == True and table.loc["0.3", "addition_first"] == False  # noqa: E712
    assert pd.isna(table.loc["0.1", "addition_first"])  # neither onset: no evidence either way
    assert table.loc["0.5", "last_logged_step"] == 1500


def test_a_point_without_metrics_has_no_onsets(tmp_path):
    table = sweep_onsets([row(str(tmp_path / "gone"), "0.2")])
    assert pd.isna(table.loc[0, "addition_onset"]) and pd.isna(table.loc[0, "last_logged_step"])


def test_the_claim_holds_across_a_sweep_only_if_every_point_agrees(tmp_path):
    agree = [row(write_run(tmp_path / str(i), 300, 600, None), str(i)) for i in range(2)]
    assert addition_first_summary(sweep_onsets(agree))["holds_everywhere"] is True
    one_against = agree + [row(write_run(tmp_path / "x", 700, 600, None), "9")]
    summary = addition_first_summary(sweep_onsets(one_against))
    assert summary == {"points_with_both_onsets": 3, "addition_first": 2, "assignment_first": 1,
                       "holds_everywhere": False}
    assert addition_first_summary(sweep_onsets([row(str(tmp_path / "none"), "1")]))["holds_everywhere"] is None


@pytest.mark.parametrize("dip, onset", [(0.9, 300), (0.5, 800)])
def test_the_dynamics_rule_decides_a_dip_after_the_jump(tmp_path, dip, onset):
    """Addition's rule: >= 0.97 and never below 0.87 later. A dip to 0.9 at step 700 keeps the
    onset at 300; a dip to 0.5 moves it past the dip."""
    addition = next(r for r in PHASE_RULES if r.name == "addition")
    assert (addition.threshold, addition.margin) == (0.97, 0.10)
    run = write_run(tmp_path / "d", 300, 600, None)
    path = tmp_path / "d" / METRICS_FILE
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    lines[6]["0var_add_restricted"] = dip  # step 700
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert sweep_onsets([row(run, "0.5")]).loc[0, "addition_onset"] == onset
