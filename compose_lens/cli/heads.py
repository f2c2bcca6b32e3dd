"""``compose-lens patch-heads`` and ``path-patch``: patching finer than a whole component.

    compose-lens patch-heads MODEL --out DIR [--component q|k|v|pattern|z ...] [--by role|position]
                             [--corruption value|variable|constant] [--n-pairs N] [--pairs FILE]
                             [--metric logit_diff|prob|accuracy] [--seed N] [--format png|svg|pdf]
    compose-lens path-patch MODEL --sender blocks.0.head0 --receiver blocks.1.head0.v [--receiver ...]
                            --out DIR [the same pair options]

``patch-heads`` writes each head's query, key, value, attention pattern (a destination
position's row) or output from the clean prompt into the corrupted run, one site per (layer,
position, head), grouped by token role as ``patch`` groups them
(:func:`compose_lens.analysis.patching.head_patching_table`; TransformerLens's
``get_act_patch_attn_head_*_by_pos``). ``path-patch`` lets the sender's clean output reach only
each receiver, a later head's query, key or value or an MLP's input, by Wang et al.'s two steps
(:func:`compose_lens.analysis.patching.path_patching`), and the sender alone for comparison.

Blocks are TransformerLens's, from 0 (``blocks.1`` is the paper's layer 2). Each command writes a
CSV, its ``.provenance.json`` and a figure into DIR, and prints the numbers with their 95 %
bootstrap intervals over the prompt pairs. Both read the model through the TransformerLens bridge's
hooks.
"""

from __future__ import annotations

import argparse
import functools

from compose_lens import registry  # plain declarations: no torch
from compose_lens.cli.common import (add_format_argument, add_model_arguments, add_overwrite, add_pairs_arguments,
                                     add_quiet_argument, check_pairs_file, progress_bar, seed, subject_of)
from compose_lens.config import CORRUPTIONS, HEAD_COMPONENTS

DEFAULT_COMPONENTS = ("q", "k", "v", "pattern")
SHOWN = 12  # patch-heads prints the sites with the largest effects, this many at most,
SMALL = 0.005  # and none smaller than this (half a percent of the clean-corrupted difference)


def _memory(n_pairs: int, corruption: str, config) -> None:
    """Per pair: the clean and corrupted prompts (``variable`` draws four 1-var prompts per pair),
    the clean run's cached activations, and per site and pair the patched value and the
    bootstrap's float64 gain and mask (as ``patch``'s guard counts them)."""
    from compose_lens.safety import check_sizes, kept_activation_bytes

    m = config.model
    sites = m.n_layers * m.n_ctx * m.n_heads * len(HEAD_COMPONENTS)
    kept = 20 * sites + 16 * registry.PATCHING.settings["n_boot"] + kept_activation_bytes(config)
    check_sizes(config, {f"--n-pairs {n_pairs}": (n_pairs, 5 if corruption == "variable" else 2, kept)})


def _site_label(row) -> str:
    where = row["role"] if "position" not in row or row["role"] != "context" else f"position {row['position']}"
    return f"{row['component']} of blocks.{row['block']} head {row['head']} at {where}"


def _pairs_words(table, args) -> str:
    source = f" from {args.pairs}" if args.pairs else f", {table['corruption'].iloc[0]} corrupted"
    in_metric = "" if args.metric == "logit_diff" else f", metric {args.metric}"
    return f"{int(table['n_pairs'].iloc[0])} pairs{source}{in_metric}"


def _cmd_patch_heads(args: argparse.Namespace) -> int:
    from compose_lens.safety import check_count, check_model_sizes, check_out_name, staged_output

    check_count(args.n_pairs, "--n-pairs", minimum=2)
    check_pairs_file(args)
    out = check_out_name(args.out)
    guard = functools.partial(_memory, args.n_pairs, args.corruption)
    check_model_sizes(args.model, guard)  # before anything is loaded or made
    components = tuple(dict.fromkeys(args.component or DEFAULT_COMPONENTS))
    with staged_output(out, "patch-heads", args.overwrite) as stage, \
            progress_bar("patch-heads", 2, args.quiet) as bar:
        from compose_lens import plots
        from compose_lens.analysis.patching import head_patching_table
        from compose_lens.provenance import provenance
        from compose_lens.runs import write_table

        bar.set_postfix_str("loading the model")
        loaded = subject_of(args)  # with the bridge: its hooks are what is patched
        guard(loaded.config)
        bar.update()
        bar.set_postfix_str(f"patching {len(components)} head inputs")
        table = head_patching_table(loaded, components=components, n_pairs=args.n_pairs,
                                    corruption=args.corruption, seed=args.seed, by=args.by, pairs=args.pairs,
                                    metric=args.metric, n_boot=registry.PATCHING.settings["n_boot"])
        stem = f"patching_heads_{table['corruption'].iloc[0]}" + ("" if args.by == "role" else "_by_position")
        given = {} if args.pairs is None else {"pairs": str(args.pairs)}
        write_table(table, stage / f"{stem}.csv", provenance(
            loaded.config, args.seed, loaded.source, components=list(components), corruption=args.corruption,
            n_pairs=int(table["n_pairs"].iloc[0]), by=args.by, metric=args.metric, **given))
        fig, _ = plots.patching_figure(table, f"per-head patching ({_pairs_words(table, args)})")
        plots.save(fig, None, stage / stem, dpi=120, fmt=args.fmt)
        bar.update()
    print(f"per-head patching of {', '.join(components)} ({_pairs_words(table, args)}); normalised "
          f"{plots.metric_words(args.metric)}, 0: corrupted, 1: clean, "
          f"[95 % bootstrap interval]:")
    _print_largest(table)
    print(f"wrote {out}/{stem}.csv, {stem}.provenance.json, {stem}.{args.fmt} ({len(table)} rows by {args.by})")
    return 0


def _print_largest(table) -> None:
    from compose_lens.stats import format_estimate

    order = table["mean"].abs().sort_values(ascending=False, kind="stable").index
    shown = table.loc[order[:SHOWN]]
    shown = shown[shown["mean"].abs() >= SMALL]
    labels = [_site_label(row) for _, row in shown.iterrows()]
    width = max(map(len, labels), default=0)
    for label, (_, row) in zip(labels, shown.iterrows()):
        print(f"  {label.ljust(width)}  {format_estimate(row['mean'], row['ci_low'], row['ci_high'])}")
    if shown.empty:
        print(f"  (no site moves it by {SMALL} or more)")
    elif len(table) > len(shown):
        print(f"  ({len(table) - len(shown)} more rows in the CSV, each smaller)")


def _check_path_names(args: argparse.Namespace) -> None:
    """Refuse a sender or receiver that cannot be, before the model loads (from its config.json
    where it can be read; the analysis checks again against the loaded model)."""
    from compose_lens.analysis.patching import check_path, path_end
    from compose_lens.coverage import peek_model_config

    cfg = peek_model_config(args.model)
    sender = path_end(args.sender, "sender", cfg)
    for receiver in args.receiver:
        check_path(sender, path_end(receiver, "receiver", cfg))


def _cmd_path_patch(args: argparse.Namespace) -> int:
    from compose_lens.safety import check_count, check_model_sizes, check_out_name, staged_output

    check_count(args.n_pairs, "--n-pairs", minimum=2)
    check_pairs_file(args)
    out = check_out_name(args.out)
    _check_path_names(args)
    guard = functools.partial(_memory, args.n_pairs, args.corruption)
    check_model_sizes(args.model, guard)
    receivers = list(dict.fromkeys(args.receiver))
    with staged_output(out, "path-patch", args.overwrite) as stage, \
            progress_bar("path-patch", 2, args.quiet) as bar:
        from compose_lens import plots
        from compose_lens.analysis.patching import path_patching
        from compose_lens.provenance import provenance
        from compose_lens.runs import write_table

        bar.set_postfix_str("loading the model")
        loaded = subject_of(args)
        guard(loaded.config)
        bar.update()
        bar.set_postfix_str(f"patching {len(receivers)} paths")
        table = path_patching(loaded, sender=args.sender, receivers=receivers, n_pairs=args.n_pairs,
                              corruption=args.corruption, seed=args.seed, pairs=args.pairs, metric=args.metric,
                              n_boot=registry.PATCHING.settings["n_boot"])
        stem = f"path_patching_{table['corruption'].iloc[0]}"
        given = {} if args.pairs is None else {"pairs": str(args.pairs)}
        write_table(table, stage / f"{stem}.csv", provenance(
            loaded.config, args.seed, loaded.source, sender=args.sender, receivers=receivers,
            corruption=args.corruption, n_pairs=int(table["n_pairs"].iloc[0]), metric=args.metric, **given))
        fig, _ = plots.path_patching_figure(table, f"path patching from {args.sender} ({_pairs_words(table, args)})")
        plots.save(fig, None, stage / stem, dpi=120, fmt=args.fmt)
        bar.update()
    _print_paths(table, args)
    print(f"wrote {out}/{stem}.csv, {stem}.provenance.json, {stem}.{args.fmt}")
    return 0


def _print_paths(table, args) -> None:
    from compose_lens.plots import metric_words
    from compose_lens.stats import format_estimate

    print(f"path patching ({_pairs_words(table, args)}); normalised "
          f"{metric_words(args.metric)}, 0: corrupted, 1: clean, "
          f"[95 % bootstrap interval]:")
    labels = [f"{s} -> {r}" if r != "all" else f"{s} alone (every path)"
              for s, r in zip(table["sender"], table["receiver"])]
    width = max(map(len, labels))
    for label, (_, row) in zip(labels, table.iterrows()):
        print(f"  {label.ljust(width)}  {format_estimate(row['mean'], row['ci_low'], row['ci_high'])}")


def _pair_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--corruption", default="value", choices=CORRUPTIONS,
                        help="what the corrupted prompt changes (default value)")
    parser.add_argument("--n-pairs", type=int, default=registry.PATCHING.settings["n_pairs"],
                        help="clean/corrupted prompt pairs")
    add_pairs_arguments(parser)
    parser.add_argument("--seed", type=seed, default=0,
                        help="seed of the prompt pairs and the bootstrap (default 0): the same seed, the same numbers")
    parser.add_argument("--out", required=True, help="directory for the CSV, its provenance and the figure")
    add_overwrite(parser)
    add_format_argument(parser)
    add_quiet_argument(parser)


def register(subparsers) -> None:
    heads = subparsers.add_parser("patch-heads", help="per-head patching of queries, keys, values and "
                                                      "attention patterns, by token role or position")
    add_model_arguments(heads)
    heads.add_argument("--component", action="append", choices=HEAD_COMPONENTS,
                       help="a head's q, k, v, pattern (a destination's row) or z (its output); repeat "
                            f"for several (default {' '.join(DEFAULT_COMPONENTS)})")
    heads.add_argument("--by", choices=("role", "position"), default="role",
                       help="group positions by token role (default) or keep absolute positions")
    _pair_arguments(heads)
    heads.set_defaults(func=_cmd_patch_heads)

    path = subparsers.add_parser("path-patch", help="path patching: a sender's output reaching one receiver only")
    add_model_arguments(path)
    path.add_argument("--sender", required=True,
                      help="a head's output, blocks.L.headH, or an MLP's, blocks.L.mlp (blocks from 0)")
    path.add_argument("--receiver", action="append", required=True,
                      help="a later head's query, key or value, blocks.L.headH.q|k|v, or an MLP's input, "
                           "blocks.L.mlp; repeat for several")
    _pair_arguments(path)
    path.set_defaults(func=_cmd_path_patch)
