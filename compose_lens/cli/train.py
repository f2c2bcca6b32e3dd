"""``compose-lens train`` and ``compose-lens evaluate``."""

from __future__ import annotations

import argparse
import json
import sys

from compose_lens.cli.common import (add_device_argument, add_model_arguments, add_outputs, emit, print_json,
                                     run_config_from_args, seed, subject_of)
from compose_lens.core.config import RunConfig
from compose_lens.core.errors import ComposeLensError
from compose_lens.core.files import load_json


def add_device_options(parser: argparse.ArgumentParser) -> None:
    """--device and --deterministic of the commands that train (train, sweep): shorthands for
    ``--set device=D`` and ``--set deterministic=true``."""
    add_device_argument(parser, default=None)
    parser.add_argument("--deterministic", action="store_true",
                        help="torch's deterministic algorithms and cuBLAS's fixed workspace, so a GPU run repeats "
                             "bit for bit where CUDA can (docs/install.md 'On a GPU'; --set deterministic=true)")


def with_device_options(config: RunConfig, args: argparse.Namespace) -> RunConfig:
    """``config`` with what --device and --deterministic ask (the device checked in one line first)."""
    changes = ([f"device={args.device}"] if args.device else []) + (["deterministic=true"] if args.deterministic else [])
    return config.with_overrides(changes) if changes else config


def _cmd_train(args: argparse.Namespace) -> int:
    from compose_lens.data.split import Split  # lazy: torch
    from compose_lens.training.train import Trainer  # lazy: torch

    from compose_lens.data.safety import check_out_name, read_marker

    out = check_out_name(args.out)
    if args.resume and args.overwrite:
        raise ComposeLensError("--resume continues a run and --overwrite replaces it: pass one of them")
    if args.resume and not (out / "config.json").is_file() and read_marker(out) is None:
        # nothing there to resume (a run killed before its first file still has its marker and starts again)
        raise ComposeLensError(f"--resume: {out} holds no run to resume; drop --resume to start a new run there, "
                               f"or give the --out of the run to continue")
    if args.resume and (out / "config.json").is_file() and not args.config:
        # the run's own configuration; --set may only raise steps (compose_lens.training.runs.extends)
        config = RunConfig.from_dict(load_json(out / "config.json")).with_overrides([*_seed_sets(args.seed),
                                                                                     *(args.set or [])])
    else:
        config = run_config_from_args(args, seeds_first=_seed_sets(args.seed))
    config = with_device_options(config, args)
    split = Split.load(args.split_file, config.task) if args.split_file else None
    if split is not None:
        config = RunConfig(task=split.task, model=config.model, train=config.train)
    trainer = Trainer(config, out, split=split, resume=args.resume, overwrite=args.overwrite,
                      progress=not args.quiet)
    if trainer.restarted:
        print(f"{out}: no resume state yet (stopped before its first checkpoint): starting again from step 0")
    try:
        results = trainer.run()
    except KeyboardInterrupt:
        sys.stderr.write(f"\ninterrupted at step {trainer.step}; the last checkpoint is kept: "
                         f"continue with `compose-lens train --out {out} --resume`\n")
        return 130
    o = results["outcome"]
    emit(args, results, [
        f"trained {results['steps']} steps in {results['train_wall_time_s']:.1f} s (fast path: {results['fast_path']})",
        *(f"{name}: {r['correct']}/{r['total']} = {r['accuracy']:.4f}" for name, r in results["exhaustive"].items()),
        f"outcome: {o['outcome']} ({o['why']})",
        f"results: {out / 'results.json'}"])
    return 0


def _seed_sets(value: int | None) -> list[str]:
    """``train --seed S``: the three seeds a sweep's seed sets (the split, the data order, the initial weights)."""
    return [] if value is None else [f"task.seed={value}", f"train.seed={value}", f"model.init_seed={value}"]


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from compose_lens.training.evaluate import exhaustive_accuracies, from_pools, pool_accuracies  # lazy: torch
    from compose_lens.data.sampler import absent_pools, exhaustive_count, make_pools  # lazy: torch
    from compose_lens.core.provenance import provenance
    from compose_lens.core.progress import phases
    from compose_lens.training.subject import check_device
    from compose_lens.data.safety import check_count, check_file_output, check_model_sizes, check_sizes, write_text_atomic
    from compose_lens.core.stats import rate_record

    check_count(args.pool_size, "--pool-size")
    check_device(args.device)
    out = check_file_output(args.out, args.overwrite, '"pool_intervals"') if args.out else None

    def guard(config: RunConfig) -> None:  # the nine pools (answer logits only; the exhaustive sets too)
        exhaustive = {"--exhaustive": (1, exhaustive_count(config.task))} if args.exhaustive else {}
        check_sizes(config, {f"--pool-size {args.pool_size}": (args.pool_size, 9), **exhaustive})

    check_model_sizes(args.model, guard)  # before the model is loaded
    with phases("evaluate", not args.quiet) as phase:
        phase("loading the model")
        loaded = subject_of(args, device=args.device, bridge=False)
        guard(loaded.config)
        phase("the nine pools")
        batches = make_pools(loaded.split, args.pool_size, args.seed)
        accuracies = pool_accuracies(loaded.model, loaded.config, batches)
        # each pool k of n sequences: the accuracy at the digits n resolves, with its Wilson interval
        intervals = {name: rate_record(round(acc * len(batches[name])), len(batches[name]))
                     for name, acc in accuracies.items()}
        pools = {name: record["accuracy"] for name, record in intervals.items()}
        knows = from_pools(loaded.config, batches, accuracies)
        result = {"model": loaded.source, "learned": knows.to_dict(), "pools": pools, "pool_intervals": intervals,
                  "interval": "Wilson score, 95 %"}
        absent = absent_pools(loaded.split)  # a split that holds nothing out: pools with nothing to draw
        if absent:
            result["absent_pools"] = absent
        if loaded.split.prompts is not None:
            phase("the declared distribution")
            result["prompts"], result["declared"] = _side_by_side(loaded, args.pool_size, args.seed)
        if args.exhaustive:
            phase("the exhaustive sets")
            for name, r in exhaustive_accuracies(loaded, args.seed).items():
                if not r["total"]:
                    result.setdefault("absent_exhaustive", {})[name] = "the split holds out nothing it would test"
                    continue
                record = rate_record(r["correct"], r["total"])
                result[name] = {"correct": r["correct"], "total": r["total"], "accuracy": record["accuracy"],
                                "low": record["low"], "high": record["high"]}
    result["provenance"] = provenance(loaded.config, args.seed, loaded.source, pool_size=args.pool_size)
    if out is not None:
        write_text_atomic(out, json.dumps(result, indent=2, sort_keys=True, default=str) + "\n")
    if args.json:
        print_json(result)
        return 0
    print(f"model: {loaded.source}")
    print(knows.line())
    print("accuracy [95 % Wilson interval] (correct/sequences):")
    if "prompts" in result:
        _print_side_by_side(result)
        intervals = {}
    for name, r in intervals.items():
        print(f"  {name:24s} {_shown(r)}")
    if "prompts" in result and "zero_var_heldout" in result:
        print("  the exhaustive sets, every sequence of the declared task:")
    for name in ("zero_var_heldout", "two_var_union"):
        if name in result:
            print(f"  {name:24s} {_shown({**result[name], 'n': result[name]['total']})}")
    for name, why in {**result.get("absent_pools", {}), **result.get("absent_exhaustive", {})}.items():
        print(f"  {name:24s} absent: {why}")
    if out is not None:
        print(f"wrote {out}")
    return 0


def _side_by_side(loaded, pool_size: int, seed: int) -> tuple[dict, dict]:
    """With ``--prompts``: the file's sequences as a whole (and how many fall outside the pools), and the
    declared distribution beside them: its nine pools and a sample of its training distribution (the declared
    context and mix of kinds, :class:`~compose_lens.data.sampler.TrainingSampler`), ``pool_size`` each."""
    import dataclasses

    from compose_lens.data import streams
    from compose_lens.data.prompts import OUTSIDE
    from compose_lens.data.sampler import Batch, TrainingSampler, make_pools
    from compose_lens.training.evaluate import pool_accuracies
    from compose_lens.core.stats import rate_record

    prompts, declared = loaded.split.prompts, dataclasses.replace(loaded.split, prompts=None)
    g = streams.derived_generator(seed, streams.DECLARED_SAMPLE)
    sets = {**make_pools(declared, pool_size, seed),
            "training distribution": TrainingSampler(declared, 1, seed).sample(pool_size, g),
            "your prompts, all": Batch(prompts.tokens, prompts.labels, prompts.rows)}
    accuracy = pool_accuracies(loaded.model, loaded.config, sets)
    records = {name: rate_record(round(accuracy[name] * len(batch)), len(batch)) for name, batch in sets.items()}
    mine = {"file": prompts.source, "all": records.pop("your prompts, all"),
            "outside_pools": prompts.pools.count(OUTSIDE)}
    return mine, {"pools": records}


def _shown(r: dict | None) -> str:
    """A rate record (:func:`~compose_lens.core.stats.rate_record`) as printed: accuracy [interval] (k/n)."""
    return "absent" if r is None else f"{r['accuracy']:.4f} [{r['low']:.4f}, {r['high']:.4f}] ({r['correct']}/{r['n']})"


def _print_side_by_side(result: dict) -> None:
    mine, declared = result["prompts"], result["declared"]["pools"]
    print(f"  {'pool':24s} {'your prompts (' + mine['file'] + ')':38s} declared distribution")
    for name in dict.fromkeys([*declared, *result["pool_intervals"]]):
        if name != "training distribution":
            print(f"  {name:24s} {_shown(result['pool_intervals'].get(name)):38s} {_shown(declared.get(name))}")
    print(f"  {'all sequences':24s} {_shown(mine['all']):38s} {_shown(declared['training distribution'])} "
          f"(a sample of the declared training distribution)")
    if mine["outside_pools"]:
        print(f"  {mine['outside_pools']} of your sequences are in no pool (a held-out pair with a variable in a "
              f"forbidden slot); 'all sequences' counts them")


def _cmd_export(args: argparse.Namespace) -> int:
    from compose_lens.training.subject import export_transformerlens  # lazy: torch
    from compose_lens.data.safety import staged_output

    subject = subject_of(args)
    with staged_output(args.out, "export", args.overwrite) as stage:
        written = export_transformerlens(subject, stage)
    emit(args, {"model": subject.source, "out": args.out, "wrote": list(written)},
         [f"wrote {args.out}: {', '.join(written)} (plain TransformerLens loads it; MODEL_CARD.md says how)"])
    return 0


def register(sub) -> None:
    train = sub.add_parser("train", help="train a model (the paper recipe by default)")
    train.add_argument("--config", help="run config JSON ({task: ..., model: ..., train: ...})")
    train.add_argument("--set", action="append", metavar="KEY=VALUE",
                       help="override a setting, e.g. --set steps=2000 --set f=0.5 --set model.d_model=64; "
                            "`compose-lens settings` lists them all")
    add_outputs(train, "run directory", device=False, overwrite_what="run directory")
    train.add_argument("--seed", type=seed, help="seed of the split, the data order and the initial weights at once, "
                                                 "as a sweep's seed (--set task.seed / train.seed / model.init_seed "
                                                 "set one each; default: the study's, 42, 0 and 0)")
    train.add_argument("--split-file", help="train on this split file's held-out pairs")
    train.add_argument("--resume", action="store_true",
                       help="continue from the last checkpoint (with --set steps=N: train on to N steps; "
                            "--set stop_at=RULE: stop by another rule)")
    add_device_options(train)
    train.set_defaults(func=_cmd_train)

    ev = sub.add_parser("evaluate", help="accuracy on the nine pools (and the exhaustive sets)")
    add_model_arguments(ev)
    ev.add_argument("--exhaustive", action="store_true", help="also the 0-var held-out and 2-var union sets")
    add_outputs(ev, "also write the result (what --json prints) to this JSON file", required=False)
    ev.add_argument("--pool-size", type=int, default=2000, help="sequences in each of the nine pools (default 2000)")
    ev.add_argument("--seed", type=seed, default=0, help="seed of the pools' sequences (default 0)")
    ev.set_defaults(func=_cmd_evaluate)
    export = sub.add_parser("export", help="write a model as a folder plain TransformerLens loads (weights, "
                                           "config, task, model card)")
    add_model_arguments(export, prompts=False)
    add_outputs(export, "the folder to write", device=False)
    export.set_defaults(func=_cmd_export)
