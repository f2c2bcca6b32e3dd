"""The main job: train the paper model from scratch on CPU, evaluate it, print the study's table.

    python experiments/reproduce.py --out runs/paper            # what `make reproduce` runs

The study's recipe is fragile: a run at its setting either composes addition and assignment
or stalls with no layer-2 routing within its budget, decided by the seed and by float rounding (the
CPU kind, the kernels, the thread count; ``experiments/results/stall_rate``). So the main job
tries **seeds in turn** (42, the study's, first), each trained with the faithful recipe into
``OUT/seed-S`` and stopped early only when the stall detector is certain it stalled
(``stop_at=stalled``, :mod:`compose_lens.training.outcome`). Every attempt's outcome is
printed. It ends with the first run that meets the study's headline (exhaustive 0-var
held-out and 2-var union >= 0.98), or, when every attempt fails, with last lines that say so,
what it means and what to do, and exit status 1: it never ends silently on a stalled model.

The table: the exhaustive accuracies next to the study's, the onsets of the three learning
phases with their intervals (:func:`compose_lens.training.phases.measure_phases` on the run's evaluated
checkpoints: the reading ``compose-lens dynamics`` and the report print), the measured
stall rates counted by seed (the recipe's and the remedy's from the by-seed study, and the older
study's, each labelled with its CPU, read from the committed ``runs.csv``) and the wall time;
the study's own final checkpoint beside it where ``../shared/reference`` exists. Written to ``OUT/reproduction.json`` too. Interrupted attempts
resume; finished ones are read back.

``--install-paper-model`` copies the reproducing run's weights to ``compose_lens/assets/paper``,
the model that ``compose-lens ... paper`` loads.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import torch

from compose_lens.core import stats

from compose_lens.core import study
from compose_lens.registry.dynamics.checkpoints import trajectory
from compose_lens.training.phases import PHASE_RULES
from compose_lens.training.outcome import classify_run
from compose_lens.core.errors import ComposeLensError
from compose_lens.core.files import load_json, write_json_atomic
from compose_lens.core.config import RunConfig
from compose_lens.training.evaluate import exhaustive_accuracies
from compose_lens.core.coverage import PAPER_MODEL_DIR
from compose_lens.training.runs import RESUME_FILE, run_phases_measured
from compose_lens.training.subject import load_model
from compose_lens.training.train import Trainer

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference"
STALL_RATE = Path(__file__).resolve().parent / "results" / "stall_rate"
# The stall-rate studies the table quotes, each counted by seed (fp32) from the runs.csv that
# `experiments/stall_rate.py --table` wrote in its folder, so the table follows the committed runs.
# A label names the CPU: rounding, and so a seed's outcome, depends on the machine.
STALL_STUDIES = (
    ("stall rate, recipe (by seed, fp32, Intel Xeon)", STALL_RATE / "by_seed" / "recipe"),
    ("stall rate, remedy lr_x3 (by seed, same CPU)", STALL_RATE / "by_seed" / "remedy"),
    ("stall rate, recipe, older study (fp32, AMD EPYC)", STALL_RATE / "fp32"),
)


def _stall_rate_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("stall_rate", Path(__file__).resolve().parent / "stall_rate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stall_rates(studies=STALL_STUDIES) -> list[dict]:
    """Each study's stall rate by seed, in fp32, from its folder's committed ``runs.csv``
    (``stall_rate.rate_from_table``, the reading docs/claims/ checks the README against):
    label, folder, stalled, seeds, the Wilson interval and the line's text (``8 of 20, 0.40 [0.22, 0.61]``).
    A study whose folder has no ``runs.csv`` is left out."""
    rate_from_table = _stall_rate_script().rate_from_table
    rows = []
    for label, folder in studies:
        if not (folder / "runs.csv").exists():
            continue
        found = rate_from_table(folder / "runs.csv", "fp32")
        rate = stats.Rate.of(found["stalled"], found["seeds"])
        rows.append({"measure": label, "folder": str(folder), "stalled": rate.k, "seeds": rate.n,
                     "interval_95": [rate.low, rate.high], "text": rate.text()})
    return rows


def attempt(seed: int, out: Path, args: argparse.Namespace) -> dict:
    """Train (or resume, or read back) the run of one seed; its outcome."""
    run = out / f"seed-{seed}"
    seeds = [] if seed == 42 else [f"seed={seed}", f"init_seed={seed}", f"train.seed={seed}"]
    config = RunConfig().with_overrides([f"threads={args.threads}", "stop_at=stalled", *seeds, *args.set])
    if (run / "results.json").exists():
        print(f"seed {seed}: {run} is already trained; reading its results (remove it to train again)")
    else:
        resume = (run / RESUME_FILE).exists()
        print(f"seed {seed}: {'resuming' if resume else 'training'} in {run} ({config.train.steps} steps, CPU, "
              f"{args.threads} thread(s); stopped early only if it certainly stalled)", flush=True)
        Trainer(config, run, resume=resume, overwrite=not resume).run()
    found = classify_run(run)
    print(f"seed {seed}: {found['outcome'].upper()} after {found['steps']} steps: {found['why']}", flush=True)
    return {"seed": seed, "run": run, **found}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="runs/paper")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 1, 2, 3],
                        help="seeds to try in turn until one meets the headline (default 42 1 2 3)")
    parser.add_argument("--set", action="append", default=[], help="override a setting (key=value)")
    parser.add_argument("--install-paper-model", action="store_true")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: the shipped paper model was trained on one thread, "
                             "and the thread count changes float rounding)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    started = time.perf_counter()
    attempts = []
    try:
        for seed in args.seeds:
            attempts.append(attempt(seed, out, args))
            if attempts[-1]["outcome"] == "generalised":
                break
    except ComposeLensError as exc:
        print(f"reproduce: error: {exc}", file=sys.stderr)
        return 2
    chosen = attempts[-1]
    run = chosen["run"]
    results = load_json(run / "results.json")

    reference = None
    if (REFERENCE / "final.pth").exists():
        loaded = load_model(REFERENCE / "final.pth")
        reference = exhaustive_accuracies(loaded)

    wall = time.perf_counter() - started
    rows = []
    print()
    print(f"{'measure':50s} {'study':>22s} {'this run':>16s}" + (f" {'study ckpt':>14s}" if reference else ""))
    for name, claim in study.CLAIMS.items():
        r = results["exhaustive"][name]
        line = f"{name + ' accuracy':50s} {claim:>22s} {r['accuracy']:>16.4f}"
        interval = stats.wilson_interval(r["correct"], r["total"])  # over the set's sequences
        row = {"measure": name, "study": claim, "this_run": r, "interval_95": list(interval)}
        if reference:
            line += f" {reference[name]['accuracy']:>14.4f}"
            row["study_checkpoint"] = reference[name]
        print(line + f"   95 % [{interval[0]:.4f}, {interval[1]:.4f}]")
        rows.append(row)
    # the run's onsets as dynamics and the report read them: every checkpoint's pools evaluated
    # (no circuit measures), each onset with its interval (compose_lens.training.phases.measure_phases)
    traj = trajectory(run, circuit=False, progress=True)
    phases = run_phases_measured(traj.table, run, traj.settings)
    for rule in PHASE_RULES:
        label = f"phase: {rule.name} ({rule.metric} >= {rule.threshold})"
        phase = phases[rule.name]
        print(f"{label:50s} {study.PHASES[rule.name]:>22s} {phase['text']:>26s}")
        rows.append({"measure": label, "study": study.PHASES[rule.name], "this_run": phase["step"],
                     "interval": phase["interval"], "stride_may_move": phase["stride_may_move"]})
    print(f"{'outcome (compose_lens.training.outcome)':50s} {'generalised':>22s} {chosen['outcome']:>16s}")
    print(f"{'training wall time (s)':50s} {'not reported':>22s} {results['train_wall_time_s']:>16.1f}")
    for rate in stall_rates():  # counted by seed (experiments/stall_rate.py): a seed's variants are one trial
        print(f"{rate['measure']:50s} {'one run shown':>22s} {rate['text']:>26s}")
        rows.append(rate)
    wall = time.perf_counter() - started  # the checkpoints' evaluation for the onsets included
    print(f"wall time of this command (training, if it trained, and evaluation): {wall:.1f} s")
    summary = [{k: (str(v) if k == "run" else v) for k, v in a.items()} for a in attempts]
    write_json_atomic(out / "reproduction.json", {"rows": rows, "attempts": summary, "run": str(run),
                                                  "outcome": chosen["outcome"],
                                                  "train_wall_time_s": results["train_wall_time_s"],
                                                  "command_wall_time_s": round(wall, 1)})
    print()
    tried = ", ".join(f"seed {a['seed']} {a['outcome']}" for a in attempts)
    if chosen["outcome"] == "generalised":
        print(f"REPRODUCED with seed {chosen['seed']} ({tried}): the model in {run} meets the study's headline.")
        if len(attempts) > 1:
            print("The earlier seeds did not meet the headline on this machine (stalled, or composed but below "
                  "0.98 at the end): the recipe is fragile (README 'When a run stalls').")
    else:
        print(f"NOT REPRODUCED ({tried}): no attempt met the study's headline (0-var held-out and 2-var union "
              f">= 0.98).")
        print("A stalled run learned addition but formed no layer-2 routing within its budget, so it cannot use "
              "variables; this happens to a share of runs of the study's own recipe, decided by seed and float "
              "rounding.")
        print("What to do: try more seeds (`python experiments/reproduce.py --seeds 4 5 6`), or train with the "
              "remedy (README 'When a run stalls'); the analyses of a stalled run describe a model without the circuit.")
        return 1

    if args.install_paper_model:
        PAPER_MODEL_DIR.mkdir(parents=True, exist_ok=True)
        for name in ("model.safetensors", "config.json"):
            shutil.copy(run / name, PAPER_MODEL_DIR / name)
        print(f"installed the paper model in {PAPER_MODEL_DIR}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
