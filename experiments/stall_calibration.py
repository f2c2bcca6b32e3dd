"""Calibrate the stall detector on every committed run, and publish its confusion table.

    python experiments/stall_calibration.py            # writes the files below, prints the table

Reads every finished run of the study's recipe under ``experiments/results`` (the f and r sweeps,
the three seeds, the older stall-rate study on AMD, the by-seed study with its rounding twins and
its stalled seeds trained on to 45,000 steps; the remedy's runs are left out): its logged pool
accuracies (or its per-checkpoint dynamics table) and its final results. For each run: the step
where layer-2 routing formed (the 1-var pools' crossing, :data:`compose_lens.training.outcome.ROUTING`), or
none. A run trained on (``by_seed/extended/runs/X``, a copy of ``by_seed/recipe/runs/X`` given a
larger budget) replaces its shorter self: it is one trajectory, followed further. A set of runs (a
folder, one precision) that holds a run the detector stopped without routing and nobody trained on
is left out whole (its stalls are censored by the detector itself: the paired bf16 by-seed runs).

**A horizon.** "Never formed routing" means nothing without a number of steps: two by-seed runs
without routing at 30,000 steps formed it by 45,000. So each table counts, for a horizon H, the
runs that had learned addition but had no routing by step N (``not_routed``: the runs ``train``
would warn of at N) and how many of those formed none within H steps (``never``), over runs whose
fate up to H is known:

* ``study``, H = 30,000 (the study's budget): every run at the study's setting (f = 0.7, r = 1);
* ``study``, H = 45,000: the by-seed study's native runs, whose every stalled seed was trained on
  to 45,000 steps (the only set followed that far; a run of it censored earlier is an error here);
* ``all``, H = 30,000: every run, for a run at another setting.

Written:

* ``compose_lens/assets/stall_calibration.json``: the tables (every 500 steps, and each table's
  ``certain_after``: the step from which ``stop_at=stalled`` / ``decided`` stops a run it applies
  to, :func:`compose_lens.training.outcome.stall_certain_after`) and the step at which ``train`` warns
  (``warn_after``): the first step at which at least :data:`WARN_PRECISION` of the study-setting
  runs without routing formed none within the study's budget.
  :mod:`compose_lens.training.outcome` reads it.
* ``experiments/results/stall_rate/detector_confusion.csv``: the warning at step N against each
  run's fate within the horizon, for several N, on each table: stalls it warns of, late learners it
  warns of wrongly (and when they routed), its precision with a 95 % Wilson interval.
* ``experiments/results/stall_rate/calibration_runs.csv``: one row per run (its onsets, budget).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pandas as pd

from compose_lens.training.outcome import CALIBRATION_FILE, onsets, stall_certain_after
from compose_lens.training.runs import read_metrics
from compose_lens.core.stats import wilson_interval
from compose_lens.core.study import HEADLINE, SETTING

RESULTS = Path(__file__).resolve().parent / "results"
STUDY = (SETTING["f"], SETTING["r"])
BUDGET = SETTING["steps"]
FOLLOWED = ("stall_rate/by_seed/", "kernel=native", 45_000)  # folder, run-name part, horizon
WARN_PRECISION = 0.9  # train warns once this share of the runs without routing formed none within the budget
MIN_RUNS = 5  # a share of fewer runs without routing is no calibration
CANDIDATE_STEPS = (6000, 8000, 10_000, 12_000, 15_000, 17_000, 20_000)


def finished_runs() -> list[dict]:
    """One dict per finished trajectory: where it came from, its setting, onsets, budget."""
    found: dict[tuple, dict] = {}
    for results_file in sorted(RESULTS.glob("**/runs/*/results.json")):
        run = results_file.parent
        config = json.loads((run / "config.json").read_text())
        if config["train"].get("remedy", "none") != "none":
            continue  # the detector is calibrated on the study's recipe only
        entry = _entry(str(run.relative_to(RESULTS)), config, json.loads(results_file.read_text()),
                       read_metrics(run))
        key = (run.parents[2], run.name)  # a run trained on in a sibling folder is the same trajectory
        if key not in found or entry["budget"] > found[key]["budget"]:
            found[key] = entry
    # a set (folder and precision) holding a run the detector stopped before its budget without routing
    # (stop_at=decided, not trained on) is left out whole: that run's fate is the detector's own reading,
    # and keeping only the set's other runs would leave its stalls out of the tables
    censored = {(key[0], entry["precision"]) for key, entry in found.items()
                if entry["routing"] is None and entry["steps"] < entry["budget"]}
    out = [entry for key, entry in found.items() if (key[0], entry["precision"]) not in censored]
    for results_file in sorted((RESULTS / "seeds").glob("results_seed*.json")):
        seed = results_file.stem.split("seed")[-1]
        results = json.loads(results_file.read_text())
        table = pd.read_csv(RESULTS / "seeds" / f"dynamics_seed{seed}.csv")
        out.append(_entry(f"seeds/seed{seed}", results["config"], results, table.to_dict("records")))
    return sorted(out, key=lambda r: r["run"])


def _entry(name: str, config: dict, results: dict, metrics: list[dict]) -> dict:
    found = onsets(metrics)
    ex = results["exhaustive"]
    return {"run": name, "f": config["task"]["f"], "r": config["task"]["r"], "steps": results["steps"],
            "precision": config["train"]["precision"].replace("auto", "fp32"),
            "budget": config["train"]["steps"], "addition": found["addition"], "routing": found["routing"],
            "generalised": min(ex["zero_var_heldout"]["accuracy"], ex["two_var_union"]["accuracy"]) >= HEADLINE}


def populations(runs: list[dict]) -> list[dict]:
    """The calibration's populations: (setting, horizon, what, runs)."""
    study = [r for r in runs if (r["f"], r["r"]) == STUDY]
    folder, part, horizon = FOLLOWED
    followed = [r for r in study if r["run"].startswith(folder) and part in r["run"]]
    censored = [r["run"] for r in followed if r["routing"] is None and r["budget"] < horizon]
    if censored:
        raise SystemExit(f"error: {len(censored)} run(s) of {folder} without routing stopped before "
                         f"{horizon} steps ({censored[0]}, ...): train them on to {horizon} or drop that horizon")
    return [
        {"setting": "study", "horizon": BUDGET, "runs": study,
         "population": "every committed run at the study's setting (f = 0.7, r = 1)"},
        {"setting": "study", "horizon": horizon, "runs": followed,
         "population": "the by-seed study's native runs, every stalled seed trained on to 45,000 steps"},
        {"setting": "all", "horizon": BUDGET, "runs": runs,
         "population": "every committed run of the recipe (f and r sweeps too)"},
    ]


def learned(runs: list[dict]) -> list[dict]:
    return [r for r in runs if r["addition"] is not None]


def never(run: dict, horizon: int) -> bool:
    """No routing within ``horizon`` steps."""
    return run["routing"] is None or run["routing"] > horizon


def by_step(runs: list[dict], horizon: int) -> list[dict]:
    rows = []
    for n in range(1000, horizon + 1, 500):
        late = [r for r in learned(runs) if r["addition"] <= n and (r["routing"] is None or r["routing"] > n)]
        rows.append({"step": n, "not_routed": len(late), "never": sum(never(r, horizon) for r in late)})
    return rows


def warn_after(table: list[dict]) -> int:
    """The first step at which at least :data:`WARN_PRECISION` of (at least :data:`MIN_RUNS`) runs
    without routing formed none within the horizon."""
    for row in table:
        if row["not_routed"] >= MIN_RUNS and row["never"] >= WARN_PRECISION * row["not_routed"]:
            return row["step"]
    raise SystemExit(f"error: no step reaches a precision of {WARN_PRECISION}; the warning needs another rule")


def confusion(population: dict, steps) -> list[dict]:
    out = []
    horizon, runs = population["horizon"], learned(population["runs"])
    stalled = [r for r in runs if never(r, horizon)]
    for after in steps:
        if after > horizon:
            continue
        warned = [r for r in runs if r["addition"] <= after and (r["routing"] is None or r["routing"] > after)]
        tp = sum(never(r, horizon) for r in warned)
        late = sorted(r["routing"] for r in warned if not never(r, horizon))
        low, high = wilson_interval(tp, len(warned))
        out.append({"setting": population["setting"], "horizon": horizon, "warn_after_step": after,
                    "runs": len(runs), "stalled_in_horizon": len(stalled), "warned": len(warned),
                    "warned_and_stalled": tp, "warned_but_routed": len(late),
                    "stalled_not_warned": len(stalled) - tp,
                    "precision": tp / len(warned) if warned else float("nan"),
                    "precision_low": low, "precision_high": high,
                    "late_routed_at": ";".join(str(int(s)) for s in late)})
    return out


def main() -> int:
    runs = finished_runs()
    found = populations(runs)
    study = found[0]
    tables = [{"setting": p["setting"], "horizon": p["horizon"], "population": p["population"],
               "runs": len(p["runs"]), "by_step": by_step(p["runs"], p["horizon"])} for p in found]
    for t in tables:  # where stop_at=stalled / decided stops a run this table applies to (outcome reads by_step)
        t["certain_after"] = stall_certain_after(t, MIN_RUNS)
    warn = warn_after(tables[0]["by_step"])
    doc = {"what": "per table: for each step N, runs (that learned addition) with no layer-2 routing by N "
                   "(not_routed), and how many of those formed none within the table's horizon (never); "
                   "made by experiments/stall_calibration.py",
           "warn_after": warn, "warn_precision": WARN_PRECISION, "min_runs": MIN_RUNS, "tables": tables}
    text = json.dumps(doc, indent=1)  # one line per step's row:
    text = re.sub(r'\{\s+"step": (\d+),\s+"not_routed": (\d+),\s+"never": (\d+)\s+\}',
                  r'{"step": \1, "not_routed": \2, "never": \3}', text)
    CALIBRATION_FILE.write_text(text + "\n")
    steps = sorted({*CANDIDATE_STEPS, warn, *range(20_000, 45_001, 5000), *(t["certain_after"] for t in tables)} - {None})
    table = pd.DataFrame([row for p in found for row in confusion(p, steps)])
    out = RESULTS / "stall_rate" / "detector_confusion.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(out, index=False)
    pd.DataFrame(runs).to_csv(RESULTS / "stall_rate" / "calibration_runs.csv", index=False)
    print(f"{len(runs)} finished runs ({len(study['runs'])} at the study's setting); train warns at step {warn}")
    print(table.to_string(index=False))
    print(f"wrote {CALIBRATION_FILE}, {out} and calibration_runs.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
