"""Do the circuits stay modular as depth, width and heads grow? (issue #27) One grid point, or the grid.

    python experiments/modularity_grid.py point --n-layers 2 --d-model 64 --n-heads 1 --seed 0
    python experiments/modularity_grid.py grid                 # every point not yet finished, then the table
    python experiments/modularity_grid.py grid --only width    # one axis (width, depth, heads)
    python experiments/modularity_grid.py table                # the CSV and the figures from what is done
    python experiments/modularity_grid.py study                # the measures on the study's own checkpoints

A **point** trains one architecture (in this process, one thread) until it generalises, the stall
detector stops it, or its step budget ends (``stop_at=decided``, :mod:`compose_lens.training.outcome`); a point
that ends :data:`STEPS` below the proxy's bar and still learning trains on to :data:`LONGER`
(``train --resume`` with a larger budget: the weights of a run trained there at once); a point whose
loss diverges at the proxy's learning rate is trained again at the study's (``WORK/study_lr/``, the
row's ``remedy`` says which). It records the budget, the steps it took and its outcome, then locates
the circuit's roles and measures it (:func:`compose_lens.registry.modularity.measures.measure`): everything
goes to ``WORK/<name>/point.json``. The **grid** runs every point whose ``point.json`` is missing and
whose row is not already in ``--out``'s ``grid.csv`` (or is, but not :func:`settled`: below the bar
on a budget short of :data:`LONGER`, or diverged at the proxy's rate); a killed point resumes its
training from its last resume state, so running it again finishes what is left; several ``grid``
processes may share the work (each point is claimed by one). The **table**
(``experiments/results/modularity/grid.csv``) has one row per finished point, and one figure per axis
(``width.png``, ``depth.png``, ``heads.png``): separation and circuit fraction against the axis, one
marker per seed, the mean over seeds with their range, an inconclusive point drawn as an x at the bottom, a
measure equal at every point said in the title instead of a panel (:func:`compose_lens.views.sweeps.modularity_figure`).

**The axes** (:data:`AXES`): width, d_model 64, 128, 256, 512 at the paper layout (2 layers, 1 head,
an MLP in the last block); depth, 2, 3, 4 layers with an MLP in every block, at d_model 64 and 128;
heads, 1, 2, 4 at the paper layout, d_model 64. Every model has d_head = d_model / n_heads and
d_mlp = 4 d_model (the paper's 128 / 512).

**The proxy** (:data:`PROXY`, docs/modularity.md says what it costs): modulus 23 (the study's 59 costs
~4x the steps), the stall remedy's learning rate (``remedy=lr_x3``: routing forms in ~3,000 steps
instead of ~8,000), batch 256, a budget of :data:`STEPS` steps, pools of 1,000 prompts every 250 steps.
``--steps`` and ``--set`` change it (a changed proxy writes its own WORK directory).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from compose_lens.training import outcome

from compose_lens.training import runs

from compose_lens.data import safety  # noqa: E402
from compose_lens.training.subject import for_analyses, load_checkpoint, load_model  # noqa: E402
from compose_lens.registry.modularity import measures as modularity  # noqa: E402
from compose_lens.core.config import RunConfig  # noqa: E402
from compose_lens.core.errors import ComposeLensError  # noqa: E402
from compose_lens.core.files import load_json, missing_columns  # noqa: E402
from compose_lens.training.train import train  # noqa: E402

RESULTS = ROOT / "experiments" / "results" / "modularity"
STEPS = 6000
STUDY_LR = "study_lr"  # WORK/study_lr/<name>: a point that diverged at the proxy's rate, trained again at the study's
LONGER = 12_000  # the budget of a point still learning below the bar at STEPS (needs_more)
LEARNED_AT = 0.85  # the proxy's bar for "has learned the task" (the study's headline is 0.98; docs/modularity.md)
SEEDS = (0, 1)
PROXY = ["modulus=23", "remedy=lr_x3", "batch_size=256", "eval_every=250", "checkpoint_every=1000",
         "pool_size=1000", "stop_at=decided", "threads=1"]
PROXY_REMEDY = next(o.split("=", 1)[1] for o in PROXY if o.startswith("remedy="))
AXES = {  # axis: (n_layers, d_model, n_heads, MLP in every block) of each point, end points first
    "width": [(2, 64, 1, False), (2, 512, 1, False), (2, 128, 1, False), (2, 256, 1, False)],
    "heads": [(2, 64, 1, False), (2, 64, 4, False), (2, 64, 2, False)],
    "depth": [(2, 64, 1, True), (4, 64, 1, True), (3, 64, 1, True),
              (2, 128, 1, True), (4, 128, 1, True), (3, 128, 1, True)],
}
AXIS_OF = {"width": "d_model", "heads": "n_heads", "depth": "n_layers"}


def name_of(n_layers: int, d_model: int, n_heads: int, every: bool, seed: int) -> str:
    return f"L{n_layers}_d{d_model}_h{n_heads}_{'mlpall' if every else 'mlplast'}_s{seed}"


def overrides(n_layers: int, d_model: int, n_heads: int, every: bool, seed: int, steps: int,
              extra: list[str]) -> list[str]:
    mlp = list(range(n_layers)) if every else [n_layers - 1]
    return [*PROXY, f"n_layers={n_layers}", f"d_model={d_model}", f"n_heads={n_heads}",
            f"d_head={d_model // n_heads}", f"d_mlp={4 * d_model}", f"mlp_blocks={json.dumps(mlp)}",
            f"steps={steps}", f"task.seed={seed}", f"train.seed={seed}", f"init_seed={seed}", *extra]


def work_dir(base: Path | None, steps: int, extra: list[str]) -> Path:
    if base is not None:
        return base
    tag = "" if (steps, extra) == (STEPS, []) else "_" + hashlib.sha1(
        json.dumps([steps, extra]).encode()).hexdigest()[:8]
    return ROOT / "runs" / f"modularity{tag}"


def accuracies(results: dict) -> dict:
    """The two exhaustive accuracies a row keeps, from a run's ``results.json``."""
    return {k: results["exhaustive"][k]["accuracy"] for k in ("zero_var_heldout", "two_var_union")}


def needs_more(row: dict, learned_at: float, longer: int) -> bool:
    """A point that ended its budget below the proxy's bar (some exhaustive accuracy < ``learned_at``)
    while still ``learning`` (not stalled, not diverged, not generalised), on a budget below ``longer``:
    it has not yet shown what it learns, so it trains on to ``longer`` (an inconclusive row is a model
    that cannot yet do what the measures test)."""
    below = min(float(row["zero_var_heldout"]), float(row["two_var_union"])) < learned_at
    return below and row["outcome"] == "learning" and int(row["budget"]) < longer


def settled(row: dict, learned_at: float, longer: int) -> bool:
    """A row that running its point again would not change: not :func:`needs_more`, and not diverged at
    a faster rate than the study's (such a point is trained again at the study's)."""
    remedy = row.get("remedy") if isinstance(row.get("remedy"), str) else PROXY_REMEDY  # older rows: the proxy's
    retry = row["outcome"] == "diverged" and remedy != "none"
    return not retry and not needs_more(row, learned_at, longer)


POINT_NEEDS = ("name", "n_layers", "d_model", "n_heads", "mlp_blocks", "seed", "outcome", "budget",
               "zero_var_heldout", "two_var_union")  # what settled() and the table read of a row


def read_point(path: Path) -> dict:
    """A point's ``point.json``, or one line saying it is damaged (it is rewritten by measuring again)."""
    row = load_json(path)
    missing = [k for k in POINT_NEEDS if k not in row] if isinstance(row, dict) else list(POINT_NEEDS)
    if missing:
        raise ComposeLensError(f"{path}: not a point's row (no {', '.join(missing[:3])}); delete it to measure "
                               f"the point again")
    return row


def read_grid(path: Path) -> pd.DataFrame:
    """``grid.csv``, or one line saying what it lacks (a table from elsewhere, or cut short)."""
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError, pd.errors.ParserError) as e:
        raise ComposeLensError(f"{path}: not readable as a table ({str(e).splitlines()[0] if str(e) else e})") from None
    missing = missing_columns(frame.columns, (*KEY, "outcome", "budget", "zero_var_heldout", "two_var_union"))
    if missing:
        raise ComposeLensError(f"{path}: {missing}; this is not the grid's table: move it away or give another --out")
    return frame


def run_point(n_layers: int, d_model: int, n_heads: int, every: bool, seed: int, *, work: Path,
              steps: int = STEPS, extra: list[str] | None = None, measure_n: int = 120,
              learned_at: float = LEARNED_AT, remeasure: bool = False, longer: int | None = None) -> dict:
    """Train (or resume) one point to ``steps``, then, where it is below the bar and still learning, on
    to ``longer`` (default :data:`LONGER`); locate and measure it; its row, also in ``point.json``."""
    longer = LONGER if longer is None else longer
    extra = extra or []
    work.mkdir(parents=True, exist_ok=True)
    name = name_of(n_layers, d_model, n_heads, every, seed)
    run = work / name
    done = run / "point.json"
    previous = read_point(done) if done.exists() else None
    if previous is not None and not remeasure and settled(previous, learned_at, longer):
        return previous
    torch.set_num_threads(1)
    config = RunConfig().with_overrides(overrides(n_layers, d_model, n_heads, every, seed, steps, extra))
    if (run / "config.json").exists():  # the budget the run has now (a killed longer budget resumes)
        config = config.with_overrides([f"steps={json.loads((run / 'config.json').read_text())['train']['steps']}"])
    if not (run / "results.json").exists():
        resume = (run / "resume.safetensors").exists()
        train(config, run, progress=False, resume=resume, overwrite=not resume)
    found = outcome.classify_run(run)
    if not remeasure and needs_more({**accuracies(runs.read_results(run)), "outcome": found["outcome"],
                   "budget": config.train.steps}, learned_at, longer):  # below the bar, still learning
        config = config.with_overrides([f"steps={longer}"])
        done.unlink(missing_ok=True)  # the shorter budget's row, written again below (a run holds no foreign file)
        train(config, run, progress=False, resume=True)
        found = outcome.classify_run(run)
    if found["outcome"] == "diverged" and config.train.remedy != "none":
        # the proxy's faster learning rate blew this point up: it is trained again at the study's own
        # rate (WORK/study_lr/<name>), and that run is its row
        row = run_point(n_layers, d_model, n_heads, every, seed, work=work / STUDY_LR, steps=steps,
                        extra=[*extra, "remedy=none"], measure_n=measure_n, learned_at=learned_at,
                        remeasure=remeasure, longer=longer)
        row = {**row, "remedy": "none", "retried_because": f"at remedy={config.train.remedy}: {found['why']}"}
        done.write_text(json.dumps(row, indent=1, default=str) + "\n")
        return row
    results = runs.read_results(run)
    loaded = for_analyses(load_model(run, bridge=False))
    started = time.perf_counter()
    scores = modularity.measure(loaded, n_pairs=measure_n,
                                same_mlp_n=measure_n, pool_size=200, learned_at=learned_at)
    row = {"name": name, "n_layers": n_layers, "d_model": d_model, "n_heads": n_heads,
           "mlp_blocks": "every" if every else "last", "seed": seed, "modulus": config.task.modulus,
           "remedy": config.train.remedy, "budget": config.train.steps, "learned_at": learned_at, "steps": results["steps"], "outcome": found["outcome"],
           "outcome_why": found["why"], "train_s": results.get("train_wall_time_s"), "measure_s": round(time.perf_counter() - started, 1), **scores}
    done.write_text(json.dumps(row, indent=1, default=str) + "\n")
    return row


def claim(work: Path, name: str) -> safety.FileLock | None:
    """An exclusive lock on ``WORK/<name>.claim`` for this process (None: another worker holds it), so
    several ``grid`` processes can share one WORK: compose-lens's one lock (``safety.lock_file``), which goes
    with the process, so a killed one leaves nothing to clean up."""
    try:
        return safety.lock_file(work / f"{name}.claim", f"{name}: claimed by another worker")
    except ComposeLensError:
        return None


def points(only: list[str] | None) -> list[tuple]:
    """Every (n_layers, d_model, n_heads, every, seed) of the axes asked for, once, end points first."""
    seen, out = set(), []
    for axis, archs in AXES.items():
        if only and axis not in only:
            continue
        for seed in SEEDS:
            for arch in archs:
                if (*arch, seed) not in seen:
                    seen.add((*arch, seed))
                    out.append((*arch, seed))
    ends = {arch for archs in AXES.values() for arch in archs[:2]}
    cost = lambda p: p[1] ** 2 * p[0] * (2 if p[3] else 1)  # noqa: E731  (about a step's cost)
    # what a shared CPU can finish first: every point up to d_model 128 (the axes' end points first, cheap
    # first), then the wide ones
    return sorted(out, key=lambda p: (p[1] > 128, p[:4] not in ends, cost(p), p[4]))


KEY = ["n_layers", "d_model", "n_heads", "mlp_blocks", "seed"]  # one grid point


def key_of(point: tuple) -> tuple[str, ...]:
    """A point's KEY, as grid.csv spells it."""
    n_layers, d_model, n_heads, every, seed = point
    return tuple(map(str, (n_layers, d_model, n_heads, "every" if every else "last", seed)))


def todo(only: list[str] | None, out: Path, learned_at: float = LEARNED_AT, longer: int = LONGER) -> list[tuple]:
    """The points ``grid`` runs: those of :func:`points` whose row ``out/grid.csv`` does not have yet,
    or has but not :func:`settled` (a WORK directory does not outlive its
    machine, the table does, so a later session does not train the others again)."""
    tabled = set()
    if (out / "grid.csv").exists():
        rows = read_grid(out / "grid.csv")
        rows = rows[[settled(r, learned_at, longer) for r in rows.to_dict("records")]]
        tabled = set(map(tuple, rows[KEY].astype(str).values))
    return [p for p in points(only) if key_of(p) not in tabled]


def table(work: Path, out: Path) -> pd.DataFrame:
    """grid.csv from the points finished under ``work``, beside the rows already in ``out/grid.csv``
    of points ``work`` does not hold (a WORK directory does not outlive its machine; the table does,
    so a later session that runs the missing points adds to it instead of writing over it)."""
    rows = [read_point(p) for p in sorted(work.glob("*/point.json"))]
    if not rows:
        raise SystemExit(f"no finished point under {work}")
    frame = pd.DataFrame(rows)
    if (out / "grid.csv").exists():
        kept = read_grid(out / "grid.csv")
        new = set(map(tuple, frame[KEY].astype(str).values))  # WORK's rows win over the table's
        kept = kept[[tuple(k) not in new for k in kept[KEY].astype(str).values]]
        frame = pd.concat([kept, frame], ignore_index=True)
    first = ["n_layers", "d_model", "n_heads", "mlp_blocks", "seed", "remedy", "steps", "outcome", "zero_var_heldout",
             "two_var_union", *modularity.COLUMNS, "binder", "router", "adder", "gatherer"]
    frame = frame[[c for c in first if c in frame] + [c for c in frame if c not in first]]
    frame = frame.sort_values(["mlp_blocks", "n_layers", "d_model", "n_heads", "seed"], kind="stable")
    # rows measured before the column existed were all trained at the proxy's rate
    frame["remedy"] = frame["remedy"].fillna(PROXY_REMEDY) if "remedy" in frame else PROXY_REMEDY
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "grid.csv", index=False)
    for axis in AXES:
        figure(frame, axis, out / f"{axis}.png")
    return frame


def on_axis(frame: pd.DataFrame, axis: str) -> pd.DataFrame:
    keys = {(a[0], a[1], a[2], "every" if a[3] else "last") for a in AXES[axis]}
    mask = [(r.n_layers, r.d_model, r.n_heads, r.mlp_blocks) in keys for r in frame.itertuples()]
    return frame[mask]


def figure(frame: pd.DataFrame, axis: str, path: Path) -> None:
    """One axis's figure (:func:`compose_lens.views.sweeps.modularity_figure`): the depth points grouped by
    d_model, the others by where the MLPs sit."""
    from compose_lens.views.drawing import save
    from compose_lens.views.sweeps import modularity_figure

    fig, _ = modularity_figure(on_axis(frame, axis), AXIS_OF[axis],
                                     group="d_model" if axis == "depth" else None, log2=axis == "width",
                                     separation_min=modularity.SEPARATION_MIN)
    save(fig, None, path, dpi=120)


def study(reference: Path, steps: list[int], out: Path) -> pd.DataFrame:
    """The measures on the study's own checkpoints (p = 59, the study's recipe, the paper architecture),
    at every step asked for, measured whatever the accuracies (``learned_at=0``; the accuracies are in
    the row): what the proxy's "learned at 0.85" and its smaller modulus cost, read on the real run."""
    torch.set_num_threads(1)
    rows = []
    for step in steps:
        loaded = for_analyses(load_checkpoint(reference, step))
        started = time.perf_counter()
        row = modularity.measure(loaded, n_pairs=120, same_mlp_n=120,
                                 pool_size=200, learned_at=0.0)
        rows.append({"step": step, **row, "measure_s": round(time.perf_counter() - started, 1)})
        print(f"step {step}: 0-var held-out {row['zero_var_heldout']:.3f}, 2-var union {row['two_var_union']:.3f}, "
              f"separation {row['modularity_separation']}, same adder {row['modularity_same_adder']}, "
              f"circuit {row['modularity_circuit_fraction']}", flush=True)
    frame = pd.DataFrame(rows)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "study_checkpoints.csv", index=False)
    return frame


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=("point", "grid", "table", "study"))
    parser.add_argument("--reference", type=Path, default=ROOT.parent / "shared" / "reference",
                        help="study: the study's checkpoints (step_N.pth)")
    parser.add_argument("--study-steps", type=int, nargs="+", default=[3001, 5001, 10001, 30001],
                        help="study: the checkpoints to measure")
    parser.add_argument("--n-layers", type=int, default=2)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--n-heads", type=int, default=1)
    parser.add_argument("--mlp-every-block", action="store_true", help="an MLP in every block (else the last)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", nargs="+", choices=list(AXES), default=None, help="grid: these axes only")
    parser.add_argument("--steps", type=int, default=STEPS, help=f"the step budget (default {STEPS})")
    parser.add_argument("--longer", type=int, default=LONGER,
                        help=f"the budget of a point still learning below the bar after --steps (default {LONGER})")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="another proxy setting")
    parser.add_argument("--work", type=Path, default=None, help="where the runs go (default runs/modularity*)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where grid.csv and the figures go")
    parser.add_argument("--learned-at", type=float, default=LEARNED_AT,
                        help=f"both exhaustive accuracies must reach this to be measured (default {LEARNED_AT})")
    parser.add_argument("--remeasure", action="store_true", help="measure finished points again (no retraining)")
    parser.add_argument("--deadline", default=None, metavar="HH:MM",
                        help="grid: start no point after this UTC time (what is left resumes later)")
    args = parser.parse_args(argv)

    def refuse(line: str) -> None:  # bad input: one line, exit 2, nothing trained or written
        print(f"modularity_grid: error: {line}", file=sys.stderr)
        raise SystemExit(2)

    for option in ("n_layers", "d_model", "n_heads", "steps", "longer"):
        if getattr(args, option) < 1:
            refuse(f"--{option.replace('_', '-')} {getattr(args, option)}: must be at least 1")
    if args.d_model % args.n_heads:
        refuse(f"--d-model {args.d_model} is not a multiple of --n-heads {args.n_heads}")
    work = work_dir(args.work, args.steps, args.set)
    for option, folder in (("--work", work), ("--out", args.out)):
        if folder.exists() and not folder.is_dir():
            refuse(f"{option} {folder}: is a file, not a folder")
    try:
        if args.what == "study":
            study(args.reference, args.study_steps, args.out)
            return
        if args.what == "point":
            row = run_point(args.n_layers, args.d_model, args.n_heads, args.mlp_every_block, args.seed,
                            work=work, steps=args.steps, extra=args.set, learned_at=args.learned_at,
                            remeasure=args.remeasure, longer=args.longer)
            print(json.dumps(row, indent=1, default=str))
            return
        if args.what == "grid":
            pending = todo(args.only, args.out, args.learned_at, args.longer)  # grid.csv read before anything is made
            work.mkdir(parents=True, exist_ok=True)
            for point in pending:
                if args.deadline and time.strftime("%H:%M", time.gmtime()) >= args.deadline:
                    print(f"deadline {args.deadline} UTC reached; run again to finish the rest", flush=True)
                    break
                done = work / name_of(*point) / "point.json"
                if done.exists() and settled(read_point(done), args.learned_at, args.longer):
                    continue  # finished here before (by this worker or another)
                held = claim(work, name_of(*point))
                if held is None:
                    continue  # another worker runs it
                started = time.perf_counter()
                try:
                    row = run_point(*point, work=work, steps=args.steps, extra=args.set, learned_at=args.learned_at,
                                    remeasure=args.remeasure, longer=args.longer)
                except ComposeLensError as e:
                    if "another compose-lens process" not in str(e):
                        raise
                    print(f"{name_of(*point)}: {e}; skipped", flush=True)
                    continue
                finally:
                    held.release()
                print(f"{row['name']}: {row['outcome']} at {row['steps']} steps, separation "
                      f"{row['modularity_separation']}, same adder {row['modularity_same_adder']}, circuit "
                      f"{row['modularity_circuit_fraction']} ({time.perf_counter() - started:.0f} s)", flush=True)
        if args.what == "table" and args.remeasure:  # the finished points measured again, nothing trained
            for done in sorted(work.glob("*/point.json")):
                r = read_point(done)
                run_point(r["n_layers"], r["d_model"], r["n_heads"], r["mlp_blocks"] == "every", r["seed"], work=work,
                          steps=r["budget"], extra=args.set, learned_at=args.learned_at, remeasure=True)
        frame = table(work, args.out)
        print(frame[["n_layers", "d_model", "n_heads", "seed", "steps", "outcome", "modularity_separation",
                     "modularity_same_adder", "modularity_circuit_fraction", "modularity_verdict"]].to_string(index=False))
    except ComposeLensError as e:
        refuse(str(e))


if __name__ == "__main__":
    main()
