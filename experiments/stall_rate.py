"""How often does the study's recipe stall? Many trajectories at the study's setting, one table.

    python experiments/stall_rate.py --out experiments/results/stall_rate/fp32 \\
        --seeds 100-111 --kernels native default --workers 2
    python experiments/stall_rate.py --out experiments/results/stall_rate/fp32 --table

Each trajectory is one ``compose-lens train`` at the study's setting (f = 0.7, r = 1, 30,000
steps, batch 512) with its own seed (split, initial weights and data order all set from it) and
its own rounding: the CPU kernels torch picks (``native``: what this CPU offers; ``default``:
``ATEN_CPU_CAPABILITY=default``, the scalar kernels), the thread count and ``torch.compile``.
The same seed under two kernel settings is two trajectories that differ in rounding alone.
Runs stop early once the study's headline holds (``stop_at=generalised``); every other run
trains the full budget, so a late learner is never cut short.

A run directory keeps ``config.json``, ``metrics.jsonl`` and ``results.json`` (the weights are
ignored by git); a finished run is skipped and an interrupted one resumes, so the study can be
continued from the repository on any machine. ``--table`` (also written after every run)
reads every run directory, classifies it with :mod:`compose_lens.outcome`, and writes
``runs.csv`` (one row per run) and ``summary.json`` (the stall fraction with its 95 % Wilson
interval, per precision and overall).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd

from compose_lens.outcome import classify_run, wilson_interval

KERNELS = {"native": {}, "default": {"ATEN_CPU_CAPABILITY": "default"},
           "avx2": {"ATEN_CPU_CAPABILITY": "avx2"}}


def seeds_of(specs: list[str]) -> list[int]:
    out = []
    for spec in specs:
        lo, _, hi = spec.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def run_name(seed: int, kernel: str, threads: int, precision: str, compile_: str, remedy: str,
             device: str = "cpu") -> str:
    name = f"seed={seed}_kernel={kernel}_threads={threads}_{precision}"
    if device != "cpu":
        name += f"_{device.replace(':', '')}"
    if compile_ == "on":
        name += "_compiled"
    if remedy != "none":
        name += f"_remedy={remedy}"
    return name


def train_one(out: Path, seed: int, kernel: str, threads: int, precision: str, compile_: str,
              remedy: str, steps: int, device: str = "cpu", stop_at: str = "generalised") -> str:
    run = out / "runs" / run_name(seed, kernel, threads, precision, compile_, remedy, device)
    if (run / "results.json").exists():
        return f"{run.name}: done already"
    sets = [f"seed={seed}", f"init_seed={seed}", f"train.seed={seed}", f"threads={threads}",
            f"precision={precision}", f"compile={compile_}", f"stop_at={stop_at}", f"device={device}",
            "checkpoint_every=2500", "pool_size=1000", f"steps={steps}"]
    if remedy != "none":
        sets.append(f"remedy={remedy}")
    cmd = [sys.executable, "-m", "compose_lens.cli", "train", "--out", str(run), "--quiet"]
    for s in sets:
        cmd += ["--set", s]
    if (run / "resume.safetensors").exists() or (run / "config.json").exists():
        cmd = [sys.executable, "-m", "compose_lens.cli", "train", "--out", str(run), "--resume", "--quiet"]
    env = {**os.environ, **KERNELS[kernel], "OMP_NUM_THREADS": str(threads)}
    started = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    took = time.perf_counter() - started
    if proc.returncode != 0:
        return f"{run.name}: FAILED ({proc.returncode}) {proc.stderr.strip().splitlines()[-1:]}"
    row = classify_run(run)
    return f"{run.name}: {row['outcome']} at step {row['steps']} ({took:.0f} s)"


def table(out: Path) -> pd.DataFrame:
    rows = []
    for run in sorted((out / "runs").glob("*")):
        if not (run / "results.json").exists():
            continue
        cfg = json.loads((run / "config.json").read_text())
        res = json.loads((run / "results.json").read_text())
        row = classify_run(run)
        rows.append({
            "run": run.name, "seed": cfg["train"]["seed"], "f": cfg["task"]["f"], "r": cfg["task"]["r"],
            "precision": cfg["train"]["precision"].replace("auto", "fp32"),
            "threads": res.get("threads"), "kernel": run.name.split("kernel=")[1].split("_")[0],
            "device": cfg["train"]["device"],
            "compiled": res.get("compiled"), "remedy": cfg["train"].get("remedy", "none"),
            "steps": res["steps"], "outcome": row["outcome"],
            "routing_formed_step": row["routing_formed_step"],
            "zero_var_heldout": res["exhaustive"]["zero_var_heldout"]["accuracy"],
            "two_var_union": res["exhaustive"]["two_var_union"]["accuracy"],
            "1var_train_final": row["final_1var_train"],
            "train_wall_time_s": res.get("train_wall_time_s"),
        })
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    df.to_csv(out / "runs.csv", index=False)
    summary = {}
    for key, group in [("all", df), *[(f"precision={p}", g) for p, g in df.groupby("precision")],
                       *[(f"kernel={k}", g) for k, g in df.groupby("kernel")]]:
        n, k = len(group), int((group["outcome"] == "stalled").sum())
        lo, hi = wilson_interval(k, n)
        summary[key] = {"runs": n, "stalled": k, "stall_fraction": k / n, "interval_95": [lo, hi],
                        "generalised": int((group["outcome"] == "generalised").sum())}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return df


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--seeds", nargs="*", default=["100-111"], help="seeds or ranges (100-111)")
    p.add_argument("--kernels", nargs="*", default=["native", "default"], choices=sorted(KERNELS))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--compile", default="off", choices=["off", "on"])
    p.add_argument("--remedy", default="none")
    p.add_argument("--steps", type=int, default=30_000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--device", default="cpu", help="cpu or cuda (the GPU check trains there)")
    p.add_argument("--stop-at", default="generalised", choices=["generalised", "decided"],
                   help="generalised: stalls train the whole budget (the study here); decided: also stop "
                        "once the detector is certain of a stall")
    p.add_argument("--table", action="store_true", help="only re-read the run directories")
    a = p.parse_args(argv)

    def refuse(line: str) -> int:  # bad input: one line, exit 2, nothing trained or tabled
        print(f"stall_rate: error: {line}", file=sys.stderr)
        return 2

    if a.out.exists() and not a.out.is_dir():
        return refuse(f"--out {a.out}: is a file, not a folder; name the folder of the runs")
    if not a.table:
        try:
            seeds = seeds_of(a.seeds)
        except ValueError:
            return refuse(f"--seeds {' '.join(a.seeds)}: give whole numbers or ranges of them (100 or 100-111)")
        if not seeds:  # a range written high-low holds no seed: nothing would train, and nothing be said
            return refuse(f"--seeds {' '.join(a.seeds)}: no seed in it; write a range low-high (100-111)")
        if a.workers < 1 or a.steps < 1 or a.threads < 1:
            return refuse(f"--workers {a.workers}, --steps {a.steps}, --threads {a.threads}: each must be at least 1")
        jobs = [(s, k) for s in seeds for k in a.kernels]
        # a run already there goes on (or is tabled) as it was trained: a changed budget or stop rule
        # would table the old run under the new settings, so it is refused before anything trains
        for s, k in jobs:
            run = a.out / "runs" / run_name(s, k, a.threads, a.precision, a.compile, a.remedy, a.device)
            if not (run / "config.json").exists():
                continue
            try:
                saved = json.loads((run / "config.json").read_text())["train"]
                trained = {"steps": int(saved["steps"]), "stop-at": saved.get("stop_at", "end")}
            except (OSError, ValueError, KeyError, TypeError):
                return refuse(f"{run}/config.json: not a compose-lens run's config; move the run away")
            for option, asked in (("steps", a.steps), ("stop-at", a.stop_at)):
                if trained[option] != asked:
                    return refuse(f"{run}: was trained with --{option} {trained[option]}, not {asked}; "
                                  f"use another --out for other settings (the table would mix the two)")
        with ThreadPoolExecutor(a.workers) as pool:
            futures = [pool.submit(train_one, a.out, s, k, a.threads, a.precision, a.compile, a.remedy, a.steps,
                                   a.device, a.stop_at) for s, k in jobs]
            for fut in futures:
                print(fut.result(), flush=True)
                table(a.out)
    df = table(a.out)
    if not df.empty:
        print(df[["run", "steps", "outcome", "zero_var_heldout", "two_var_union"]].to_string(index=False))
        print(json.dumps(json.loads((a.out / "summary.json").read_text()), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
