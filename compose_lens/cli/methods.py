"""``compose-lens llc``: a standard method of the field, as files (``das``, the other, is a registered
analysis: its command is built from its declaration in :mod:`compose_lens.registry`).

    compose-lens llc RUN_OR_CHECKPOINT_DIR [--split FILE] [--phases phases.json] [--steps N ...]
                     [--stride K] [--epsilon E] [--gamma G] [--n-beta B] [--chains C] [--draws D]
                     [--batch-size B] [--n-sequences N] [--seed S] --out DIR

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

from compose_lens.cli.common import add_format_argument, add_overwrite, add_quiet_argument, progress_bar, seed


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text}: use a positive number")
    return value


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
    from compose_lens.analysis.llc import (LlcSettings, check_component, llc_over_checkpoints, phase_means,
                                           require_devinterp, run_phases, settings_dict)  # lazy: torch
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
                           n_sequences=args.n_sequences, seed=args.seed, component=args.component)
    settings.check()
    if args.component is not None:
        check_component(args.component, config.model)
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
        of = "" if args.component is None else f" of {args.component}"
        save(llc_figure(table, phases, f"local learning coefficient{of}: {args.source}"), None, stage / "llc",
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

    llc = subparsers.add_parser("llc", help="local learning coefficient of every checkpoint (SGLD, devinterp), "
                                            "beside the phases")
    llc.add_argument("source", help="run directory, folder of the study's step_N.pth, or one model ('paper', ...)")
    llc.add_argument("--split", help="split file (default: the run's own, or split.json beside the .pth files)")
    llc.add_argument("--out", required=True, help="directory for llc.csv, llc_traces.csv, llc.json and the figure")
    llc.add_argument("--phases", help="a phases.json of `compose-lens dynamics` to mark (default: the run's own)")
    llc.add_argument("--steps", type=int, nargs="+", help="only these checkpoints (default: all)")
    llc.add_argument("--stride", type=int, default=1, help="every K-th checkpoint (default 1)")
    llc.add_argument("--component", metavar="blocks.L.headH|blocks.L.mlp",
                     help="the LLC of one component: SGLD moves only its weights, the rest held at the checkpoint "
                          "(default: every trained weight)")
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
