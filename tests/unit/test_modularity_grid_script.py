"""experiments/modularity_grid.py's bookkeeping, on made-up rows (nothing trains): the table a later
session writes keeps the points an earlier one measured, a point measured again replaces its old row,
and ``grid`` does not train a point the table already has."""

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


def row(n_layers: int, d_model: int, n_heads: int, every: bool, seed: int, separation: float) -> dict:
    return {"name": f"L{n_layers}_d{d_model}_h{n_heads}_s{seed}", "n_layers": n_layers, "d_model": d_model,
            "n_heads": n_heads, "mlp_blocks": "every" if every else "last", "seed": seed, "steps": 6000,
            "outcome": "learning", "zero_var_heldout": 0.95, "two_var_union": 0.9,
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
