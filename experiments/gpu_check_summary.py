"""The device check's results as two files: one row per trajectory, and one summary.

``experiments/gpu_check.sh`` trains as many trajectories of the study's setting as fit in its
window (``experiments/stall_rate.py``: one ``compose-lens train`` per seed, bf16 autocast,
``stop_at=decided``) and times the paper step single and stacked (``experiments/bench_batched.py``).
This reads what they left:

* ``trajectories.csv``: per trajectory its seed, whether it finished in the window, the step
  it reached, its outcome (:func:`compose_lens.training.outcome.classify_run`: generalised, stalled,
  diverged, or learning when cut off undecided), its final exhaustive accuracies and wall time;
* ``summary.json``: the device, torch, the step times read from the benchmark's log, the
  outcome counts, and the throughput of the window: finished runs per GPU-hour and 30,000-step
  run-equivalents per GPU-hour (every step trained, finished or not, over 30,000);
* ``runs.tar.gz``: each run's ``config.json``, ``metrics.jsonl`` and ``results.json`` (what the
  repository keeps of a run), so the trajectories can be committed and re-read.

    python experiments/gpu_check_summary.py --runs RUNS_DIR --bench BENCH_LOG --window-s S --out OUT
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import tarfile
from pathlib import Path

import torch

from compose_lens.training.outcome import classify_run
from compose_lens.training.runs import read_metrics

STUDY_STEPS = 30_000
KEPT = ("config.json", "metrics.jsonl", "results.json")  # what the repository keeps of a run
BENCH_HEAD = re.compile(r"paper model, batch 512, (\d+) runs, .* device (\S+), (\d+) thread")
BENCH_TIME = re.compile(r"(separate Trainers|one BatchedTrainer):\s*([\d.]+) ms per run-step")


def trajectory_rows(runs_dir: Path) -> list[dict]:
    rows = []
    for run in sorted(p for p in runs_dir.glob("*") if p.is_dir() and (p / "config.json").exists()):
        config = json.loads((run / "config.json").read_text())
        results = json.loads((run / "results.json").read_text()) if (run / "results.json").exists() else None
        found = classify_run(run)
        metrics = read_metrics(run)
        exhaustive = (results or {}).get("exhaustive", {})
        rows.append({
            "run": run.name, "seed": config["train"]["seed"], "device": config["train"]["device"],
            "precision": config["train"]["precision"], "budget_steps": config["train"]["steps"],
            "finished": results is not None, "steps": found["steps"] or (metrics[-1]["step"] if metrics else 0),
            "outcome": found["outcome"], "routing_formed_step": found["routing_formed_step"],
            "zero_var_heldout": exhaustive.get("zero_var_heldout", {}).get("accuracy", ""),
            "two_var_union": exhaustive.get("two_var_union", {}).get("accuracy", ""),
            "train_wall_time_s": (results or {}).get("train_wall_time_s", ""),
        })
    return rows


def bench_times(log: Path) -> list[dict]:
    """Each benchmark of the log: runs K, device, threads, ms per run-step alone and stacked."""
    out: list[dict] = []
    if not log.exists():
        return out
    for line in log.read_text().splitlines():
        if head := BENCH_HEAD.search(line):
            out.append({"runs": int(head.group(1)), "device": head.group(2), "threads": int(head.group(3))})
        elif (time := BENCH_TIME.search(line)) and out:
            key = "separate_ms_per_run_step" if time.group(1).startswith("separate") else "stacked_ms_per_run_step"
            out[-1][key] = float(time.group(2))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=Path, required=True, help="the runs/ folder of experiments/stall_rate.py --out")
    p.add_argument("--bench", type=Path, required=True, help="the log of experiments/bench_batched.py")
    p.add_argument("--window-s", type=float, required=True, help="seconds the trajectories were given")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    rows = trajectory_rows(a.runs)
    if rows:
        with open(a.out / "trajectories.csv", "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    with tarfile.open(a.out / "runs.tar.gz", "w:gz") as tar:
        for run in sorted(a.runs.glob("*")):
            for name in KEPT:
                if (run / name).exists():
                    tar.add(run / name, arcname=f"{run.name}/{name}")
    hours = a.window_s / 3600
    finished = [r for r in rows if r["finished"]]
    steps = sum(int(r["steps"] or 0) for r in rows)
    outcomes = {o: sum(1 for r in finished if r["outcome"] == o) for o in sorted({r["outcome"] for r in finished})}
    summary = {
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "torch": torch.__version__, "window_s": a.window_s, "trajectories_started": len(rows),
        "trajectories_finished": len(finished), "outcomes_of_finished": outcomes,
        "unfinished_steps_reached": sorted(int(r["steps"] or 0) for r in rows if not r["finished"]),
        "steps_trained": steps,
        "finished_runs_per_gpu_hour": len(finished) / hours if hours else None,
        "study_run_equivalents_per_gpu_hour": steps / STUDY_STEPS / hours if hours else None,
        "bench": bench_times(a.bench),
    }
    (a.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
