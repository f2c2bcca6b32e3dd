"""Thresholds with 95 % intervals, phase onsets and compute of the f and r sweeps (issue #15).

    python experiments/sweep_thresholds.py SWEEP [SWEEP ...] --out experiments/results/sweeps/

SWEEP is a sweep directory (``compose-lens sweep --out``; every point directory under
``runs/`` is read, whichever pass made it, and points still training are left out of the
fits) or a sweep's ``results.csv`` (then there are no phases: the run directories it names
are gone). For each SWEEP, ``OUT/NAME/`` (NAME: the directory's name, or the CSV's stem)
receives:

* ``points.csv``: every point's row (final exhaustive and pool accuracies, status, steps,
  train_wall_time_s, threads, run_dir), except in the sweep directory itself, where the
  sweep's ``results.csv`` holds the same rows;
* ``phases.csv``: each point's phase onset steps by the dynamics rule on its logged pool
  accuracies (``compose_lens.registry.dynamics.checkpoints.sweep_onsets``), and ``addition_first``;
* ``fit.json``: per metric the logistic fit, its 50 % and 90 % crossings with 95 % bootstrap
  intervals (``compose_lens.analysis.thresholds.fit_thresholds``), the study's threshold,
  the per-seed crossings of the older rule (``thresholds``) as a check on the fit's shape,
  the points and seeds used, the steps, and the compute (sum of train_wall_time_s and
  core-hours = sum of train_wall_time_s x threads / 3600), and the addition-first count;
* ``fit.png`` (+ ``fit.csv``): accuracy against the parameter, every seed's points, the fit,
  the crossings with their intervals, the study's value; ``onsets.png`` (+ ``onsets.csv``).

With ``--out`` the parent of the sweep directories (the recipe in
``experiments/results/sweeps/README.md``) these files land inside each sweep directory, beside
``results.csv``; ``compose-lens sweep`` writes none of these names.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from compose_lens.core.study import THRESHOLDS as STUDY_THRESHOLDS
from compose_lens.registry.dynamics.checkpoints import addition_first_summary, sweep_onsets
from compose_lens.analysis.thresholds import (BOOTSTRAP_REPLICATES, LEVELS, METRICS,
                                              THRESHOLD_RULE, fit_thresholds, numeric, thresholds)
from compose_lens.core.files import json_safe, write_json_atomic
from compose_lens.views.drawing import save
from compose_lens.views.sweeps import onsets_figure, threshold_fit_figure
from compose_lens.core.provenance import provenance
from compose_lens.sweep import read_csv, sweep_rows, write_csv


def load_rows(source: Path) -> tuple[str, list[dict]]:
    """(name, rows) of a sweep directory or a results.csv."""
    if source.is_dir():
        return source.name, sweep_rows(source)
    return source.stem, read_csv(source)


def compute_used(rows: list[dict]) -> dict:
    """What the finished points cost: their count, steps, training seconds and core-hours."""
    done = [r for r in rows if r.get("status") == "done"]
    seconds = [numeric(r.get("train_wall_time_s")) for r in done]
    threads = [numeric(r.get("threads")) or 1.0 for r in done]  # rows of old sweeps lack it: 1 thread
    known = [(s, t) for s, t in zip(seconds, threads) if s is not None and not math.isnan(s)]
    return {"points_finished": len(done), "points_pending": sum(r.get("status") == "pending" for r in rows),
            "points_failed": sum(r.get("status") == "failed" for r in rows),
            "steps": sorted({int(float(r["steps"])) for r in done if r.get("steps") not in ("", None)}),
            "train_wall_time_s_sum": round(sum(s for s, _ in known), 1),
            "core_hours": round(sum(s * t for s, t in known) / 3600, 3),
            "threads_per_point": sorted({int(t) for t in threads}),
            "points_without_wall_time": len(done) - len(known)}


def analyse(source: Path, out: Path, replicates: int) -> dict:
    name, rows = load_rows(source)
    if not rows:
        raise SystemExit(f"{source}: no sweep points")
    param = rows[0]["param"]
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    if not (source.is_dir() and folder.resolve() == source.resolve()):
        write_csv(rows, folder / "points.csv")
    onsets = sweep_onsets(rows)
    onsets.to_csv(folder / "phases.csv", index=False)
    fits = {metric: fit_thresholds(rows, metric, LEVELS, replicates) for metric in METRICS}
    study_metric, study_value = STUDY_THRESHOLDS.get(param, (None, None))
    document = {"sweep": str(source), "param": param, "study": {"metric": study_metric, "value": study_value},
                "fits": fits, "per_seed_rule": {"rule": THRESHOLD_RULE, "thresholds": thresholds(rows)},
                "compute": compute_used(rows), "phases": addition_first_summary(onsets),
                "provenance": provenance(command=["experiments/sweep_thresholds.py", str(source)])}
    write_json_atomic(folder / "fit.json", json_safe(document))
    study = {study_metric: study_value} if study_metric else None
    title = f"{name}: {param} sweep, {document['compute']['points_finished']} finished points"
    save(*threshold_fit_figure(rows, fits, param, study, title), folder / "fit.png")
    if onsets["last_logged_step"].notna().any():
        pending = int((onsets["status"] == "pending").sum())
        note = f"; {pending} still training: provisional" if pending else ""
        save(*onsets_figure(onsets, param, f"{name}: phase onsets (dynamics rule on metrics.jsonl{note})"),
             folder / "onsets.png")
    return document


def summary_lines(document: dict) -> list[str]:
    lines = [f"{document['sweep']} ({document['param']}): {json.dumps(document['compute'])}",
             f"  addition first: {json.dumps(document['phases'])}"]
    for metric, found in document["fits"].items():
        for level, s in found.get("levels", {}).items():
            lines.append(f"  {metric} {float(level):.0%}: {s['estimate']} ({s['where']}), "
                         f"95 % CI {s['ci95']} ({', '.join(s['ci95_where'])}); {found['points']} points, "
                         f"seeds {found['seeds']}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="+", type=Path, help="sweep directories or results.csv files")
    parser.add_argument("--out", type=Path, required=True, help="one folder per sweep is written here")
    parser.add_argument("--replicates", type=int, default=BOOTSTRAP_REPLICATES, help="bootstrap replicates")
    args = parser.parse_args()
    for source in args.sweeps:
        for line in summary_lines(analyse(source, args.out, args.replicates)):
            print(line)


if __name__ == "__main__":
    main()
