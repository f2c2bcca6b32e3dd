"""``compose-lens dynamics`` (every checkpoint of a run, and the three phases, with its figure) and
``compose-lens report`` (one offline HTML page with every result of a run or of one model; with
``--compare OTHER`` a last section sets it beside another model, as ``compose-lens compare`` does)."""

from __future__ import annotations

import argparse
from pathlib import Path

from compose_lens.cli.common import refuse_uncovered, seed
from compose_lens.errors import ComposeLensError

DYNAMICS_FIGURE = "dynamics.png"  # the pools over training, phase onsets and the outcome (plots.dynamics_figure)


def _cmd_dynamics(args: argparse.Namespace) -> int:
    from compose_lens import plots, runs, study  # lazy: torch
    from compose_lens.analysis.dynamics import phases_document, trajectory, trajectory_settings
    from compose_lens.outcome import trajectory_outcome
    from compose_lens.phases import phase_line
    from compose_lens.safety import check_count, check_sizes, staged_output

    steps = _steps(args.steps)
    check_count(args.pool_size, "--pool-size")
    check_count(args.slot_size, "--slot-size")
    check_count(args.stride, "--stride")
    check_count(args.threads, "--threads")
    runs.check_device(args.device)
    config = runs.find_checkpoints(args.source, args.split)[1]  # the run's sizes, before any work
    n_slots = len(config.task.left_forbidden) + len(config.task.right_forbidden)
    check_sizes(config, {f"--pool-size {args.pool_size}": (args.pool_size, 9),  # the nine pools
                         f"--slot-size {args.slot_size}": (args.slot_size, 2 * n_slots)})  # 1- and 2-var
    settings = trajectory_settings(args.pool_size, args.slot_size, args.seed, not args.no_circuit, args.split)
    known = runs.previous_dynamics(args.out, settings) if args.update else None
    with staged_output(args.out, "dynamics", args.overwrite or args.update) as stage:
        traj = trajectory(args.source, args.split, pool_size=args.pool_size, slot_size=args.slot_size,
                          seed=args.seed, circuit=not args.no_circuit, steps=steps, stride=args.stride,
                          progress=not args.quiet, device=args.device, threads=args.threads, known=known)
        doc = phases_document(traj)
        doc["outcome"] = trajectory_outcome(traj.table.to_dict("records"), args.source,
                                            traj.config.task.f, traj.config.task.r)
        runs.write_dynamics(traj.table, doc, stage)
        plots.save(plots.dynamics_figure(traj.table, doc)[0], None, stage / DYNAMICS_FIGURE, dpi=110)
    t = doc["timing"]
    print(f"{t['evaluated_now']} of {doc['checkpoints']} checkpoints evaluated in {t['seconds']:.1f} s ({t['seconds_per_checkpoint']:.2f} s each; "
          f"300 checkpoints ~ {t['extrapolated_300_checkpoints_s'] / 60:.1f} min); circuit measures: "
          f"{'yes' if traj.circuit else 'no'}")
    for name, phase in doc["phases"].items():
        print(f"  {name:11s} {phase_line(phase)}   [study: {study.PHASES[name]}]")
    print(f"outcome: {doc['outcome']['outcome']} ({doc['outcome']['why']})")
    print(f"wrote {Path(args.out) / runs.DYNAMICS_FILE}, {Path(args.out) / runs.PHASES_FILE} and "
          f"{Path(args.out) / DYNAMICS_FIGURE}")
    return 0


def _steps(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        steps = [int(s) for s in text.split(",")]
    except ValueError:
        raise ComposeLensError(f"--steps {text}: write checkpoint steps as integers, e.g. 1000,2000") from None
    if any(s < 0 for s in steps):
        raise ComposeLensError(f"--steps {text}: steps are >= 0")
    return steps


def _cmd_report(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    refuse_uncovered("report", args.run_dir)  # before torch is imported and the dynamics computed

    from compose_lens.report import build_model_report, build_report, is_run_source  # lazy: torch
    from compose_lens.runs import load_subject
    from compose_lens.safety import check_count, check_file_output

    check_count(args.stride, "--stride")
    if args.example and len(args.example) > 100:
        raise ComposeLensError(f"{len(args.example)} examples: at most 100")
    compared = {}
    if is_run_source(run_dir):
        if args.task:
            raise ComposeLensError(f"{run_dir}: a compose-lens run carries its own task; --task is for your own model")
        check_file_output(run_dir / "report.html" if args.out is None else args.out, args.overwrite, "compose-lens")
        if args.compare:
            from compose_lens.runs import final_model

            compared = _compared_with(final_model(run_dir, args.split)[0], args)
        path, problems = build_report(args.run_dir, args.out, args.split, args.example or None, args.stride,
                                      progress=not args.quiet, recompute=args.recompute, **compared)
    else:  # one model: paper, a checkpoint or model directory, a .pth, your own TransformerLens model
        if args.out is None:
            raise ComposeLensError(f"{args.run_dir}: one model has no run directory to write into; give --out FILE.html")
        check_file_output(args.out, args.overwrite, "compose-lens")
        subject = load_subject(args.run_dir, args.task, args.split)
        compared = _compared_with(subject, args) if args.compare else {}
        path, problems = build_model_report(subject, args.out, args.example or None, **compared)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB, self-contained)")
    for problem in problems:
        print(f"  section skipped: {problem}")
    return 0


def _compared_with(subject, args: argparse.Namespace) -> dict:
    """``--compare OTHER``: the other model, loaded and checked against the report's before anything is
    written (a missing model, another task or split, too large a model: one line, exit 2)."""
    from compose_lens import compare
    from compose_lens.cli.compare import check_memory, subjects

    check_memory([args.compare], compare.POOL_SIZE,
                 f"--compare {args.compare} (nine pools of {compare.POOL_SIZE} sequences)")
    other = subjects([args.compare], args.task)[0]
    compare.check_comparable(subject, other)
    return {"compare_with": other, "compare_label": args.compare}


def register(sub) -> None:
    _register_dynamics(sub)
    _register_report(sub)


def _register_dynamics(sub) -> None:
    p = sub.add_parser("dynamics", help="evaluate every checkpoint of a run and find the three phases")
    p.add_argument("source", help="run directory, its checkpoints/ folder, or a folder of step_N.pth files")
    p.add_argument("--split", help="split file (default: the run's split.json)")
    p.add_argument("--out", required=True, help="directory for dynamics.csv and phases.json")
    p.add_argument("--pool-size", type=int, default=2000, help="sequences per accuracy pool")
    p.add_argument("--slot-size", type=int, default=500, help="sequences per forbidden-slot batch")
    p.add_argument("--steps", help="only these checkpoint steps, comma-separated")
    p.add_argument("--stride", type=int, default=1, help="every k-th checkpoint (the last always kept)")
    p.add_argument("--no-circuit", action="store_true", help="skip the circuit measures (pools only)")
    p.add_argument("--seed", type=seed, default=0, help="seed of the evaluation pools and prompt pairs (default 0), the same at every checkpoint")
    p.add_argument("--device", default="cpu", help="where the checkpoints run: cpu (default), cuda or cuda:N")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest for these small ops)")
    p.add_argument("--update", action="store_true",
                   help="keep the rows of OUT/dynamics.csv (same settings) and evaluate only new checkpoints")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out (one dynamics wrote)")
    p.set_defaults(func=_cmd_dynamics)


def _register_report(sub) -> None:
    p = sub.add_parser("report", help="one offline HTML page with every result of a run or of one model")
    p.add_argument("run_dir", metavar="RUN_OR_MODEL",
                   help="a run directory (its dynamics and phases too), a folder of the study's step_N.pth files "
                        "(with --out), or one MODEL: paper, a checkpoint, a .pth, your own TransformerLens model")
    p.add_argument("--out", help="HTML file to write (default RUN_DIR/report.html; required for one model)")
    p.add_argument("--split", help="split file (default: the run's split.json)")
    p.add_argument("--task", metavar="FILE", help="your own model's task declaration (docs/own-model.md)")
    p.add_argument("--example", action="append", help="example sequence for the attention views (repeatable)")
    p.add_argument("--compare", metavar="OTHER",
                   help="add a section comparing this model (A) with OTHER (B: paper, a checkpoint, a run, a .pth, "
                        "your own model of the same task): every row of `compose-lens compare A B` (docs/compare.md)")
    p.add_argument("--stride", type=int, default=1, help="dynamics on every k-th checkpoint if computed now")
    p.add_argument("--recompute", action="store_true", help="recompute the dynamics even if saved")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--overwrite", action="store_true", help="replace an existing report page")
    p.set_defaults(func=_cmd_report)
