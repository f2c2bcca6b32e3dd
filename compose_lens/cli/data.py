"""``compose-lens data sample|split|stats``: the task's sequences, splits and sizes."""

from __future__ import annotations

import argparse
import json
import sys

from compose_lens.cli.common import Parser, add_outputs, add_task_options, emit, print_json, split_from_args, seed
from compose_lens.core.errors import ComposeLensError


def _cmd_data_sample(args: argparse.Namespace) -> int:
    from compose_lens.data.sampler import TrainingSampler, make_pool, pool_names  # lazy: torch
    from compose_lens.data.streams import DATA_SAMPLE, derived_generator  # lazy: torch
    from compose_lens.data.task import SequenceKind, decode, to_text  # lazy: torch
    from compose_lens.core.config import ModelConfig, RunConfig
    from compose_lens.data.safety import check_count, check_file_output, check_sizes, write_text_atomic

    check_count(args.n, "--n")
    split = split_from_args(args)
    if args.split != "train" and args.split not in pool_names(split.task):  # a variant adds its pools
        raise ComposeLensError(f"--split {args.split}: use train or one of {', '.join(pool_names(split.task))}")
    check_sizes(RunConfig(task=split.task, model=ModelConfig.for_task(split.task)),
                {f"--n {args.n}": (args.n, 1, _json_line_bytes(split.task))}, forward=False)
    out = check_file_output(args.out, args.overwrite, '"tokens"') if args.out is not None else None
    if args.split == "train":
        batch = TrainingSampler(split, 1, args.seed).sample(args.n, derived_generator(args.seed, DATA_SAMPLE))
    else:
        batch = make_pool(split, args.split, args.n, args.seed)
    task = split.task
    rows = []
    for tokens, label, kind in zip(batch.tokens.tolist(), batch.labels.tolist(), batch.types.tolist()):
        d = decode(task, tokens)
        rows.append({"tokens": tokens, "text": to_text(task, tokens), "type": SequenceKind.at(kind).value,
                     "x": d.x, "y": d.y, "label": label})
    if args.json:  # one document: the sequences and where they came from
        from compose_lens.core.provenance import provenance

        lines = [json.dumps({"sequences": rows, "split": args.split, "provenance": provenance(seed=args.seed)},
                            indent=2, default=str) + "\n"]
    else:
        lines = [json.dumps(row) + "\n" for row in rows]
    if out is None:
        sys.stdout.writelines(lines)
    else:
        write_text_atomic(out, "".join(lines))  # whole or not at all
    return 0


def _json_line_bytes(task) -> int:
    """What ``data sample`` keeps of a sequence until the lines are written: its tokens as a Python
    list, its label and type, and its JSON line twice (the list of lines and the joined text),
    the line taking about 8 characters per token, 12 per assignment in the text, and 100 more.
    (Measured on the study's task: ~1.1 kB per sequence, the render included; this says ~0.9 kB
    beside the render's 1.8 kB.)"""
    line = 49 + 8 * task.seq_len + 12 * task.max_assignments + 100
    return 56 + 8 * task.seq_len + 16 + 2 * line + 8


def _cmd_data_split(args: argparse.Namespace) -> int:
    from compose_lens.data.safety import check_file_output

    out = check_file_output(args.out, args.overwrite, '"heldout_pairs"')
    split = split_from_args(args)
    split.save(out)
    emit(args, {"out": str(out), "train_pairs": len(split.train_pairs), "heldout_pairs": len(split.heldout_pairs),
                "task": split.task.to_dict()},
         [f"wrote {out}: {len(split.train_pairs)} training pairs, {len(split.heldout_pairs)} held out"])
    return 0


def data_stats(split) -> dict:
    from compose_lens.data.sampler import exhaustive_rows, pool_names  # lazy: torch
    from compose_lens.data.split import row_types, training_rows  # lazy: torch
    from compose_lens.data.task import SequenceKind  # lazy: torch

    task = split.task
    rows = training_rows(split)
    counts = row_types(rows).bincount(minlength=len(SequenceKind)).tolist()
    return {
        "task": task.to_dict(),
        "train_pairs": len(split.train_pairs),
        "heldout_pairs": len(split.heldout_pairs),
        "allowed_two_var_pairs": len(task.allowed_two_var_pairs),
        "one_forbidden_two_var_pairs": len(task.restricted_two_var_pairs(1)),
        "two_forbidden_two_var_pairs": len(task.restricted_two_var_pairs(2)),
        "training_rows": {kind.value: counts[kind.index] for kind in SequenceKind},
        "two_var_to_zero_var_ratio": counts[SequenceKind.TWO_VAR.index] / counts[SequenceKind.ZERO_VAR.index],
        "expected_two_var_to_zero_var_ratio": task.r * task.two_var_rows / task.zero_var_rows,
        "two_var_rows_per_pair": {"candidates": task.two_var_rows, "zero_var_rows": task.zero_var_rows},
        # every render draws the variable pair afresh, so a pair with a kept row reaches all allowed pairs
        "two_var_coverage": {
            "number_pairs_with_two_var_rows": int((split.two_var_counts > 0).sum()),
            "reachable_x_y_v_w": int((split.two_var_counts > 0).sum()) * len(task.allowed_two_var_pairs),
            "all_x_y_v_w_of_training_pairs": len(split.train_pairs) * len(task.allowed_two_var_pairs),
        },
        "pools": list(pool_names(task)),
        "exhaustive": {"zero_var_heldout": len(exhaustive_rows(split, "zero_var_heldout")),
                       "two_var_union": len(exhaustive_rows(split, "two_var_union"))},
    }


def _cmd_data_stats(args: argparse.Namespace) -> int:
    from compose_lens.data.sampler import exhaustive_count  # lazy: torch
    from compose_lens.core.provenance import provenance
    from compose_lens.data.safety import require_memory

    split = split_from_args(args)
    require_memory({"the exhaustive 2-var rows": 64 * exhaustive_count(split.task)},
                   f"modulus {split.task.modulus}", "use a smaller modulus")
    stats = data_stats(split)
    record = {**stats, "provenance": provenance(seed=stats["task"]["seed"])}
    if args.out:
        from compose_lens.data.safety import check_file_output, write_text_atomic

        out = check_file_output(args.out, args.overwrite, '"two_var_coverage"')
        write_text_atomic(out, json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")
    if args.json:
        print_json(record)
        return 0
    t = stats["task"]
    print(f"task: p={t['modulus']}, {t['n_vars']} variables, seq_len {t['seq_len']}, f={t['f']}, r={t['r']}")
    if split.task.is_variant:
        print("variant: " + ", ".join(f"{k}={t[k]}" for k in ("reassign_rate", "noise_rate", "chain_rate") if k in t))
    print(f"addition pairs: {stats['train_pairs']} training, {stats['heldout_pairs']} held out")
    print(f"2-var variable pairs: {stats['allowed_two_var_pairs']} allowed, "
          f"{stats['one_forbidden_two_var_pairs']} with one forbidden slot, "
          f"{stats['two_forbidden_two_var_pairs']} with two")
    print("training rows: " + ", ".join(f"{k} {v}" for k, v in stats["training_rows"].items()))
    print(f"#2-var / #0-var rows: {stats['two_var_to_zero_var_ratio']:.4f} "
          f"(expected r * {stats['two_var_rows_per_pair']['candidates']} / "
          f"{stats['two_var_rows_per_pair']['zero_var_rows']} = "
          f"{stats['expected_two_var_to_zero_var_ratio']:.4f})")
    cov = stats["two_var_coverage"]
    print(f"2-var coverage: {cov['number_pairs_with_two_var_rows']} training pairs have 2-var rows; with the "
          f"variable pair drawn at every render they reach {cov['reachable_x_y_v_w']:,} of the "
          f"{cov['all_x_y_v_w_of_training_pairs']:,} (x, y, v, w) combinations")
    print("exhaustive sets: " + ", ".join(f"{k} {v}" for k, v in stats["exhaustive"].items()))
    print("pools: " + ", ".join(stats["pools"]))
    return 0


def register(sub) -> None:
    data = sub.add_parser("data", help="generate the task: samples, splits, statistics")
    dsub = data.add_subparsers(dest="data_command", required=True, parser_class=Parser)
    sample = dsub.add_parser("sample", help="write sequences as JSON lines")
    sample.add_argument("--split", default="train", help="train, or a pool name such as 2var_train")
    sample.add_argument("--n", type=int, default=10, help="number of sequences")
    sample.add_argument("--seed", type=seed, default=0, help="sampling seed")
    add_outputs(sample, "file to write (default: stdout)", required=False, device=False)
    add_task_options(sample)
    sample.set_defaults(func=_cmd_data_sample)
    split = dsub.add_parser("split", help="write the held-out pairs and slot restrictions")
    add_outputs(split, "the split file to write (JSON)", device=False)
    add_task_options(split, seed_alias=True)
    split.set_defaults(func=_cmd_data_split)
    stats = dsub.add_parser("stats", help="sizes of the split, the pools and the type mix")
    add_outputs(stats, "also write the statistics (what --json prints) to this JSON file", required=False, device=False)
    add_task_options(stats, seed_alias=True)
    stats.set_defaults(func=_cmd_data_stats)
