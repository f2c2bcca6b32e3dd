"""``compose-lens patch`` and ``ablate``: which component matters, as tables on disk.

    compose-lens patch MODEL [--split FILE] [--corruption value|variable|constant] [--n-pairs N]
                       [--pairs FILE] [--metric logit_diff|prob|accuracy]
                       [--by role|position] [--format png|svg|pdf] --out DIR
    compose-lens ablate MODEL [--split FILE] [--pool-size N] [--format png|svg|pdf] --out DIR

(``compose-lens dla``, direct logit attribution, is a registered analysis: its command is built
from its declaration in :mod:`compose_lens.registry`, see :mod:`compose_lens.cli.analysis`.)

``ablate``'s neuron and Fourier-direction rows read the adder MLP: MLP2 in the paper
architecture, the located adder in any other; its last line says which, or "none located"
(:func:`compose_lens.analysis.ablation.neuron_subject`).

MODEL is anything :func:`compose_lens.runs.load_model` accepts. Each command
writes a CSV (the table), its ``.provenance.json`` and a heatmap into DIR. Patching
is grouped by token role by default (the queried variable, its value, distractors,
padding, the query tokens); ``--by position`` keeps absolute positions.

``--pairs FILE`` patches your own clean / corrupted prompts (a CSV or JSONL file with
``clean`` and ``corrupted``: :mod:`compose_lens.data.pairs`) in place of ``--n-pairs``
pairs made by ``--corruption``, written as ``patching_user.csv``; ``--metric`` reads
the patched runs as logit difference (default), probability or accuracy of the clean
answer (:mod:`compose_lens.analysis.metrics`).
"""

from __future__ import annotations

import argparse
import functools

from compose_lens.cli.common import (subject_of, add_format_argument, add_model_arguments, add_overwrite, add_pairs_arguments,
                                     add_quiet_argument, check_pairs_file, progress_bar, refuse_uncovered, seed)
from compose_lens import registry  # plain declarations: no torch
from compose_lens.config import CORRUPTIONS


# -- what each command renders and keeps, for the memory guard (compose_lens.safety.check_sizes) -----

N_BOOT = registry.PATCHING.settings["n_boot"]  # the bootstrap resamples of analysis.patching.normalised_with_ci
N_ROLES = 12  # analysis.patching.ROLES + VARIANT_ROLES, at most


def _patch_memory(n_pairs: int, corruption: str, config) -> None:
    """Per pair: the clean and corrupted prompts (``variable`` draws four 1-var prompts per pair and
    keeps the corrupted copy); kept: every site's patched logit difference (float32) and its
    float64 gain and mask, the bootstrap's counts and draws, the role one-hots, and (on the hook
    path) the clean prompt's cached activations."""
    from compose_lens.safety import check_sizes, kept_activation_bytes

    m = config.model
    sites = m.n_layers * m.n_ctx * (5 + m.n_heads)  # analysis.patching.all_sites: five components, z per head
    kept = 20 * sites + 16 * N_BOOT + 8 * m.n_ctx * N_ROLES + kept_activation_bytes(config)
    check_sizes(config, {f"--n-pairs {n_pairs}": (n_pairs, 5 if corruption == "variable" else 2, kept)})


def _ablate_memory(pool_size: int, config) -> None:
    """Nine pools of ``pool_size`` (joined once more into one batch); kept of each sequence: MLP2's
    activations at ``=`` and the direct path, the logits of an ablation, and the activations read
    for the replacement."""
    from compose_lens.safety import check_sizes, kept_activation_bytes

    m = config.model
    kept = 4 * (2 * m.d_mlp + 3 * m.d_vocab_out) + 8 * config.task.seq_len + kept_activation_bytes(config)
    check_sizes(config, {f"--pool-size {pool_size}": (pool_size, 9)}, kept)


def _cmd_patch(args: argparse.Namespace) -> int:
    refuse_uncovered("patch", args.model)  # first: before torch is imported
    from compose_lens.report.outputs import write_patching  # lazy: torch

    from compose_lens.safety import check_count, check_model_sizes, check_out_name, staged_output

    check_count(args.n_pairs, "--n-pairs", minimum=2)
    check_pairs_file(args)
    out = check_out_name(args.out)
    guard = functools.partial(_patch_memory, args.n_pairs, args.corruption)
    check_model_sizes(args.model, guard)  # before anything is loaded or made
    with staged_output(out, "patch", args.overwrite) as stage, progress_bar("patch", 2, args.quiet) as bar:
        bar.set_postfix_str("loading the model")
        loaded = subject_of(args, bridge=False)  # see runs.for_analyses
        guard(loaded.config)
        bar.update()
        bar.set_postfix_str(f"patching {args.n_pairs} pairs")
        table = write_patching(loaded, stage, args.corruption, args.n_pairs, args.seed, args.by, args.fmt,
                               pairs=args.pairs, metric=args.metric)
        bar.update()
    stem = f"patching_{table['corruption'].iloc[0]}" + ("" if args.by == "role" else "_by_position")
    source = "" if args.pairs is None else f" from {args.pairs}"
    in_metric = "" if args.metric == "logit_diff" else f", metric {args.metric}"
    print(f"wrote {out}/{stem}.csv, {stem}.provenance.json, {stem}.{args.fmt} "
          f"({len(table)} rows by {args.by}, {int(table['n_pairs'].iloc[0])} pairs{source}{in_metric})")
    return 0


def _cmd_ablate(args: argparse.Namespace) -> int:
    refuse_uncovered("ablate", args.model)  # first: before torch is imported
    from compose_lens.report.outputs import write_ablation  # lazy: torch

    from compose_lens.safety import check_count, check_model_sizes, check_out_name, staged_output

    check_count(args.pool_size, "--pool-size")
    out = check_out_name(args.out)
    guard = functools.partial(_ablate_memory, args.pool_size)
    check_model_sizes(args.model, guard)  # before anything is loaded or made
    with staged_output(out, "ablate", args.overwrite) as stage, progress_bar("ablate", 2, args.quiet) as bar:
        bar.set_postfix_str("loading the model")
        loaded = subject_of(args, bridge=False)  # see runs.for_analyses
        guard(loaded.config)
        bar.update()
        bar.set_postfix_str(f"ablating, {args.pool_size} sequences per pool")
        table = write_ablation(loaded, stage, args.pool_size, args.seed, args.fmt)
        bar.update()
    print(f"wrote {out}/ablation.csv, ablation.provenance.json, ablation.{args.fmt} ({len(table)} rows)")
    print(f"  neurons and Fourier directions: {table.attrs['neuron_subject']['note']}")
    return 0


def register(subparsers) -> None:
    patch = subparsers.add_parser("patch", help="activation patching by component, layer and position")
    add_model_arguments(patch)
    patch.add_argument("--corruption", default="value", choices=CORRUPTIONS,
                       help="what the corrupted prompt changes (default value)")
    patch.add_argument("--n-pairs", type=int, default=registry.PATCHING.settings["n_pairs"],
                       help="clean/corrupted prompt pairs")
    patch.add_argument("--by", choices=("role", "position"), default="role",
                       help="group positions by token role (default) or keep absolute positions")
    add_pairs_arguments(patch)
    patch.add_argument("--seed", type=seed, default=0, help="seed of the sequences the command draws (default 0): the same seed, the same numbers")
    patch.add_argument("--out", required=True, help="directory for the CSV, JSON and figure (one per corruption)")
    add_overwrite(patch)
    add_format_argument(patch)
    add_quiet_argument(patch)
    patch.set_defaults(func=_cmd_patch)

    ablate = subparsers.add_parser("ablate", help="zero/mean/resample ablation, accuracy on the nine pools")
    add_model_arguments(ablate)
    ablate.add_argument("--pool-size", type=int, default=registry.ABLATION.settings["pool_size"],
                        help="sequences per pool")
    ablate.add_argument("--seed", type=seed, default=0, help="seed of the sequences the command draws (default 0): the same seed, the same numbers")
    add_format_argument(ablate)
    add_quiet_argument(ablate)
    ablate.add_argument("--out", required=True, help="directory for the CSV, JSON and PNG")
    add_overwrite(ablate)
    ablate.set_defaults(func=_cmd_ablate)
