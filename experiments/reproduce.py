"""The main job: train the paper model from scratch on CPU, evaluate it, print the study's table.

    python experiments/reproduce.py --out runs/paper            # what `make reproduce` runs

Trains the paper configuration (SPEC sections 4-5: 30,000 steps, batch 512, seed 42 as in the study)
into a run directory, resuming it if it was interrupted, then prints the exhaustive
0-var held-out and 2-var union accuracies next to the study's, the onsets of the
three learning phases (the rule of :mod:`compose_lens.analysis.dynamics`, applied to the pool
accuracies of ``metrics.jsonl``), and the wall time. Where ``../shared/reference`` exists, the study's own final checkpoint is
evaluated on its own split in the same table. The table is also written to
``RUN/reproduction.json``.

``--install-paper-model`` copies the trained weights to ``compose_lens/assets/paper``,
the model that ``compose-lens ... paper`` loads.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from compose_lens.config import ComposeLensError, RunConfig, load_json, write_json_atomic
from compose_lens.analysis.dynamics import PHASE_RULES, STUDY_PHASES, add_derived_columns, find_phases
from compose_lens.evaluate import exhaustive_accuracies
from compose_lens.runs import PAPER_MODEL_DIR, load_model
from compose_lens.runs import RESUME_FILE
from compose_lens.train import Trainer

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference"
STUDY = {"zero_var_heldout": "> 98 % (generalises at f = 0.7)", "two_var_union": "> 98 %"}
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="runs/paper")
    parser.add_argument("--set", action="append", default=[], help="override a setting (key=value)")
    parser.add_argument("--install-paper-model", action="store_true")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: the shipped paper model was trained on one thread, "
                             "and the thread count changes float rounding, so 1 repeats it bit for bit)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    config = RunConfig().with_overrides([f"threads={args.threads}", *args.set])
    started = time.perf_counter()
    try:
        if (out / "results.json").exists():
            print(f"{out} is already trained; showing its results (remove it to train again)")
        else:
            resume = (out / RESUME_FILE).exists()
            print(f"{'resuming' if resume else 'training'} the paper model in {out} "
                  f"({config.train.steps} steps, CPU, seed {config.train.seed})")
            Trainer(config, out, resume=resume, overwrite=not resume).run()
    except ComposeLensError as exc:
        print(f"reproduce: error: {exc}", file=sys.stderr)
        return 2
    results = load_json(out / "results.json")
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]

    reference = None
    if (REFERENCE / "final.pth").exists():
        loaded = load_model(REFERENCE / "final.pth")
        reference = exhaustive_accuracies(loaded.model, loaded.config, loaded.split)

    wall = time.perf_counter() - started
    rows = []
    print()
    print(f"{'measure':50s} {'study':>22s} {'this run':>16s}" + (f" {'study ckpt':>14s}" if reference else ""))
    for name, claim in STUDY.items():
        r = results["exhaustive"][name]
        line = f"{name + ' accuracy':50s} {claim:>22s} {r['accuracy']:>16.4f}"
        row = {"measure": name, "study": claim, "this_run": r}
        if reference:
            line += f" {reference[name]['accuracy']:>14.4f}"
            row["study_checkpoint"] = reference[name]
        print(line)
        rows.append(row)
    phases = find_phases(add_derived_columns(pd.DataFrame(metrics)))
    for rule in PHASE_RULES:
        label = f"phase: {rule.name} ({rule.metric} >= {rule.threshold})"
        step = phases[rule.name]["step"]
        print(f"{label:50s} {STUDY_PHASES[rule.name]:>22s} {str(step):>16s}")
        rows.append({"measure": label, "study": STUDY_PHASES[rule.name], "this_run": step})
    print(f"{'training wall time (s)':50s} {'not reported':>22s} {results['train_wall_time_s']:>16.1f}")
    print(f"wall time of this command (training, if it trained, and evaluation): {wall:.1f} s")
    write_json_atomic(out / "reproduction.json", {"rows": rows, "train_wall_time_s": results["train_wall_time_s"],
                                                  "command_wall_time_s": round(wall, 1)})

    if args.install_paper_model:
        PAPER_MODEL_DIR.mkdir(parents=True, exist_ok=True)
        for name in ("model.safetensors", "config.json"):
            shutil.copy(out / name, PAPER_MODEL_DIR / name)
        print(f"installed the paper model in {PAPER_MODEL_DIR}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
