"""experiments/modularity_grid.py's bookkeeping: the table a later session writes keeps the points an
earlier one measured, a point measured again replaces its old row, ``grid`` does not train a point the
table already has unless it ended below the bar while still learning, and such a point trains on to
the longer budget, and one whose loss diverged at the proxy's learning rate is trained again at the
study's (tiny points train: 20-50 steps at p = 7)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]


def grid_script():
    spec = importlib.util.spec_from_file_location("modularity_grid", ROOT / "experiments" / "modularity_grid.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def row(n_layers: int, d_model: int, n_heads: int, every: bool, seed: int, separation: float,
        union: float = 0.9, outcome: str = "learning", budget: int = 6000) -> dict:
    return {"name": f"L{n_layers}_d{d_model}_h{n_heads}_s{seed}", "n_layers": n_layers, "d_model": d_model,
            "n_heads": n_heads, "mlp_blocks": "every" if every else "last", "seed": seed, "steps": budget,
            "budget": budget, "outcome": outcome, "zero_var_heldout": 0.95, "two_var_union": union,
            "modularity_separation": separation, "modularity_same_adder": 1.0,
            "modularity_circuit_fraction": 0.7, "modularity_verdict": "modular"}


def test_a_later_table_keeps_earlier_points_and_a_remeasured_point_replaces_its_row(tmp_path):
    g = grid_script()
    out, work = tmp_path / "results", tmp_path / "work"
    out.mkdir()
    pd.DataFrame([row(2, 64, 1, False, 0, 0.90), row(2, 128, 1, False, 0, 0.91)]).to_csv(out / "grid.csv", index=False)
    for r in (row(2, 128, 1, False, 0, 0.50), row(3, 64, 1, True, 1, 0.80)):  # one again, one new
        (work / r["name"]).mkdir(parents=True)
        (work / r["name"] / "point.json").write_text(json.dumps(r))
    frame = g.table(work, out)
    written = pd.read_csv(out / "grid.csv")
    assert len(frame) == len(written) == 3
    by_key = {(r.n_layers, r.d_model, r.mlp_blocks, r.seed): r.modularity_separation for r in written.itertuples()}
    assert by_key == {(2, 64, "last", 0): 0.90, (2, 128, "last", 0): 0.50, (3, 64, "every", 1): 0.80}
    assert all((out / f"{axis}.png").stat().st_size > 0 for axis in g.AXES)


def test_grid_leaves_out_the_points_the_table_has(tmp_path):
    g = grid_script()
    every = g.points(None)
    assert g.todo(None, tmp_path) == every  # no table yet: every point
    done = [p for p in every if p[1] == 64]
    pd.DataFrame([row(*p, 0.9) for p in done]).to_csv(tmp_path / "grid.csv", index=False)
    left = g.todo(None, tmp_path)
    assert left == [p for p in every if p[1] != 64]
    assert len(left) == len(every) - len(done) > 0


def test_grid_runs_again_a_tabled_point_still_learning_below_the_bar_and_no_other(tmp_path):
    g = grid_script()
    a, b, c, d = g.points(None)[:4]
    rows = [row(*a, 0.9, union=0.7), row(*b, 0.9, union=0.7, budget=g.LONGER),
            {**row(*c, 0.9, union=0.7, outcome="diverged"), "remedy": "none"}, row(*d, 0.9, union=0.7, outcome="stalled")]
    pd.DataFrame(rows).to_csv(tmp_path / "grid.csv", index=False)
    left = g.todo(None, tmp_path)
    assert a in left and not {b, c, d} & set(left)  # only the one that has not had the longer budget
    rows[2]["remedy"] = "lr_x3"  # diverged at the proxy's rate: trained again at the study's
    pd.DataFrame(rows).to_csv(tmp_path / "grid.csv", index=False)
    assert c in g.todo(None, tmp_path)


TINY = ["modulus=7", "n_vars=6", "f=0.8", "batch_size=64", "eval_every=10", "checkpoint_every=10", "pool_size=64"]


def test_a_point_below_the_bar_trains_on_to_the_longer_budget(tmp_path):
    g = grid_script()
    tiny = TINY
    point = g.run_point(2, 32, 1, False, 0, work=tmp_path, steps=20, extra=tiny, measure_n=8,
                        learned_at=0.99, longer=40)
    run = tmp_path / g.name_of(2, 32, 1, False, 0)
    assert point["outcome"] == "learning" and point["budget"] == 40 and point["steps"] == 40
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [10, 20, 30, 40]  # trained on from step 20, not again from 0
    assert json.loads((run / "checkpoints" / "step_000020" / "results.json").read_text())["steps"] == 20
    assert point["modularity_verdict"] == "inconclusive"  # 40 steps do not reach the bar
    again = g.run_point(2, 32, 1, False, 0, work=tmp_path, steps=20, extra=tiny, learned_at=0.99, longer=40)
    assert again["budget"] == 40 and len((run / "metrics.jsonl").read_text().splitlines()) == 4  # nothing trained
    # a later, longer budget trains the measured point on again (its point.json is not a run's file)
    on = g.run_point(2, 32, 1, False, 0, work=tmp_path, steps=20, extra=tiny, measure_n=8, learned_at=0.99, longer=50)
    assert on["budget"] == on["steps"] == 50 and len((run / "metrics.jsonl").read_text().splitlines()) == 5


def test_a_point_that_diverged_at_the_proxy_rate_is_trained_again_at_the_study_rate(tmp_path, monkeypatch):
    g = grid_script()
    real = g.outcome.classify_run

    def planted(run):  # the proxy-rate run reads diverged; the retry is judged for real
        found = real(run)
        return found if g.STUDY_LR in str(run) else {**found, "outcome": "diverged", "why": "planted spike"}

    monkeypatch.setattr(g.outcome, "classify_run", planted)
    row = g.run_point(2, 32, 1, False, 0, work=tmp_path, steps=20, extra=TINY, measure_n=8, learned_at=0.99,
                      longer=20)
    name = g.name_of(2, 32, 1, False, 0)
    retry = tmp_path / g.STUDY_LR / name
    assert json.loads((tmp_path / name / "config.json").read_text())["train"]["remedy"] == "lr_x3"
    assert json.loads((retry / "config.json").read_text())["train"]["remedy"] == "none"
    assert row["remedy"] == "none" and "planted spike" in row["retried_because"] and row["outcome"] == "learning"
    assert json.loads((tmp_path / name / "point.json").read_text())["remedy"] == "none"
    assert g.table(tmp_path, tmp_path / "out")["remedy"].tolist() == ["none"]
