"""``compose-lens report`` (one offline HTML page with every result of a run or of one model; with
``--compare OTHER`` a last section sets it beside another model, as ``compose-lens compare`` does)."""

from __future__ import annotations

import argparse
from pathlib import Path

from compose_lens.cli.common import (JSON_HELP, add_device_argument, add_overwrite, add_prompts_argument, emit, prompted,
                                     refuse_uncovered, seed)
from compose_lens.core.errors import ComposeLensError


def _cmd_report(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    refuse_uncovered("report", args.run_dir)  # before torch is imported and the dynamics computed

    from compose_lens.report import build_model_report, build_report, is_run_source  # lazy: torch
    from compose_lens.training.subject import check_device, load_subject
    from compose_lens.data.safety import check_count, check_file_output

    check_count(args.stride, "--stride")
    check_device(args.device)
    if args.example and len(args.example) > 100:
        raise ComposeLensError(f"{len(args.example)} examples: at most 100")
    compared = {}
    if is_run_source(run_dir):
        if args.task or args.prompts:
            raise ComposeLensError(f"{run_dir}: a run's report reads its own task and pools; --task and --prompts "
                                   f"are for one model (report MODEL --out FILE.html)")
        check_file_output(run_dir / "report.html" if args.out is None else args.out, args.overwrite, "compose-lens")
        if args.compare:
            from compose_lens.training.subject import final_model

            compared = _compared_with(final_model(run_dir, args.split)[0], args)
        path, problems = build_report(args.run_dir, args.out, args.split, args.example or None, args.stride,
                                      progress=not args.quiet, recompute=args.recompute, seed=args.seed,
                                      device=args.device, **compared)
    else:  # one model: paper, a checkpoint or model directory, a .pth, your own TransformerLens model
        if args.out is None:
            raise ComposeLensError(f"{args.run_dir}: one model has no run directory to write into; give --out FILE.html")
        check_file_output(args.out, args.overwrite, "compose-lens")
        subject = prompted(load_subject(args.run_dir, args.task, args.split, device=args.device), args.prompts)
        compared = _compared_with(subject, args) if args.compare else {}
        path, problems = build_model_report(subject, args.out, args.example or None, seed=args.seed,
                                            progress=not args.quiet, **compared)
    emit(args, {"report": str(path), "bytes": path.stat().st_size, "sections_skipped": problems},
         [f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB, self-contained)",
          *(f"  section skipped: {problem}" for problem in problems)])
    return 0


def _compared_with(subject, args: argparse.Namespace) -> dict:
    """``--compare OTHER``: the other model, loaded and checked against the report's before anything is
    written (a missing model, another task or split, too large a model: one line, exit 2)."""
    from compose_lens.report import compare
    from compose_lens.cli.compare import check_memory, subjects

    check_memory([args.compare], compare.POOL_SIZE,
                 f"--compare {args.compare} (nine pools of {compare.POOL_SIZE} sequences)")
    other = subjects([args.compare], args.task)[0]
    compare.check_comparable(subject, other)
    return {"compare_with": other, "compare_label": args.compare}


def register(sub) -> None:
    p = sub.add_parser("report", help="one offline HTML page with every result of a run or of one model")
    p.add_argument("run_dir", metavar="RUN_OR_MODEL",
                   help="a run directory (its dynamics and phases too), a folder of the study's step_N.pth files "
                        "(with --out), or one MODEL: paper, a checkpoint, a .pth, your own TransformerLens model")
    p.add_argument("--out", help="HTML file to write (default RUN_DIR/report.html; required for one model)")
    p.add_argument("--split", help="split file (default: the run's split.json)")
    p.add_argument("--task", metavar="FILE", help="your own model's task declaration (docs/own-model.md)")
    add_prompts_argument(p)
    p.add_argument("--example", action="append", help="example sequence for the attention views (repeatable)")
    p.add_argument("--compare", metavar="OTHER",
                   help="add a section comparing this model (A) with OTHER (B: paper, a checkpoint, a run, a .pth, "
                        "your own model of the same task): every row of `compose-lens compare A B` (docs/compare.md)")
    p.add_argument("--stride", type=int, default=1, help="dynamics on every k-th checkpoint if computed now")
    p.add_argument("--recompute", action="store_true", help="recompute the dynamics even if saved")
    add_overwrite(p, "report page")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    add_device_argument(p)
    p.add_argument("--seed", type=seed, default=0,
                   help="seed of the sequences the report's analyses draw (default 0): the same seed, the same page")
    p.set_defaults(func=_cmd_report)
