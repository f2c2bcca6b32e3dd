"""``compose-lens das`` and ``llc``: two standard methods of the field, as files.

    compose-lens das MODEL [--split FILE] [--ranks 2 8 16 32] [--sites ...] [--n-pairs N]
                     [--epochs E] [--no-arbitrary] [--seed S] [--format png|svg|pdf] --out DIR
    compose-lens llc RUN_OR_CHECKPOINT_DIR [--split FILE] [--phases phases.json] [--steps N ...]
                     [--stride K] [--epsilon E] [--gamma G] [--n-beta B] [--chains C] [--draws D]
                     [--batch-size B] [--n-sequences N] [--seed S] --out DIR

``das`` (:mod:`compose_lens.analysis.das`): distributed alignment search for the value bound to
the queried variable, with TransformerLens 4.3's ``fit_das``, at three sites, beside a random
subspace of the same rank and DAS towards arbitrary labels. Writes ``das.csv`` (one row per site,
rank and control), ``das.json`` (pairs, settings) and ``das.png``.

``llc`` (:mod:`compose_lens.analysis.llc`): the local learning coefficient of every checkpoint
(or of one model), estimated by SGLD with devinterp 2.0.1 (``pip install -e '.[methods]'``).
Writes ``llc.csv`` (one row per checkpoint, with its sanity checks), ``llc_traces.csv`` (every
chain's sampled losses), ``llc_phases.csv`` (the mean LLC between phase onsets), ``llc.json`` and
``llc.png`` (the phase onsets marked, from ``--phases``, the run's ``results/phases.json`` or its
``metrics.jsonl``).
"""

from __future__ import annotations

import argparse
import sys

from compose_lens.cli.common import (subject_of, add_format_argument, add_model_arguments, add_overwrite, add_quiet_argument,
                                     progress_bar, seed)
from compose_lens.errors import ComposeLensError

SITE_NAMES = ("value_after_layer1", "equals_before_mlp2", "query_variable_after_layer1")  # analysis.das.SITE_NAMES


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text}: use a positive number")
    return value


def _cmd_das(args: argparse.Namespace) -> int:
    from compose_lens.safety import check_count, check_out_name

    check_count(args.n_pairs, "--n-pairs", minimum=30)
    check_count(args.epochs, "--epochs")
    if min(args.ranks) < 1:
        raise ComposeLensError(f"--ranks {min(args.ranks)}: a subspace has at least 1 dimension")
    out = check_out_name(args.out)
    from compose_lens.safety import activation_bytes, check_model_sizes, check_sizes

    def guard(config) -> None:  # a base and a source per pair, each run through the model with its hooks
        check_sizes(config, {f"--n-pairs {args.n_pairs}": (args.n_pairs, 2, 2 * activation_bytes(config, False))})

    check_model_sizes(args.model, guard)  # before the model is loaded or --out made
    from compose_lens.analysis.das import DasSettings, best_rows, das_table  # lazy: torch
    from compose_lens.plots import das_figure
    from compose_lens.plots import save
    from compose_lens.provenance import provenance
    from compose_lens.runs import write_document, write_table
    from compose_lens.safety import staged_output

    settings = DasSettings(n_pairs=args.n_pairs, ranks=tuple(args.ranks), sites=tuple(args.sites),
                           epochs=args.epochs, arbitrary_control=not args.no_arbitrary, seed=args.seed)
    with staged_output(out, "das", args.overwrite) as stage, progress_bar("das", 2, args.quiet) as bar:
        bar.set_postfix_str("loading the model")
        loaded = subject_of(args)  # hooks: a TransformerLens bridge, in eval mode
        guard(loaded.config)
        settings.check(loaded.config.model.d_model)
        bar.update()
        bar.set_postfix_str(f"{len(settings.sites)} sites x {len(settings.ranks)} ranks")
        table, summary = das_table(loaded, settings, progress=not args.quiet)
        origin = provenance(loaded.config, args.seed, source=loaded.source)
        write_table(table, stage / "das.csv", origin)
        write_document({"model": loaded.source, **summary}, stage / "das.json", origin)
        save(das_figure(table, f"DAS for the variable-value binding: {args.model}"), None, stage / "das",
             fmt=args.fmt)
        bar.update()
    print(f"model: {loaded.source}")
    print(f"pairs: {summary['pairs_kept']} of {summary['pairs_drawn']} answered correctly (base and source); "
          f"{summary['pairs_train']} train DAS, {summary['pairs_test']} score it")
    best = best_rows(table)
    print(best.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"wrote {out}/das.csv, das.json and das.{args.fmt}")
    return 0


def _cmd_llc(args: argparse.Namespace) -> int:
    from compose_lens.safety import check_count, check_out_name

    for name in ("chains", "draws", "batch_size", "n_sequences", "stride"):
        check_count(getattr(args, name), "--" + name.replace("_", "-"))
    out = check_out_name(args.out)
    from compose_lens.config import RunConfig
    from compose_lens.safety import activation_bytes, check_sizes, peek_run_config

    config = peek_run_config(args.source) or RunConfig()  # a folder of the study's .pth: the paper's
    check_sizes(config, {f"--n-sequences {args.n_sequences}": (args.n_sequences, 1),  # drawn once, kept
                         f"--batch-size {args.batch_size}": (args.batch_size, 1, activation_bytes(config, True))})
    from compose_lens.analysis.llc import (LlcSettings, llc_over_checkpoints, phase_means, require_devinterp,
                                           run_phases, settings_dict)  # lazy: torch
    from compose_lens.plots import llc_figure
    from compose_lens.plots import save
    from compose_lens.provenance import provenance
    from compose_lens.runs import WEIGHTS_FILE, checkpoints_without_weights, write_document, write_table
    from compose_lens.safety import staged_output

    require_devinterp()  # one line if it is missing, before anything is loaded or written
    from compose_lens.runs import check_device

    check_device(args.device)
    settings = LlcSettings(epsilon=args.epsilon, gamma=args.gamma, n_beta=args.n_beta, chains=args.chains,
                           draws=args.draws, burnin=args.burnin, batch_size=args.batch_size,
                           n_sequences=args.n_sequences, seed=args.seed)
    settings.check()
    phases, phases_from = run_phases(args.source, args.phases)
    for folder in checkpoints_without_weights(args.source):  # said, not skipped without a word
        sys.stderr.write(f"compose-lens: warning: {folder}: no {WEIGHTS_FILE}, so this checkpoint is left out "
                         f"of the estimates\n")
    with staged_output(out, "llc", args.overwrite) as stage, progress_bar("llc", 2, args.quiet) as bar:
        bar.set_postfix_str("SGLD over the checkpoints")
        bar.update()
        table, traces = llc_over_checkpoints(args.source, args.split, settings, args.steps, args.stride,
                                             include_final=not args.steps, progress=not args.quiet,
                                             device=args.device)
        by_phase = phase_means(table, phases)
        origin = provenance(None, args.seed, source=str(args.source))
        write_table(table, stage / "llc.csv", origin)
        write_table(traces, stage / "llc_traces.csv")
        if not by_phase.empty:
            write_table(by_phase, stage / "llc_phases.csv")
        write_document({"source": str(args.source), "settings": settings_dict(settings), "phases": phases,
                        "phases_from": phases_from, "healthy": int(table["healthy"].sum()),
                        "estimates": len(table)}, stage / "llc.json", origin)
        save(llc_figure(table, phases, f"local learning coefficient: {args.source}"), None, stage / "llc",
             fmt=args.fmt)
        bar.update()
    shown = table[["step", "llc_mean", "llc_std", "train_loss", "problems"]]
    print(shown.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(f"phases: {phases_from}")
    if not by_phase.empty:
        print(by_phase.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    failed = int((~table["healthy"].astype(bool)).sum())
    if failed:
        print(f"{failed} of {len(table)} estimates failed a sanity check (column 'problems'; see "
              f"compose_lens.analysis.llc)")
    print(f"wrote {out}/llc.csv, llc_traces.csv, llc.json and llc.{args.fmt}")
    return 0


def register(subparsers) -> None:
    das = subparsers.add_parser("das", help="distributed alignment search for the variable-value binding, "
                                            "with random-subspace, arbitrary-label and placebo-site controls")
    add_model_arguments(das)
    das.add_argument("--out", required=True, help="directory for das.csv, das.json and the figure")
    das.add_argument("--ranks", type=int, nargs="+", default=[2, 8, 16, 32],
                     help="subspace dimensions to try (default 2 8 16 32)")
    das.add_argument("--sites", nargs="+", choices=SITE_NAMES, default=list(SITE_NAMES),
                     help="where to intervene (default: all three; the last is the placebo site)")
    das.add_argument("--n-pairs", type=int, default=600,
                     help="base/source pairs drawn (default 600; those answered correctly are kept)")
    das.add_argument("--epochs", type=int, default=15, help="DAS training epochs (default 15)")
    das.add_argument("--no-arbitrary", action="store_true", help="skip the arbitrary-label control (one more fit per site, at the largest rank)")
    das.add_argument("--seed", type=seed, default=0, help="seed of the sequences, the rotation's initialisation and the controls (default 0)")
    add_overwrite(das)
    add_format_argument(das)
    add_quiet_argument(das)
    das.set_defaults(func=_cmd_das)

    llc = subparsers.add_parser("llc", help="local learning coefficient of every checkpoint (SGLD, devinterp), "
                                            "beside the phases")
    llc.add_argument("source", help="run directory, folder of the study's step_N.pth, or one model ('paper', ...)")
    llc.add_argument("--split", help="split file (default: the run's own, or split.json beside the .pth files)")
    llc.add_argument("--out", required=True, help="directory for llc.csv, llc_traces.csv, llc.json and the figure")
    llc.add_argument("--phases", help="a phases.json of `compose-lens dynamics` to mark (default: the run's own)")
    llc.add_argument("--steps", type=int, nargs="+", help="only these checkpoints (default: all)")
    llc.add_argument("--stride", type=int, default=1, help="every K-th checkpoint (default 1)")
    g = llc.add_argument_group("SGLD (see compose_lens.analysis.llc)")
    g.add_argument("--epsilon", type=_positive_float, default=1e-4, help="step size (default 1e-4)")
    g.add_argument("--gamma", type=float, default=1000.0, help="localisation strength (default 1000)")
    g.add_argument("--n-beta", type=_positive_float, help="inverse temperature (default batch / ln batch)")
    g.add_argument("--chains", type=int, default=3, help="chains (default 3)")
    g.add_argument("--draws", type=int, default=150, help="draws per chain (default 150)")
    g.add_argument("--burnin", type=int, default=0, help="burn-in steps (default 0)")
    g.add_argument("--batch-size", type=int, default=128, help="SGLD batch size (default 128)")
    g.add_argument("--n-sequences", type=int, default=4096,
                   help="training sequences drawn for the estimate (default 4096)")
    llc.add_argument("--seed", type=seed, default=0, help="seed of the sequences and of the SGLD chains (default 0)")
    llc.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N: where the SGLD chains run (default cpu)")
    add_overwrite(llc)
    add_format_argument(llc)
    add_quiet_argument(llc)
    llc.set_defaults(func=_cmd_llc)
