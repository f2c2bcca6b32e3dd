"""The stall detector: outcomes from curves, the calibration it quotes, and the early stops."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compose_lens.training import outcome
from compose_lens.training.runs import read_metrics

POOLS = ("0var_train", "0var_add_restricted", "1var_train", "1var_add_restricted", "1var_var_restricted",
         "2var_train", "2var_add_restricted", "2var_var_restricted_1", "2var_var_restricted_2")
RESULTS = Path(__file__).resolve().parents[2] / "experiments" / "results"


def curve(routing_at: int | None, last: int = 30_000, refined_at: int | None = None) -> list[dict]:
    """Logged pools every 500 steps: addition at 1,000, routing (1-/2-var allowed pools) at
    ``routing_at`` (None: never; the stalled plateau of 0.57), refinement at ``refined_at``."""
    out = []
    for step in range(500, last + 1, 500):
        added = step >= 1000
        routed = routing_at is not None and step >= routing_at
        refined = refined_at is not None and step >= refined_at
        row = {"step": step}
        for pool in POOLS:
            if pool.startswith("0var"):
                row[pool] = 1.0 if added else 0.1
            elif "var_restricted" in pool and pool.startswith("2var"):
                row[pool] = 0.99 if refined else (0.6 if routed else 0.3)
            else:
                row[pool] = 0.99 if routed else 0.57
        out.append(row)
    return out


HEADLINE = {"zero_var_heldout": {"accuracy": 0.99}, "two_var_union": {"accuracy": 0.99}}
MISSED = {"zero_var_heldout": {"accuracy": 0.99}, "two_var_union": {"accuracy": 0.31}}
TABLE = {"runs": 10, "by_step": [{"step": 4000, "not_routed": 8, "never": 3},
                                 {"step": 8000, "not_routed": 5, "never": 4},
                                 {"step": 10_000, "not_routed": 5, "never": 5}]}


def test_a_finished_run_without_routing_is_stalled_and_one_with_the_headline_generalised():
    assert outcome.outcome(curve(None), MISSED, finished=True, table={})["outcome"] == "stalled"
    assert outcome.outcome(curve(4000, refined_at=12_000), HEADLINE, finished=True, table={})["outcome"] == "generalised"


def test_a_late_learner_is_never_called_stalled():
    late = curve(29_000)
    assert outcome.outcome(late, MISSED, finished=True, table={})["outcome"] == "learning"
    # while it trains, before it routed: no certainty in the table, so still learning
    assert outcome.outcome(late[:40], table={})["outcome"] == "learning"


def test_a_run_still_training_is_stalled_only_once_the_calibration_is_certain():
    assert outcome.stall_certain_after(TABLE) == 10_000
    assert outcome.outcome(curve(None, last=9_000), table=TABLE)["outcome"] == "learning"
    found = outcome.outcome(curve(None, last=10_000), table=TABLE)
    assert found["outcome"] == "stalled"
    assert "5 of 5 calibration runs" in found["why"]
    assert outcome.stall_certain_after({"by_step": [{"step": 1, "not_routed": 4, "never": 4}]}) is None


def test_the_warning_quotes_the_calibration_and_spares_a_routed_run():
    line = outcome.stall_warning(curve(None, last=8_000), TABLE, after=8_000)
    assert line is not None and "by step 8000" in line and "4 of 5" in line
    assert outcome.stall_warning(curve(None, last=7_500), TABLE, after=8_000) is None
    assert outcome.stall_warning(curve(5_000, last=8_000), TABLE, after=8_000) is None


def test_the_warning_fires_at_the_calibrated_step_and_says_within_how_many_steps():
    """The step is the committed calibration's (the first at which 9 in 10 study-setting runs without
    routing formed none within 30,000 steps), and the line names that horizon."""
    doc = json.loads(outcome.CALIBRATION_FILE.read_text())
    assert outcome.WARN_AFTER == doc["warn_after"]
    table = outcome.calibration(0.7, 1.0, 30_000)
    assert outcome.stall_warning(curve(None, last=outcome.WARN_AFTER - 500), table) is None
    line = outcome.stall_warning(curve(None, last=outcome.WARN_AFTER), table)
    never, of = outcome.not_routed_by(outcome.WARN_AFTER, table)
    assert f"{never} of {of} calibration runs" in line and "within 30,000 steps" in line
    assert never >= doc["warn_precision"] * of and of >= doc["min_runs"]
    before = [row for row in table["by_step"] if row["step"] < outcome.WARN_AFTER]
    assert all(row["never"] < doc["warn_precision"] * row["not_routed"] or row["not_routed"] < doc["min_runs"]
               for row in before)


def test_a_run_with_a_longer_budget_reads_the_longer_horizon():
    """Two by-seed runs without routing at 30,000 steps formed it by 45,000: a run whose budget is
    45,000 is not certain at the step a 30,000-step run is."""
    short, long = outcome.calibration(0.7, 1.0, 30_000), outcome.calibration(0.7, 1.0, 45_000)
    assert (short["horizon"], long["horizon"]) == (30_000, 45_000)
    assert outcome.calibration(0.7, 1.0, 60_000) == {} and outcome.calibration(0.3, 1.0, 45_000) == {}
    certain = outcome.stall_certain_after(short)
    assert certain is not None and certain < 30_000 < outcome.stall_certain_after(long)
    assert outcome.outcome(curve(None, last=certain), table=short)["outcome"] == "stalled"
    assert outcome.outcome(curve(None, last=certain), table=long)["outcome"] == "learning"
    assert outcome.stall_certain_after({}) is None


def with_loss(rows: list[dict], losses: list[float]) -> list[dict]:
    return [{**row, "train_loss": loss} for row, loss in zip(rows, losses)]


def test_a_loss_that_spikes_and_stays_up_is_diverged_and_one_that_comes_back_is_not():
    spiked = with_loss(curve(None, last=6_000), [3.2, 1.1, 1.0, 1.0, 1.0, 1.0, 5653.1, 1405.4, 548.8, 400.0, 331.5, 331.0])
    found = outcome.outcome(spiked, MISSED, finished=True, table={})
    assert found["outcome"] == "diverged" and "331" in found["why"] and "lower the learning rate" in found["why"]
    recovered = spiked[:-1] + with_loss(spiked[-1:], [0.9])
    assert outcome.outcome(recovered, MISSED, finished=True, table={})["outcome"] == "stalled"
    flat = with_loss(curve(None, last=6_000), [3.2] + [3.0] * 10 + [3.5])  # never learned: noise, not divergence
    assert outcome.outcome(flat, MISSED, finished=True, table={})["outcome"] == "stalled"
    # learned, then fell back to chance (ln 23 = 3.14), below twice its first logged loss
    collapsed = with_loss(curve(4000, last=6_000), [1.6, 0.5, 0.18, 0.3] + [164549.0, 75.0, 26.0, 9.0, 6.0, 4.2, 3.2, 3.14])
    assert outcome.outcome(collapsed, MISSED, finished=True, table={})["outcome"] == "diverged"


REMEDY_RUNS = RESULTS / "stall_rate" / "remedy_lr_x3" / "runs"


@pytest.mark.skipif(not REMEDY_RUNS.is_dir(), reason="committed remedy runs absent")
def test_the_committed_remedy_run_that_fell_to_chance_reads_diverged_and_no_other():
    found = {run.name: outcome.classify_run(run)["outcome"] for run in sorted(REMEDY_RUNS.iterdir())}
    assert found.pop("seed=107_kernel=native_threads=1_bf16_remedy=lr_x3") == "diverged"  # at step 29,800
    assert found and "diverged" not in found.values()


def test_the_trainer_warns_once_when_the_loss_diverges():
    from types import SimpleNamespace

    from compose_lens.core.config import RunConfig
    from compose_lens.training.train import Trainer

    lines = []
    bar = SimpleNamespace(write=lambda line, file=None: lines.append(line))
    trainer = SimpleNamespace(_logged=[], step=0, config=RunConfig())
    for step, loss in ((100, 3.2), (200, 1.0), (300, 90.0), (400, 80.0)):
        trainer.step = step
        Trainer._watch_for_stall(trainer, {"step": step, "train_loss": loss}, bar)
    assert len(lines) == 1 and "90 at step 300" in lines[0] and "diverged" in lines[0]


def test_stop_at_decided_stops_a_run_whose_loss_stays_diverged_and_not_one_that_comes_back():
    """The losses of the grid's 4-layer d_model-128 seed-1 run at 3x: one diverged reading at step 2,500
    (1.54, lowest 0.086) that came back (0.094, then 0.003) must not stop it; a loss that stays up for
    DIVERGED_STOP_AFTER evaluations must, at that evaluation."""
    from types import SimpleNamespace

    from compose_lens.core.config import RunConfig
    from compose_lens.data.sampler import POOL_NAMES
    from compose_lens.training.train import Trainer

    def stops(losses):
        bar = SimpleNamespace(write=lambda line, file=None: None)
        trainer = SimpleNamespace(_logged=[], step=0, _checked_at=-10**9,
                                  config=RunConfig().with_overrides(["stop_at=decided"]))
        for i, loss in enumerate(losses):
            trainer.step = 250 * (i + 1)
            pools = {"step": trainer.step, "train_loss": loss, **dict.fromkeys(POOL_NAMES, 0.5)}
            Trainer._watch_for_stall(trainer, pools, bar)
            if Trainer._decided(trainer, pools):
                return trainer.step
        return None

    came_back = [1.383, 1.151, 1.03, 0.644, 0.202, 0.113, 0.199, 0.086, 0.233, 1.541, 0.094, 0.019, 0.023]
    assert stops(came_back) is None
    assert stops(came_back[:9] + [2.0, 1.9, 0.01]) is None  # two readings in a row: not yet
    assert outcome.DIVERGED_STOP_AFTER == 3
    assert stops(came_back[:9] + [7e10, 7e9, 1e9]) == 250 * 12  # the third reading in a row


@pytest.mark.skipif(not (RESULTS / "sweeps" / "r" / "runs").is_dir(), reason="committed sweep runs absent")
def test_committed_runs_the_stalls_and_the_late_learner_are_told_apart():
    runs = RESULTS / "sweeps" / "r" / "runs"
    assert outcome.classify_run(runs / "r=1.0_seed=0")["outcome"] == "stalled"
    assert outcome.classify_run(runs / "r=1.0_seed=1")["outcome"] == "generalised"
    late = outcome.classify_run(runs / "r=0.25_seed=2")  # routing formed at ~29k of 30k
    assert late["outcome"] != "stalled" and late["routing_formed_step"] > 25_000
    # every run the detector calls stalled has 1-var training accuracy below the routed level
    for run in sorted(runs.iterdir()):
        found = outcome.classify_run(run)
        if found["outcome"] == "stalled":
            assert read_metrics(run)[-1]["1var_train"] < 0.9, run.name
        assert found["outcome"] != "diverged", run.name  # none of the study's runs blew up


def test_the_committed_calibration_counts_what_it_says():
    doc = json.loads(outcome.CALIBRATION_FILE.read_text())
    for table in doc["tables"]:
        rows = table["by_step"]
        assert rows[-1]["step"] == table["horizon"]
        assert table["certain_after"] == outcome.stall_certain_after(table)  # the step the docs quote
        assert all(0 <= r["never"] <= r["not_routed"] <= table["runs"] for r in rows)
        # a run that formed none within the horizon is without routing at every step after it learned addition
        assert [r["never"] for r in rows] == sorted(r["never"] for r in rows)
