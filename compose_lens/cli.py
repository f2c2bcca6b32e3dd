"""The ``compose-lens`` command line: a thin layer over the library.

Each command group lives in the module that implements it and registers itself
through a ``register(subparsers)`` function; this module only builds the parser,
runs the command and turns a :class:`~compose_lens.config.ComposeLensError` into
one line on stderr and exit status 2 (1 for other failures, 130 on Ctrl-C).

Commands: ``data sample|split|stats``, ``train``, ``evaluate``, and those added
by the analysis, dynamics, report and sweep modules listed in ``COMMAND_MODULES``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from typing import Sequence

from compose_lens.config import ComposeLensError, ConfigError, RunConfig, TaskConfig, load_json

# Modules that add subcommands (each defines ``register(subparsers)``).
COMMAND_MODULES: tuple[str, ...] = (
    "compose_lens.analysis.cli",
    "compose_lens.analysis.patch_cli",
    "compose_lens.dynamics",
    "compose_lens.attention",
    "compose_lens.report",
    "compose_lens.sweep",
)


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line and exits 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        raise SystemExit(2)


# -- shared argument helpers -----------------------------------------------------------


def add_task_options(parser: argparse.ArgumentParser) -> None:
    """--f, --r, --modulus, ... and --set key=value for the task."""
    g = parser.add_argument_group("task")
    g.add_argument("--f", type=float, help="fraction of addition pairs used in training (0, 1]")
    g.add_argument("--r", type=float, help="keep probability of each 2-var row [0, 1]")
    g.add_argument("--modulus", type=int, help="the modulus p")
    g.add_argument("--n-vars", type=int, help="number of variables")
    g.add_argument("--task-seed", type=int, help="seed of the split (pairs and 2-var rows)")
    g.add_argument("--split-file", help="load held-out pairs and restrictions from a split file")


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The MODEL positional argument and --split, as every analysis command takes them."""
    parser.add_argument("model", help="run/checkpoint directory, .safetensors, study .pth, or 'paper'")
    parser.add_argument("--split", help="split file (default: the model's own, or split.json beside a .pth)")


def task_from_args(args: argparse.Namespace) -> TaskConfig:
    from compose_lens.split import Split

    if getattr(args, "split_file", None):
        return Split.load(args.split_file).task
    changes = {k: v for k, v in (("f", args.f), ("r", args.r), ("modulus", args.modulus),
                                  ("n_vars", args.n_vars), ("seed", args.task_seed)) if v is not None}
    return TaskConfig(**changes)


def split_from_args(args: argparse.Namespace):
    from compose_lens.split import Split

    if getattr(args, "split_file", None):
        task = Split.load(args.split_file).task
        if args.r is not None:
            task = task.replace(r=args.r)
        return Split.load(args.split_file, task)
    return Split.from_task(task_from_args(args))


def print_json(data) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


# -- data --------------------------------------------------------------------------------


def _cmd_data_sample(args: argparse.Namespace) -> int:
    from compose_lens.sampler import POOL_NAMES, TrainingSampler, make_pool
    from compose_lens.split import derived_generator
    from compose_lens.task import SEQUENCE_TYPES, decode, to_text

    split = split_from_args(args)
    if args.n < 1:
        raise ComposeLensError(f"--n {args.n}: ask for at least one sequence")
    if args.split == "train":
        batch = TrainingSampler(split, 1, args.seed).sample(args.n, derived_generator(args.seed, 9))
    elif args.split in POOL_NAMES:
        batch = make_pool(split, args.split, args.n, args.seed)
    else:
        raise ComposeLensError(f"--split {args.split}: use train or one of {', '.join(POOL_NAMES)}")
    task = split.task
    out = open(args.out, "w") if args.out else sys.stdout
    try:
        for tokens, label, kind in zip(batch.tokens.tolist(), batch.labels.tolist(), batch.types.tolist()):
            d = decode(task, tokens)
            out.write(json.dumps({"tokens": tokens, "text": to_text(task, tokens),
                                  "type": SEQUENCE_TYPES[kind], "x": d.x, "y": d.y, "label": label}) + "\n")
    finally:
        if args.out:
            out.close()
    return 0


def _cmd_data_split(args: argparse.Namespace) -> int:
    split = split_from_args(args)
    out = Path(args.out)
    if out.exists() and not args.overwrite:
        raise ComposeLensError(f"{out} exists; pass --overwrite to replace it")
    split.save(out)
    print(f"wrote {out}: {len(split.train_pairs)} training pairs, {len(split.heldout_pairs)} held out")
    return 0


def data_stats(split) -> dict:
    from compose_lens.sampler import POOL_NAMES, exhaustive_rows
    from compose_lens.split import row_types, training_rows
    from compose_lens.task import SEQUENCE_TYPES

    task = split.task
    rows = training_rows(split)
    counts = row_types(rows).bincount(minlength=4).tolist()
    return {
        "task": task.to_dict(),
        "train_pairs": len(split.train_pairs),
        "heldout_pairs": len(split.heldout_pairs),
        "allowed_two_var_pairs": len(task.allowed_two_var_pairs),
        "one_forbidden_two_var_pairs": len(task.restricted_two_var_pairs(1)),
        "two_forbidden_two_var_pairs": len(task.restricted_two_var_pairs(2)),
        "training_rows": dict(zip(SEQUENCE_TYPES, counts)),
        "two_var_to_zero_var_ratio": counts[3] / counts[0],
        "expected_two_var_to_zero_var_ratio": task.r * task.two_var_rows / task.zero_var_rows,
        "pools": list(POOL_NAMES),
        "exhaustive": {"zero_var_heldout": len(exhaustive_rows(split, "zero_var_heldout")),
                       "two_var_union": len(exhaustive_rows(split, "two_var_union"))},
    }


def _cmd_data_stats(args: argparse.Namespace) -> int:
    stats = data_stats(split_from_args(args))
    if args.json:
        print_json(stats)
        return 0
    t = stats["task"]
    print(f"task: p={t['modulus']}, {t['n_vars']} variables, seq_len {t['seq_len']}, f={t['f']}, r={t['r']}")
    print(f"addition pairs: {stats['train_pairs']} training, {stats['heldout_pairs']} held out")
    print(f"2-var variable pairs: {stats['allowed_two_var_pairs']} allowed, "
          f"{stats['one_forbidden_two_var_pairs']} with one forbidden slot, "
          f"{stats['two_forbidden_two_var_pairs']} with two")
    print("training rows: " + ", ".join(f"{k} {v}" for k, v in stats["training_rows"].items()))
    print(f"#2-var / #0-var rows: {stats['two_var_to_zero_var_ratio']:.4f} "
          f"(expected r * {t['two_var_rows']} / {t['zero_var_rows']} = "
          f"{stats['expected_two_var_to_zero_var_ratio']:.4f})")
    print("exhaustive sets: " + ", ".join(f"{k} {v}" for k, v in stats["exhaustive"].items()))
    print("pools: " + ", ".join(stats["pools"]))
    return 0


def _register_data(sub) -> None:
    data = sub.add_parser("data", help="generate the task: samples, splits, statistics")
    dsub = data.add_subparsers(dest="data_command", required=True, parser_class=Parser)
    sample = dsub.add_parser("sample", help="write sequences as JSON lines")
    sample.add_argument("--split", default="train", help="train, or a pool name such as 2var_train")
    sample.add_argument("--n", type=int, default=10, help="number of sequences")
    sample.add_argument("--seed", type=int, default=0, help="sampling seed")
    sample.add_argument("--out", help="file to write (default: stdout)")
    add_task_options(sample)
    sample.set_defaults(func=_cmd_data_sample)
    split = dsub.add_parser("split", help="write the held-out pairs and slot restrictions")
    split.add_argument("--out", required=True)
    split.add_argument("--overwrite", action="store_true")
    add_task_options(split)
    split.set_defaults(func=_cmd_data_split)
    stats = dsub.add_parser("stats", help="sizes of the split, the pools and the type mix")
    stats.add_argument("--json", action="store_true")
    add_task_options(stats)
    stats.set_defaults(func=_cmd_data_stats)


# -- train and evaluate -------------------------------------------------------------------


def run_config_from_args(args: argparse.Namespace) -> RunConfig:
    config = RunConfig.from_dict(load_json(args.config)) if args.config else RunConfig()
    return config.with_overrides(args.set or [])


def _cmd_train(args: argparse.Namespace) -> int:
    from compose_lens.split import Split
    from compose_lens.train import Trainer

    out = Path(args.out)
    if args.resume and (out / "config.json").exists() and not args.config and not args.set:
        config = RunConfig.from_dict(load_json(out / "config.json"))
    else:
        config = run_config_from_args(args)
    split = Split.load(args.split_file, config.task) if args.split_file else None
    if split is not None:
        config = RunConfig(task=split.task, model=config.model, train=config.train)
    trainer = Trainer(config, out, split=split, resume=args.resume, overwrite=args.overwrite,
                      progress=not args.quiet)
    try:
        results = trainer.run()
    except KeyboardInterrupt:
        sys.stderr.write(f"\ninterrupted at step {trainer.step}; the last checkpoint is kept: "
                         f"continue with `compose-lens train --out {out} --resume`\n")
        return 130
    ex = results["exhaustive"]
    print(f"trained {results['steps']} steps in {results['train_wall_time_s']:.1f} s "
          f"(fast path: {results['fast_path']})")
    for name, r in ex.items():
        print(f"{name}: {r['correct']}/{r['total']} = {r['accuracy']:.4f}")
    print(f"results: {out / 'results.json'}")
    return 0


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from compose_lens.evaluate import exhaustive_accuracies, pool_accuracies
    from compose_lens.model import load_model
    from compose_lens.sampler import make_pools

    loaded = load_model(args.model, args.split, device=args.device)
    pools = pool_accuracies(loaded.model, loaded.config, make_pools(loaded.split, args.pool_size, args.seed))
    result = {"model": loaded.source, "pools": pools}
    if args.exhaustive:
        result.update(exhaustive_accuracies(loaded.model, loaded.config, loaded.split, args.seed))
    if args.json:
        print_json(result)
        return 0
    print(f"model: {loaded.source}")
    for name, acc in pools.items():
        print(f"  {name:24s} {acc:.4f}")
    for name in ("zero_var_heldout", "two_var_union"):
        if name in result:
            r = result[name]
            print(f"  {name:24s} {r['accuracy']:.4f} ({r['correct']}/{r['total']})")
    return 0


def _register_train(sub) -> None:
    train = sub.add_parser("train", help="train a model (the paper recipe by default)")
    train.add_argument("--config", help="run config JSON ({task: ..., model: ..., train: ...})")
    train.add_argument("--set", action="append", metavar="KEY=VALUE",
                       help="override a setting, e.g. --set steps=2000 --set f=0.5 --set model.d_model=64")
    train.add_argument("--out", required=True, help="run directory")
    train.add_argument("--split-file", help="train on this split file's held-out pairs")
    train.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    train.add_argument("--overwrite", action="store_true", help="replace an existing run directory")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.set_defaults(func=_cmd_train)

    ev = sub.add_parser("evaluate", help="accuracy on the nine pools (and the exhaustive sets)")
    add_model_arguments(ev)
    ev.add_argument("--exhaustive", action="store_true", help="also the 0-var held-out and 2-var union sets")
    ev.add_argument("--json", action="store_true")
    ev.add_argument("--pool-size", type=int, default=2000)
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument("--device", default="cpu")
    ev.set_defaults(func=_cmd_evaluate)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="compose-lens", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    _register_data(sub)
    _register_train(sub)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ComposeLensError, ConfigError) as exc:
        sys.stderr.write(f"compose-lens: error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("\ninterrupted\n")
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
