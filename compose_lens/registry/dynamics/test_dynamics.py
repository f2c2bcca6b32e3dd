"""Training dynamics: the phase rule on curves with known jumps, a tiny run, the study's checkpoints."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from compose_lens.cli import main
from compose_lens.core.config import ModelConfig, RunConfig, TaskConfig, TrainConfig
from compose_lens.core.errors import ComposeLensError
from compose_lens.registry.dynamics.checkpoints import equals_variable_scores, forbidden_slot_batches, trajectory
from compose_lens.report.context import RunContext, run_analysis
from compose_lens.training.phases import PHASE_RULES, add_derived_columns, find_phases, phase_onset
from compose_lens.training.runs import find_checkpoints, load_dynamics, run_phases_measured, select_checkpoints
from compose_lens.training.subject import load_checkpoint
from compose_lens.data.sampler import POOL_NAMES

# -- the rule on synthetic curves -----------------------------------------------------------------


def sigmoid(steps, centre, width=150.0, low=0.0, high=1.0):
    return low + (high - low) / (1 + np.exp(-(np.asarray(steps) - centre) / width))


def test_onset_is_the_first_crossing_that_stays():
    steps = [100, 200, 300, 400, 500]
    # crosses at 200, falls back to the old plateau at 300, crosses for good at 400
    assert phase_onset(steps, [0.1, 0.95, 0.3, 0.95, 0.99], 0.9, 0.1)["step"] == 400
    # a later dip inside the margin does not move the onset
    found = phase_onset(steps, [0.1, 0.5, 0.95, 0.85, 0.99], 0.9, 0.1)
    assert found["step"] == 300 and found["bracket"] == [200, 300]
    assert 200 < found["interpolated_step"] < 300
    assert phase_onset(steps, [0.1, 0.2, 0.3, 0.4, 0.5], 0.9, 0.1)["step"] is None
    assert phase_onset(steps, [0.95] * 5, 0.9, 0.1)["step"] == 100


def test_find_phases_recovers_the_jumps_of_synthetic_curves():
    rng = np.random.default_rng(0)
    steps = np.arange(0, 30_001, 100)
    noise = lambda: rng.normal(0, 0.004, len(steps))  # noqa: E731  (pool sampling noise of 2000 sequences)
    addition = sigmoid(steps, 4300, high=0.99) + noise()
    assignment = sigmoid(steps, 5900, low=0.35, high=0.995) + noise()
    refinement = sigmoid(steps, 15000, low=0.5, high=0.995) + noise()
    table = pd.DataFrame({"step": steps, "0var_train": 1.0, "0var_add_restricted": addition,
                          **{p: assignment for p in ("1var_train", "1var_add_restricted", "2var_train",
                                                     "2var_add_restricted")},
                          "1var_var_restricted": refinement, "2var_var_restricted_1": refinement,
                          "2var_var_restricted_2": refinement})
    phases = find_phases(add_derived_columns(table))
    assert [p for p in phases] == [r.name for r in PHASE_RULES]
    # each onset lies where its curve reaches the rule's threshold: after the centre, well before the next phase
    assert 4300 <= phases["addition"]["step"] <= 5200
    assert 5900 <= phases["assignment"]["step"] <= 6400
    assert 15000 <= phases["refinement"]["step"] <= 15600
    assert phases["addition"]["step"] < phases["assignment"]["step"] < phases["refinement"]["step"]


def test_a_loss_spike_after_the_refinement_does_not_move_it():
    steps = np.arange(10_000, 30_001, 1000)
    curve = sigmoid(steps, 15_500, width=300, low=0.5, high=0.99)
    curve[steps == 25_000] = 0.85  # the reference run has such a spike at step 25k
    assert phase_onset(steps, curve, 0.9, 0.1)["step"] == 16_000


# -- a tiny run ------------------------------------------------------------------------------------


def _tiny_run(tmp_path_factory, **model_changes):
    from compose_lens.training.train import Trainer

    task = TaskConfig(modulus=7, n_vars=6, left_forbidden=("f",), right_forbidden=("a",), f=0.8)
    model = ModelConfig.for_task(task, d_model=32, d_head=32, d_mlp=64).replace(**model_changes)
    config = RunConfig(task=task, model=model,
                       train=TrainConfig(steps=30, batch_size=64, eval_every=10, checkpoint_every=10, pool_size=64))
    run_dir = tmp_path_factory.mktemp("dynamics") / "run"
    Trainer(config, run_dir, progress=False).run()
    return run_dir


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    return _tiny_run(tmp_path_factory)


@pytest.fixture(scope="module")
def two_head_run(tmp_path_factory):
    """Not the paper architecture: its checkpoints go through one bridge, not the fast forwards alone."""
    return _tiny_run(tmp_path_factory, n_heads=2, d_head=16)


def test_checkpoints_of_a_run_are_found_in_step_order(tiny_run):
    checkpoints, config, split = find_checkpoints(tiny_run)
    assert [c.step for c in checkpoints] == [10, 20, 30]
    assert config.task.modulus == 7 and len(split.heldout_pairs) > 0
    assert [c.step for c in find_checkpoints(tiny_run / "checkpoints")[0]] == [10, 20, 30]
    assert [c.step for c in select_checkpoints(checkpoints, stride=2)] == [10, 30]
    with pytest.raises(ComposeLensError, match="no checkpoint at step"):
        select_checkpoints(checkpoints, [15])


def test_dynamics_cli_writes_one_row_per_checkpoint(tiny_run, tmp_path):
    out = tmp_path / "dyn"
    assert main(["dynamics", str(tiny_run), "--out", str(out), "--quiet", "--pool-size", "50",
                 "--slot-size", "20", "--no-circuit"]) == 0
    table = pd.read_csv(out / "dynamics.csv")
    assert table["step"].tolist() == [10, 20, 30]
    for column in (*POOL_NAMES, "equals_score_a", "equals_score_f", "slot_1var_right_a", "slot_2var_left_f",
                   "addition_accuracy", "assignment_accuracy", "refinement_accuracy", "equals_score_spread"):
        assert column in table, column
    assert table[list(POOL_NAMES)].apply(lambda c: c.between(0, 1)).all().all()
    doc = json.loads((out / "phases.json").read_text())
    assert set(doc["phases"]) == {"addition", "assignment", "refinement"}
    assert doc["checkpoints"] == 3 and doc["timing"]["seconds_per_checkpoint"] > 0
    assert "threshold" in doc["phases"]["refinement"] and "rule" in doc


@pytest.mark.parametrize("run", ["tiny_run", "two_head_run"])
def test_trajectory_matches_a_fresh_load_of_each_checkpoint(run, request):
    """The trajectory (each checkpoint's tensors, or weights loaded into one bridge) gives what
    loading each checkpoint alone gives."""
    from compose_lens.training.evaluate import pool_accuracies
    from compose_lens.training.subject import load_model
    from compose_lens.data.sampler import make_pools

    tiny_run = request.getfixturevalue(run)
    traj = trajectory(tiny_run, pool_size=40, slot_size=10, circuit=False, progress=False)
    loaded = load_model(tiny_run / "checkpoints" / "step_000020")
    expected = pool_accuracies(loaded.model, loaded.config, make_pools(loaded.split, 40, 0))
    row = traj.table.set_index("step").loc[20]
    assert all(row[name] == pytest.approx(expected[name]) for name in POOL_NAMES)
    scores = equals_variable_scores(loaded.model, loaded.config)
    assert row["equals_score_b"] == pytest.approx(float(scores[1]), abs=1e-5)
    assert load_checkpoint(tiny_run, 20).source.endswith("(step 20)")


def test_forbidden_slot_batches_put_the_variable_in_its_forbidden_slot(tiny_run):
    from compose_lens.data.task import decode

    _, config, split = find_checkpoints(tiny_run)
    batches = forbidden_slot_batches(split, size=20)
    assert set(batches) == {"1var_left_f", "2var_left_f", "1var_right_a", "2var_right_a"}
    for tokens in batches["2var_right_a"].tokens.tolist():
        d = decode(split.task, tokens)
        assert d.rhs == "a" and isinstance(d.lhs, str) and d.type == "2var"
    for tokens in batches["1var_left_f"].tokens.tolist():
        d = decode(split.task, tokens)
        assert d.lhs == "f" and d.type == "1var_left"


def test_written_dynamics_record_the_config_and_code_version(tiny_run, tmp_path):
    run_analysis("dynamics", RunContext(tiny_run, progress=False), tmp_path, pool_size=20, slot_size=5,
                 no_circuit=True, steps=(30,))
    table, doc = load_dynamics(tmp_path)
    assert doc["config"]["task"]["modulus"] == 7 and doc["code_version"]
    assert doc["steps"] == [30] and list(table["step"]) == [30]


# -- the study's checkpoints ------------------------------------------------------------------------


def test_reference_phases_are_found_at_the_study_jumps(reference_dir):
    """A handful of the study's checkpoints around its jumps: the rule finds them."""
    steps = [1001, 4001, 4501, 5301, 5401, 6001, 14501, 15501, 16001, 20001]
    traj = trajectory(reference_dir, pool_size=600, slot_size=150, circuit=False, progress=False, steps=steps)
    phases = find_phases(traj.table)
    assert phases["addition"]["step"] in (4001, 4501, 5301, 5401)
    assert phases["assignment"]["step"] == 5401 and phases["assignment"]["bracket"] == [5301, 5401]
    assert phases["refinement"]["step"] == 16001 and phases["refinement"]["bracket"] == [15501, 16001]
    row = traj.table.set_index("step")
    # b as the right operand is solved in the refinement, not with the other variables
    assert row.loc[6001, "slot_1var_right_b"] < 0.2 and row.loc[16001, "slot_1var_right_b"] > 0.9
    # ... and the = query scores b lowest before the refinement, less so after it
    scores = row[[f"equals_score_{v}" for v in "abcdefghijkl"]]
    assert scores.loc[14501].idxmin() == "equals_score_b"
    assert row.loc[20001, "equals_score_spread"] < row.loc[14501, "equals_score_spread"]


def test_update_evaluates_only_new_checkpoints(tiny_run, tmp_path):
    out = tmp_path / "dyn"
    common = ["--out", str(out), "--quiet", "--pool-size", "30", "--slot-size", "5", "--no-circuit"]
    assert main(["dynamics", str(tiny_run), "--steps", "10,20", *common]) == 0
    first = pd.read_csv(out / "dynamics.csv")
    assert main(["dynamics", str(tiny_run), "--update", *common]) == 0
    doc = json.loads((out / "phases.json").read_text())
    assert doc["timing"]["evaluated_now"] == 1 and doc["steps"] == [10, 20, 30]
    again = pd.read_csv(out / "dynamics.csv")
    pd.testing.assert_frame_equal(again[again["step"] <= 20].reset_index(drop=True), first)
    # rows made with other settings are not mixed in
    assert main(["dynamics", str(tiny_run), "--update", *common[:-1], "--seed", "1", "--no-circuit"]) == 2


def test_a_stride_over_the_study_checkpoints_flags_every_onset_it_may_move(reference_dir):
    """report --stride 4 read the study's onsets 3,801 / 5,401 / 16,001 as 4,401 / 5,601 / 20,001 and
    marked only one provisional: now each onset read on a stride that skipped checkpoints says so."""
    traj = trajectory(reference_dir, pool_size=600, slot_size=150, circuit=False, progress=False, stride=4)
    phases = run_phases_measured(traj.table, reference_dir, traj.settings)
    assert all(phase["stride_may_move"] for phase in phases.values() if phase["step"] is not None)
    assert all(phase["interval"][0] <= phase["bracket"][0] for phase in phases.values() if phase["step"])
    every = trajectory(reference_dir, pool_size=600, slot_size=150, circuit=False, progress=False)
    dense = run_phases_measured(every.table, reference_dir, every.settings)
    assert not any(phase["stride_may_move"] for phase in dense.values())


def test_the_early_jump_command_reads_two_checkpoints_or_says_which_it_needs(tiny_run, tmp_path, capsys):
    """early-jump (a declared analysis of a run) draws both states at the steps given; without them it takes
    the assignment bracket from the run's dynamics, and where there is none it says so in one line (exit 2,
    nothing written)."""
    out = tmp_path / "jump"
    assert main(["early-jump", str(tiny_run), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "give --before and --after" in err and not out.exists()
    assert main(["early-jump", str(tiny_run), "--before", "10", "--after", "30", "--sequence", "a=1, a+2=?",
                 "--out", str(out), "--quiet"]) == 0
    doc = json.loads((out / "early_jump.json").read_text())
    assert [s["step"] for s in doc["states"]] == [10, 30] and doc["text"] == "a=1, a+2=?"
    first, second = (np.asarray(s["pattern0"]) for s in doc["states"])
    assert first.shape == second.shape and not np.allclose(first, second)  # two checkpoints, not one read twice
    assert (out / "figures" / "early_jump.png").stat().st_size > 0


def test_the_modularity_command_says_inconclusive_for_a_model_that_has_not_learned(tiny_run, tmp_path, capsys):
    """`compose-lens modularity` (the declaration) writes its row and, for a model below the headline, the word
    'inconclusive' with the reason, never a score (the early checkpoint of a tiny run)."""
    out = tmp_path / "mod"
    assert main(["modularity", str(tiny_run), "--out", str(out), "--quiet"]) == 0
    row = pd.read_csv(out / "modularity.csv").iloc[0]
    assert row["modularity_verdict"] == "inconclusive" and row["modularity_separation"] == "inconclusive"
    assert "has not learned the task" in row["modularity_reason"]
    assert "verdict: inconclusive" in capsys.readouterr().out
