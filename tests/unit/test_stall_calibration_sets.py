"""The detector's calibration leaves out a set of runs whose stalls the detector itself cut short."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments"))
import stall_calibration as calibration  # noqa: E402


def _run(root: Path, folder: str, name: str, precision: str, steps: int, routing: int | None) -> None:
    run = root / folder / "runs" / name
    run.mkdir(parents=True)
    config = {"task": {"f": 0.7, "r": 1.0}, "train": {"steps": 30000, "precision": precision}}
    (run / "config.json").write_text(json.dumps(config))
    exhaustive = {k: {"accuracy": 0.99 if routing else 0.3} for k in ("zero_var_heldout", "two_var_union")}
    (run / "results.json").write_text(json.dumps({"steps": steps, "exhaustive": exhaustive}))
    (run / "metrics.jsonl").write_text(json.dumps({"step": 100, "routing": routing}) + "\n")


def test_a_set_with_a_run_the_detector_stopped_is_left_out_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(calibration, "RESULTS", tmp_path)
    monkeypatch.setattr(calibration, "onsets", lambda metrics: {"addition": 1000, "routing": metrics[-1]["routing"]})
    _run(tmp_path, "study/recipe", "seed=1_fp32", "fp32", 30000, None)  # trained the whole budget: no routing
    _run(tmp_path, "study/recipe", "seed=2_fp32", "fp32", 12000, 3000)
    _run(tmp_path, "study/recipe", "seed=1_bf16", "bf16", 17000, None)  # stopped by the detector: censored
    _run(tmp_path, "study/recipe", "seed=2_bf16", "bf16", 11000, 2500)
    kept = sorted(r["run"] for r in calibration.finished_runs())
    assert kept == ["study/recipe/runs/seed=1_fp32", "study/recipe/runs/seed=2_fp32"]
    # trained on to its budget in a sibling folder, the stopped run is no longer censored: its set stays
    _run(tmp_path, "study/extended", "seed=1_bf16", "bf16", 30000, None)
    assert len(calibration.finished_runs()) == 4
