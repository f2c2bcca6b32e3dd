"""Which analyses work on which architecture (issue #28): locate + every analysis command, one table.

    python experiments/architectures.py            # p = 11, 3000 steps each (~3 min per model on an idle core)
    python experiments/architectures.py --steps 2x4=9000   # a larger budget for one architecture
                                                           # (its run: WORK/2x4_s9000)
    python experiments/architectures.py --steps 2x4=9000 --seed 2x4=1   # ... and another seed (WORK/2x4_s9000_seed1)
    python experiments/architectures.py --quick    # p = 7, 50 steps, tiny sizes: checks the script runs

Trains (or reuses, when ``WORK/<name>/results.json`` exists; WORK: ``runs/architectures[_quick]``) two small non-paper models with
``compose-lens train`` (one thread):

* ``3x2``: 3 layers x 2 heads, an MLP in every block (blocks.0, 1 and 2);
* ``2x4``: 2 layers x 4 heads, its MLP in blocks.1 (the study's layout with more heads);

then, for each of them and the paper model (``paper``; ``dynamics`` and ``report`` read the study's
checkpoints, ``--paper-run``, default ``../shared/reference``: a folder of ``step_N.pth``), finds the circuit's roles with
:func:`compose_lens.analysis.locate.locate` and runs each command (``analyze``, ``fourier``,
``same-mlp``, ``patch``, ``ablate``, ``circuit``, ``dynamics``, ``report``) as a subprocess with small
sizes, recording its wall time and outcome: ``ok``, ``refused: <the one-line reason>`` (exit 2)
or ``failed (rc N): <last line>``; ``ablate`` and ``circuit`` add what they read (the adder whose
neurons are ablated, the ROC-AUC against the located or the paper's circuit, or none located).
The table (one row per architecture and training budget) goes to
``experiments/results/architectures.csv`` (``--quick``: ``architectures_quick.csv``); with
``--only`` the rows of the other architectures (and budgets) already there are kept.

Times are wall seconds on whatever else the machine is running; they say "seconds, not minutes",
not a benchmark.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"
COMMANDS = ("analyze", "fourier", "same-mlp", "patch", "ablate", "circuit", "dynamics", "report")

ARCHITECTURES = {  # name: the train --set overrides that make it
    "3x2": ["n_layers=3", "n_heads=2", "mlp_blocks=[0,1,2]"],
    "2x4": ["n_heads=4"],
}


FULL = {"modulus": 11, "steps": 3000}


def sizes(quick: bool, modulus: int | None = None, steps: int | None = None) -> dict:
    if quick:
        return {"modulus": 7, "steps": 50, "every": 10, "width": ["d_model=32", "d_head=16", "d_mlp=64"],
                "batch": 64}
    return {"modulus": modulus or FULL["modulus"], "steps": steps or FULL["steps"], "every": 500,
            "width": ["d_model=64", "d_head=32", "d_mlp=256"], "batch": 256}


def command_options(command: str, quick: bool) -> list[str]:
    n = 1 if quick else 4  # a size multiplier: quick checks the plumbing, the full run reads something
    return {
        "analyze": ["--skip-causal"] if quick else [],
        "fourier": [],
        "same-mlp": ["--n", str(20 * n)],
        "patch": ["--n-pairs", str(8 * n)],
        "ablate": ["--pool-size", str(12 * n)],
        "circuit": ["--n-pairs", str(6 * n), "--method", "eap"],
        "dynamics": ["--pool-size", str(20 * n), "--slot-size", str(10 * n)],
        "report": [],
    }[command]


def cli(*args: str, timeout: float | None = 900) -> tuple[int, str, str, float]:
    """Run ``compose-lens ARGS`` (one thread); ``timeout``: seconds (None: no limit, for training)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    try:
        out = subprocess.run([sys.executable, "-m", "compose_lens.cli", *args], capture_output=True, text=True,
                             env=env, cwd=ROOT, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, "", f"timed out after {timeout:.0f} s", time.perf_counter() - start
    return out.returncode, out.stdout, out.stderr, time.perf_counter() - start


def train(name: str, overrides: list[str], work: Path, quick: bool, modulus: int | None = None,
          steps: int | None = None, seed: int | None = None) -> Path:
    """``seed``: another training and initialisation seed (``train.seed``, ``model.init_seed``;
    None: the study's 42), its run ``WORK/<name>[_s<steps>]_seed<seed>``."""
    run = work / (name if steps in (None, FULL["steps"]) or quick else f"{name}_s{steps}")
    if seed is not None:
        run = run.with_name(f"{run.name}_seed{seed}")
    if (run / "results.json").exists():
        return run
    s = sizes(quick, modulus, steps)
    sets = [*overrides, *s["width"], f"modulus={s['modulus']}", f"steps={s['steps']}", f"batch_size={s['batch']}",
            f"eval_every={s['every']}", f"checkpoint_every={s['every']}", "threads=1"]
    if seed is not None:
        sets += [f"train.seed={seed}", f"model.init_seed={seed}"]
    rc, _, err, seconds = cli("train", *[a for kv in sets for a in ("--set", kv)], "--out", str(run),
                              "--quiet", "--overwrite", timeout=None)  # a larger budget must not be cut at 900 s
    if rc:
        raise SystemExit(f"training {name} failed (rc {rc}): {err.strip().splitlines()[-1:]}")
    print(f"trained {name} in {seconds:.0f} s", flush=True)
    return run


def located(model: str) -> dict[str, str]:
    """The components locate finds (in this process, one thread)."""
    import torch

    from compose_lens.analysis import locate
    from compose_lens.training.subject import for_analyses, load_model

    torch.set_num_threads(1)
    loaded = for_analyses(load_model(model, bridge=False))
    found = locate.locate(loaded)
    return {r.role: (r.component or f"none ({r.score:.2f} < {r.threshold})") for r in [*found.roles(), found.gatherer]}


def read_from(command: str, out: str) -> str:
    """What ``ablate`` and ``circuit`` say they read (their printed lines), for the table: which MLP's
    neurons, and the ROC-AUC against which circuit (or none located)."""
    text = out.replace("\n", " ")
    if command == "ablate" and "neurons and Fourier directions: " in text:
        said = text.split("neurons and Fourier directions: ", 1)[1]
        return " (neurons: " + ("none located" if said.startswith("none located") else said.split(",", 1)[0]) + ")"
    if command == "circuit":
        if "ROC-AUC " in text:
            auc = text.split("ROC-AUC ", 1)[1].split(" ", 1)[0]
            against = "the paper's" if "against the paper's circuit" in text else "the located"
            return f" (ROC-AUC {auc} against {against} circuit)"
        if "not scored against a circuit: none located" in text:
            return " (no labelled circuit: none located)"
    return ""


def outcome(rc: int, err: str, out: str = "", command: str = "") -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    last = lines[-1].removeprefix("compose-lens: error: ") if lines else ""
    if " does not cover " in last and "): " in last:  # the reason, without the model's path
        last = last.split("): ", 1)[1]
    if rc == 0:
        return "ok" + read_from(command, out)
    if rc == 2:
        return f"refused: {last}"
    return f"failed (rc {rc}): {last}"


def row(name: str, model: str, work: Path, quick: bool, run: Path | None = None) -> dict:
    """``run``: the checkpoints dynamics and report read (default: ``model``, a run directory)."""
    out = {"architecture": name, **located(model)}
    for command in COMMANDS:
        dest = work / "out" / name / command
        target = ["--out", str(dest), "--overwrite"]
        source = model
        if command in ("dynamics", "report") and run is not None:
            source = str(run)
        if command == "dynamics" and run is None:  # where report finds it
            target = ["--out", str(Path(model) / "results"), "--overwrite"]
        if command == "report":
            target = ["--out", str(dest.with_suffix(".html")), "--overwrite"]
        dest.parent.mkdir(parents=True, exist_ok=True)
        args = [command, source, *command_options(command, quick), *target]
        if run is not None and command in ("dynamics", "report"):
            args += ["--stride", "10" if quick else "2"]  # the study's checkpoints: many
        if command not in ("report",):
            args.append("--quiet")
        rc, printed, err, seconds = cli(*args)
        out[f"{command}_s"] = round(seconds, 1)
        out[command] = outcome(rc, err, printed, command)
        print(f"  {name:6s} {command:9s} {seconds:6.1f} s  {out[command][:150]}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="p = 7, 50 steps, tiny sizes")
    parser.add_argument("--work", default=None, help="where the models and command outputs go "
                                                     "(default runs/architectures[_quick]/, ignored by git)")
    parser.add_argument("--out", default=None, help="the CSV (default experiments/results/architectures[_quick].csv)")
    parser.add_argument("--no-paper", action="store_true", help="leave the paper model out")
    parser.add_argument("--modulus", type=int, default=None, help=f"full mode: p (default {FULL['modulus']})")
    parser.add_argument("--steps", action="append", default=[], metavar="[NAME=]STEPS",
                        help=f"full mode: training steps (default {FULL['steps']}), for every architecture or, "
                             f"as NAME=STEPS, for one (repeatable)")
    parser.add_argument("--seed", action="append", default=[], metavar="NAME=SEED",
                        help="full mode: train NAME with another training and initialisation seed (repeatable)")
    parser.add_argument("--train-only", action="store_true", help="train (or reuse) the models, run nothing")
    parser.add_argument("--only", nargs="+", choices=[*ARCHITECTURES, "paper"], default=None,
                        help="the rows to make (default: every architecture and the paper model)")
    parser.add_argument("--paper-run", default=str(ROOT.parent / "shared" / "reference"),
                        help="the study's step_N.pth checkpoints, for the paper row's dynamics and report")
    args = parser.parse_args()
    stem = "architectures_quick" if args.quick else "architectures"
    steps = {}
    for item in args.steps:
        name, _, value = item.rpartition("=")
        if name and name not in ARCHITECTURES or not value.isdigit():
            parser.error(f"--steps {item}: write STEPS or NAME=STEPS with NAME one of {', '.join(ARCHITECTURES)}")
        steps.update({name: int(value)} if name else dict.fromkeys(ARCHITECTURES, int(value)))
    seeds = {}
    for item in args.seed:
        name, _, value = item.partition("=")
        if name not in ARCHITECTURES or not value.isdigit():
            parser.error(f"--seed {item}: write NAME=SEED with NAME one of {', '.join(ARCHITECTURES)}")
        seeds[name] = int(value)
    suffix = f"_p{args.modulus}" if args.modulus not in (None, FULL["modulus"]) and not args.quick else ""
    work = Path(args.work) if args.work else ROOT / "runs" / (stem + suffix)
    out = Path(args.out) if args.out else RESULTS / f"{stem}.csv"
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    wanted = set(args.only or [*ARCHITECTURES, "paper"])
    runs_made = {name: train(name, overrides, work, args.quick, args.modulus, steps.get(name), seeds.get(name))
                 for name, overrides in ARCHITECTURES.items() if name in wanted}
    if args.train_only:
        return
    for name, run in runs_made.items():
        made = row(name, str(run), work, args.quick)
        rows.append({"architecture": made.pop("architecture"),
                     "steps": sizes(args.quick, args.modulus, steps.get(name))["steps"],
                     "seed": seeds.get(name, 42), **made})
    if not args.no_paper and "paper" in wanted:
        rows.append(row("paper", "paper", work, args.quick, Path(args.paper_run)))
    table = pd.DataFrame(rows)
    if args.only and out.exists():  # a subset of the rows: the others stay as they were
        kept = pd.read_csv(out)
        made = set(zip(table["architecture"], table.get("steps", pd.Series([None] * len(table))).fillna(-1)))
        kept = kept[[(a, s if s == s else -1) not in made for a, s in zip(kept["architecture"], kept["steps"])]]
        table = pd.concat([table, kept], ignore_index=True)
        table = table.sort_values(["architecture", "steps"], kind="stable", na_position="last")
    for column in ("steps", "seed"):  # whole numbers, blank for the paper row (not 3000.0)
        if column in table:
            table[column] = table[column].astype("Int64")
    first = [c for c in ("architecture", "steps", "seed") if c in table]
    table = table[first + [c for c in table.columns if c not in first]]
    out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(out, index=False)
    print(f"wrote {out}")
    print(table[["architecture", "binder", "router", "adder", "gatherer", *COMMANDS]].to_string(index=False))


if __name__ == "__main__":
    main()
