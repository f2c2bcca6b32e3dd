"""experiments/sweep_thresholds.py end to end on a small synthetic sweep: the files it promises,
the compute it adds up, and a threshold it must find."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def write_sweep_csv(path: Path) -> None:
    rng = np.random.default_rng(1)
    rows = []
    for seed in (0, 1, 2):
        for value in np.round(np.arange(0.1, 0.7, 0.05), 3):
            acc = 0.03 + 0.95 / (1 + math.exp(-(value - 0.35) / 0.03)) + rng.normal(0, 0.02)
            rows.append({"param": "f", "value": str(value), "seed": seed, "status": "done", "error": "",
                         "steps": 30000, "train_wall_time_s": 600.0, "threads": 2,
                         "zero_var_heldout_accuracy": min(max(acc, 0.0), 1.0), "two_var_union_accuracy": 0.3,
                         "run_dir": str(path.parent / "gone" / f"f={value}_seed={seed}")})
    rows.append({**rows[0], "value": "0.05", "status": "failed", "zero_var_heldout_accuracy": "",
                 "two_var_union_accuracy": "", "train_wall_time_s": "", "steps": ""})
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_the_script_writes_points_phases_fit_and_figure(tmp_path):
    source = tmp_path / "old_f.csv"
    write_sweep_csv(source)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "experiments/sweep_thresholds.py", str(source), "--out",
                          str(tmp_path / "out"), "--replicates", "40"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    folder = tmp_path / "out" / "old_f"
    assert {p.name for p in folder.iterdir()} >= {"points.csv", "phases.csv", "fit.json", "fit.png", "fit.csv"}
    assert not (folder / "onsets.png").exists()  # the run directories are gone: no onsets to draw
    fit = json.loads((folder / "fit.json").read_text())
    assert fit["study"] == {"metric": "zero_var_heldout", "value": 0.25}
    assert fit["compute"]["points_finished"] == 36 and fit["compute"]["points_failed"] == 1
    assert fit["compute"]["core_hours"] == 36 * 600.0 * 2 / 3600 and fit["compute"]["steps"] == [30000]
    half = fit["fits"]["zero_var_heldout"]["levels"]["0.5"]
    assert abs(half["estimate"] - 0.35) < 0.01 and half["ci95"][0] <= half["estimate"] <= half["ci95"][1]
    assert fit["fits"]["two_var_union"]["levels"]["0.5"]["estimate"] is None  # flat at 0.3
    rule = fit["per_seed_rule"]["thresholds"]["zero_var_heldout"]["0.5"]
    assert abs(rule["mean"] - 0.35) < 0.02 and set(rule["per_seed"]) == {"0", "1", "2"}
    assert len(list(csv.DictReader(open(folder / "points.csv")))) == 37


def test_in_the_sweep_directory_the_rows_stay_in_results_csv(tmp_path):
    """Beside a sweep's own results.csv the script writes no second copy of its rows."""
    import shutil

    sweep = tmp_path / "f"
    shutil.copytree(ROOT / "experiments/results/sweeps/f", sweep,
                    ignore=shutil.ignore_patterns("points.csv", "fit*", "phases.csv", "onsets*"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "experiments/sweep_thresholds.py", str(sweep), "--out", str(tmp_path),
                          "--replicates", "40"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (sweep / "fit.json").exists() and (sweep / "phases.csv").exists()
    assert not (sweep / "points.csv").exists()
    fit = json.loads((sweep / "fit.json").read_text())
    assert fit["compute"]["points_finished"] == len(list(csv.DictReader(open(sweep / "results.csv"))))
