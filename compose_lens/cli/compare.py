"""``compose-lens compare A B --out DIR``: two models side by side (:mod:`compose_lens.report.compare`).

Writes ``DIR/compare.{csv,json,html}`` (:func:`compose_lens.report.compare.write`) and prints the table: each
model's value with its interval, the difference B - A with its interval, and whether it changed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from compose_lens.cli.common import add_outputs, add_prompts_argument, print_json, print_table, prompted, seed
from compose_lens.core.errors import ComposeLensError

DEFAULT_POOL_SIZE = 2000  # compose_lens.report.compare.POOL_SIZE, repeated here so --help imports no torch


def register(sub) -> None:
    p = sub.add_parser("compare", help="two models side by side: differences and their intervals",
                       description="Read two models (checkpoints of one run, or runs of one task) on the same "
                                   "prompts: pool accuracies, located roles, the registered analyses' findings, "
                                   "the same-MLP verdict, MLP2's key frequencies; for each, the difference B - A "
                                   "with a paired bootstrap interval over the prompts where it is a rate or a "
                                   "mean over prompts, and whether it changed.")
    for name in ("a", "b"):
        p.add_argument(name, metavar=name.upper(),
                       help="run/checkpoint directory, .safetensors, study .pth, 'paper', or the directory of "
                            "your own TransformerLens model")
    add_outputs(p, "output directory (compare.csv, compare.json, compare.html)")
    p.add_argument("--seed", type=seed, default=0, help="seed of the prompts and of the resamples (default 0)")
    p.add_argument("--pool-size", type=int, default=DEFAULT_POOL_SIZE,
                   help=f"sequences in each of the nine pools (default {DEFAULT_POOL_SIZE})")
    p.add_argument("--task", metavar="FILE",
                   help="the task declaration of A and/or B where it is your own TransformerLens model "
                        "directory without a task.json (docs/own-model.md)")
    add_prompts_argument(p)
    p.set_defaults(func=_cmd_compare)


def subjects(specs, task: str | None, device: str = "cpu") -> list:
    """The models ``specs`` name, loaded as ``compare`` reads them (on ``device``, the fast forwards where
    exact), ``task`` given to whichever is a TransformerLens model directory (docs/own-model.md)."""
    from compose_lens.training.runs import is_transformerlens_dir  # lazy: torch
    from compose_lens.training.subject import load_subject  # lazy: torch

    own = [Path(str(spec)).is_dir() and is_transformerlens_dir(Path(str(spec))) for spec in specs]
    return [load_subject(spec, task if mine else None, device=device, bridge=False) for spec, mine in zip(specs, own)]


def check_memory(specs, pool_size: int, option: str | None = None) -> None:
    """Refuse, before anything is loaded, a model whose nine pools of ``pool_size`` sequences would not fit
    in memory; ``option``: what the message names (default ``--pool-size N``)."""
    from compose_lens.data.safety import check_model_sizes, check_sizes

    sizes = {option or f"--pool-size {pool_size}": (pool_size, 9)}
    for spec in specs:
        check_model_sizes(spec, lambda config: check_sizes(config, sizes))


def _cmd_compare(args: argparse.Namespace) -> int:
    from compose_lens.report import compare  # lazy: torch
    from compose_lens.core.progress import phases
    from compose_lens.training.subject import check_device
    from compose_lens.core.coverage import peek_run_config
    from compose_lens.data.safety import check_count, staged_output
    from compose_lens.training.runs import is_transformerlens_dir

    check_count(args.pool_size, "--pool-size", minimum=compare.MIN_POOL_SIZE)  # one prompt read as a change
    check_device(args.device)
    check_memory((args.a, args.b), args.pool_size)  # before anything is loaded
    for spec in (args.a, args.b):  # a model an analysis cannot read, named, before it is loaded
        config = peek_run_config(spec)  # (a TransformerLens directory's: compare checks it once loaded)
        if config is not None:
            compare.check_measurable(config, spec)
    with staged_output(args.out, "compare", args.overwrite) as stage, phases("compare", not args.quiet) as phase:
        phase("loading the models")
        if args.task and not any(Path(s).is_dir() and is_transformerlens_dir(Path(s)) for s in (args.a, args.b)):
            raise ComposeLensError(f"--task {args.task}: neither {args.a} nor {args.b} is a TransformerLens model "
                                   f"directory; a compose-lens model carries its own task")
        a, b = (prompted(s, args.prompts) for s in subjects((args.a, args.b), args.task, args.device))
        compare.check_comparable(a, b)
        phase("reading both on the same prompts")
        table = compare.compare(a, b, seed=args.seed, pool_size=args.pool_size)
        phase("writing the files")
        compare.write(table, a, b, stage)
    if args.json:
        print_json({"a": a.source, "b": b.source, "rows": table.to_dict("records"), "out": args.out})
        return 0
    print(f"A: {a.source}\nB: {b.source}")
    print_table(compare.text_table(table), ["measure", "A", "B", "B - A", "changed"])
    print("intervals: 95 %; pool accuracies: Wilson; B - A: paired bootstrap over the same prompts where the "
          "measure is a rate or a mean over prompts ('interval' column of compare.csv)")
    print(f"wrote {args.out}/compare.csv, {args.out}/compare.json and {args.out}/compare.html (opens offline)")
    return 0
