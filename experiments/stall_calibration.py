"""Calibrate the stall detector on every committed run, and publish its confusion table.

    python experiments/stall_calibration.py            # writes the two files below

Reads every finished run of the study's recipe under ``experiments/results`` (the f and r
sweeps, the three seeds, the stall-rate study; the remedy's runs are left out): its logged pool accuracies (or its per-checkpoint dynamics table) and
its final results. For each run: the step where layer-2 routing formed (the assignment phase's
the 1-var pools' crossing, :data:`compose_lens.outcome.ROUTING`), or none within its budget.

* ``compose_lens/assets/stall_calibration.json``: for every step N (every 500 steps), how many
  runs that had learned addition had no routing yet by N (``not_routed``), and how many of those
  never formed it (``never``); for the runs at the study's setting (f = 0.7, r = 1: ``study``)
  and for all runs (``all``). :mod:`compose_lens.outcome` reads it.
* ``experiments/results/stall_rate/detector_confusion.csv``: the training-time warning ("no
  routing by step N") against each run's final outcome (routing never formed within the
  budget), for several N, on both populations: how many true stalls it warns of, and how many
  late learners it would have wrongly called stalled.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from compose_lens.outcome import CALIBRATION_FILE, onsets
from compose_lens.stats import wilson_interval
from compose_lens.study import HEADLINE
from compose_lens.runs import read_metrics

RESULTS = Path(__file__).resolve().parent / "results"
STEPS = range(1000, 30_001, 500)
WARN_AFTER = (6000, 8000, 10_000, 12_000, 15_000, 20_000)


def finished_runs() -> list[dict]:
    """One dict per finished run: where it came from, its setting, routing step, last step."""
    out = []
    for results_file in sorted(RESULTS.glob("**/runs/*/results.json")):
        run = results_file.parent
        config = json.loads((run / "config.json").read_text())
        if config["train"].get("remedy", "none") != "none":
            continue  # the detector is calibrated on the study's recipe only
        out.append(_entry(str(run.relative_to(RESULTS)), config, json.loads(results_file.read_text()),
                          read_metrics(run)))
    for results_file in sorted((RESULTS / "seeds").glob("results_seed*.json")):
        seed = results_file.stem.split("seed")[-1]
        results = json.loads(results_file.read_text())
        table = pd.read_csv(RESULTS / "seeds" / f"dynamics_seed{seed}.csv")
        out.append(_entry(f"seeds/seed{seed}", results["config"], results, table.to_dict("records")))
    return out


def _entry(name: str, config: dict, results: dict, metrics: list[dict]) -> dict:
    found = onsets(metrics)
    ex = results["exhaustive"]
    return {"run": name, "f": config["task"]["f"], "r": config["task"]["r"], "steps": results["steps"],
            "budget": config["train"]["steps"], "addition": found["addition"], "routing": found["routing"],
            "generalised": min(ex["zero_var_heldout"]["accuracy"], ex["two_var_union"]["accuracy"]) >= HEADLINE}


def by_step(runs: list[dict]) -> list[dict]:
    rows = []
    learned = [r for r in runs if r["addition"] is not None]
    for n in STEPS:
        late = [r for r in learned if r["routing"] is None or r["routing"] > n]
        rows.append({"step": n, "not_routed": len(late), "never": sum(r["routing"] is None for r in late)})
    return rows


def confusion(runs: list[dict], population: str) -> list[dict]:
    out = []
    learned = [r for r in runs if r["addition"] is not None]
    for after in WARN_AFTER:
        warned = [r for r in learned if (r["addition"] or 0) <= after and (r["routing"] is None or r["routing"] > after)]
        stalled = [r for r in learned if r["routing"] is None]
        tp = sum(r["routing"] is None for r in warned)
        fp = len(warned) - tp
        fn = len(stalled) - tp
        out.append({"population": population, "warn_after_step": after, "runs": len(learned),
                    "stalled_in_budget": len(stalled), "warned_and_stalled": tp,
                    "warned_but_recovered": fp, "stalled_not_warned": fn,
                    "not_warned_and_routed": len(learned) - tp - fp - fn,
                    "late_learners_recovered_at": ";".join(str(r["routing"]) for r in warned if r["routing"])})
    return out


def main() -> int:
    runs = finished_runs()
    study = [r for r in runs if (r["f"], r["r"]) == (0.7, 1.0)]
    doc = {"what": "per step N: runs (that learned addition) with no layer-2 routing by N, and how many of "
                   "those never formed it within their budget; made by experiments/stall_calibration.py",
           "study": {"runs": len(study), "by_step": by_step(study)},
           "all": {"runs": len(runs), "by_step": by_step(runs)}}
    CALIBRATION_FILE.write_text(json.dumps(doc, indent=1) + "\n")
    table = pd.DataFrame(confusion(study, "study setting (f=0.7, r=1)") + confusion(runs, "all runs"))
    out = RESULTS / "stall_rate" / "detector_confusion.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(out, index=False)
    pd.DataFrame(runs).to_csv(RESULTS / "stall_rate" / "calibration_runs.csv", index=False)
    print(f"{len(runs)} finished runs ({len(study)} at the study's setting)")
    k = sum(r["routing"] is None and r["addition"] is not None for r in study)
    lo, hi = wilson_interval(k, len(study))
    print(f"study setting: {k} of {len(study)} stalled (routing never formed), 95 % interval [{lo:.2f}, {hi:.2f}]")
    print(table.to_string(index=False))
    print(f"wrote {CALIBRATION_FILE} and {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
