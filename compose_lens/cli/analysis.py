"""``compose-lens analyze``, ``fourier`` and ``attention``: the analyses of one model, as files.

MODEL is anything :func:`compose_lens.runs.load_model` accepts; what each command
writes is described in :mod:`compose_lens.report.outputs`. Every command takes
``--quiet`` (no progress bar).

``analyze`` runs every analysis of the registry (:mod:`compose_lens.registry`) and prints the
findings they declare. An analysis that declares a ``command`` gets it here, built from its
declaration (:func:`register_analysis_command`): ``compose-lens <command> MODEL --out DIR`` with
``--seed``, ``--format``, ``--overwrite``, ``--quiet`` and one option per declared setting; it writes
what ``analyze`` writes into ``OUT/<name>/`` (figures under ``DIR/figures``), runs the analysis's
memory guard before anything is loaded and prints the lines its ``describe`` gives.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from compose_lens.cli.common import (subject_of, add_format_argument, add_model_arguments, add_overwrite, add_quiet_argument,
                                     progress_bar, refuse_uncovered, seed)
from compose_lens.errors import ComposeLensError
from compose_lens import registry  # plain declarations: no torch

# the findings analyze prints, from the registry: (summary key, what it measures, what the circuit predicts)
FINDINGS = tuple((f.key, f.what, f.predicts) for a in registry.ANALYSES for f in a.findings)


def same_mlp_verdict(report: dict | None) -> str | None:
    """The same-MLP report's verdict, wherever this version of the report keeps it."""
    if not isinstance(report, dict):
        return None
    if isinstance(report.get("verdict"), str):
        return report["verdict"]
    return same_mlp_verdict(report.get("conclusion"))


def print_findings(summary: dict) -> None:
    """The analysis as a short table: each measure, its value, what the circuit predicts."""
    from compose_lens.cli.common import print_table

    heads = summary.get("circuit_heads") or {}
    if heads:  # which heads "layer 1" and "layer 2" are (a role no head plays: its measures are none)
        named = {role: (heads[role]["component"] or "none") for role in ("binder", "router")}
        print(f"probes read: binder (layer 1) {named['binder']}, router (layer 2) {named['router']} "
              f"({heads.get('how')})")

    def value(key: str) -> str:
        v = summary[key]
        if isinstance(v, str):  # a finding may name a component ("blocks.1 head 0")
            return v
        return "none (NaN)" if v is None or v != v else f"{v:.3f}"

    rows = [[what, value(key), expected] for key, what, expected in FINDINGS if key in summary]
    rows.append(["MLP2 key frequencies", str(summary.get("key_frequencies")), "a few"])
    print_table(rows, ["finding", "value", "circuit predicts"])
    verdict = same_mlp_verdict(summary.get("same_mlp"))
    if verdict:
        print(f"same MLP for constants and variables: {verdict}")


def _cmd_analyze(args: argparse.Namespace) -> int:
    refuse_uncovered("analyze", args.model)  # first: before torch is imported
    from compose_lens.cores import threads_now
    from compose_lens.plots import Renderer
    from compose_lens.report.outputs import write_analysis  # lazy: torch
    from compose_lens.runs import check_device  # lazy: torch
    from compose_lens.safety import staged_output

    # two free cores: the figures are drawn by a worker while the analyses run (and while
    # the model loads, when the worker starts)
    check_device(args.device)  # one line, before the output is staged
    with staged_output(args.out, "analyze", args.overwrite) as stage, Renderer(threads_now() >= 2) as renderer:
        loaded = subject_of(args, device=args.device, bridge=False)  # see runs.for_analyses
        summary = write_analysis(loaded, stage, args.seed, causal=not args.skip_causal, fmt=args.fmt,
                                 progress=not args.quiet, renderer=renderer)
    print(f"model: {loaded.source}")
    print_findings(summary)
    print(f"wrote {args.out}/summary.json and each analysis's tables and figures in {args.out}/<name>/")
    return 0


def _cmd_same_mlp(args: argparse.Namespace) -> int:
    refuse_uncovered("same-mlp", args.model)  # first: before torch is imported
    import time

    from compose_lens.analysis import same_mlp  # lazy: torch
    from compose_lens.provenance import provenance
    from compose_lens.report.outputs import write_same_mlp  # lazy: torch
    from compose_lens.runs import write_document  # lazy: torch
    from compose_lens.safety import check_count, check_model_sizes, check_sizes, kept_activation_bytes, staged_output

    check_count(args.n, "--n", minimum=20)

    def guard(config):  # six prompt sets of n, and as many again for the damage profiles and the probes
        check_sizes(config, {f"--n {args.n}": (args.n, 12)}, kept_activation_bytes(config))

    check_model_sizes(args.model, guard)  # before anything is loaded or made
    start = time.perf_counter()
    with staged_output(args.out, "same-mlp", args.overwrite) as stage, \
            progress_bar("same-mlp", 2, args.quiet) as bar:
        bar.set_postfix_str("loading the model")
        loaded = subject_of(args, device="cpu", bridge=False)  # see runs.for_analyses
        guard(loaded.config)
        bar.update()
        bar.set_postfix_str("locating the adder and router")
        analysed = _analysed(loaded)
        layout = same_mlp.layout_of(*analysed, args.seed)
        bar.set_postfix_str(f"three tests, {args.n} prompts per set")
        if layout.missing:  # nothing to test: the verdict and why, without tables or figure
            report = same_mlp.same_mlp_report(*analysed, args.seed, n=args.n, layout=layout)
            write_document(report, stage / "same_mlp.json", provenance(loaded.config, args.seed, loaded.source,
                                                                       n_prompts=args.n))
            table = same_mlp.verdict_table(report)
        else:
            report, table = write_same_mlp(loaded, stage, args.seed, args.n)
        bar.update()
    print(f"model: {loaded.source}")
    print(f"tests read: {report['components']['how']}")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"verdict: {report['verdict']}  (thresholds: see same_mlp.json; {time.perf_counter() - start:.1f} s)")
    if report["verdict"] != "supported":
        print(f"  because: {report['verdict_reason']}")
    if layout.missing:
        print(f"wrote {args.out}/same_mlp.json (no tables: {layout.missing})")
    else:
        print(f"wrote {args.out}/same_mlp.json, same_mlp_*.csv and same_mlp.png")
    return 0


def _analysed(loaded) -> tuple:
    """(model, config, split) as the analyses read them (:func:`compose_lens.runs.for_analyses`)."""
    from compose_lens.runs import for_analyses

    loaded = for_analyses(loaded)
    return loaded.model, loaded.config, loaded.split


def _cmd_fourier(args: argparse.Namespace) -> int:
    refuse_uncovered("fourier", args.model)  # first: before torch is imported
    from compose_lens.report.outputs import write_fourier  # lazy: torch
    from compose_lens.safety import staged_output

    with staged_output(args.out, "fourier", args.overwrite) as stage, progress_bar("fourier", 2, args.quiet) as bar:
        bar.set_postfix_str("loading the model")
        loaded = subject_of(args, device="cpu", bridge=False)  # see runs.for_analyses
        bar.update()
        bar.set_postfix_str("the operand grids")
        facts = write_fourier(loaded, stage, args.seed, args.fmt)
        bar.update()
    print(f"model: {loaded.source}")
    for role in facts["located"].roles():
        print(f"  {role.line()}")
    print(f"  analysed blocks.{facts['mlp_block']}.mlp: {facts['fourier_subject']['note']}")
    print(f"  key frequencies {facts['key_frequencies']} (strength {facts['key_frequency_strength']:.3f})")
    print(f"  grid loss {facts['grid_loss']:.4g}, restricted {facts['restricted_loss']:.4g}, "
          f"all keys excluded {facts['excluded_loss_all']:.4g}")
    emb = facts["embedding_fourier"]
    print(f"  embedding W_E frequencies {emb['top_frequencies']} (above uniform, {emb['top_share']:.3f} of its "
          f"norm²); {emb['key_share']:.3f} in the key frequencies (flat: {emb['key_share_if_uniform']:.3f})")
    print(f"  OV -> MLP addition accuracy {facts['ov_mlp_addition_accuracy']:.4f} "
          f"(blocks.{facts['mlp_block']} head {facts['ov_head']})")
    print(f"wrote {args.out}")
    return 0


def _cmd_attention(args: argparse.Namespace) -> int:
    from compose_lens.report.outputs import write_attention  # lazy: torch
    from compose_lens.safety import staged_output

    if len(args.sequences) > 100:
        raise ComposeLensError(f"{len(args.sequences)} sequences: at most 100 per page")
    with staged_output(args.out, "attention", args.overwrite) as stage, \
            progress_bar("attention", 2, args.quiet) as bar:
        bar.set_postfix_str("loading the model")
        loaded = subject_of(args, device=args.device)
        bar.update()
        bar.set_postfix_str(f"{len(args.sequences)} sequences")
        written, views = write_attention(loaded.model, loaded.config, args.sequences, stage, loaded.source,
                                         fmt=args.fmt)
        bar.update()
    for view in views:
        mark = "ok " if view["correct"] else "WRONG"
        print(f"{mark} {view['text']:40s} -> {view['answer']} (label {view['label']})")
    print(f"wrote {Path(args.out) / written[0].name} (opens offline) and {len(written) - 2} figure/CSV files "
          f"in {args.out}")
    return 0


def _cmd_registered(args: argparse.Namespace) -> int:
    """The command of a registered analysis (see the module docstring)."""
    analysis = registry.by_name(registry.ANALYSES, args.analysis)
    from compose_lens.report import context  # lazy: torch
    from compose_lens.safety import check_count, check_model_sizes, check_out_name, staged_output

    for option in analysis.options:
        check_count(getattr(args, option.setting), option.flag, minimum=option.minimum)
    settings = analysis.with_settings({o.setting: getattr(args, o.setting) for o in analysis.options})
    out = check_out_name(args.out)

    def guard(config) -> None:
        if analysis.guard is not None:
            analysis.guard(settings, config)

    check_model_sizes(args.model, guard)  # before anything is loaded or made
    with staged_output(out, analysis.command, args.overwrite) as stage, \
            progress_bar(analysis.command, 2, args.quiet) as bar:
        bar.set_postfix_str("loading the model")
        loaded = subject_of(args, device="cpu", bridge=False)  # see runs.for_analyses
        guard(loaded.config)
        bar.update()
        bar.set_postfix_str(", ".join(f"{k} {v}" for k, v in settings.items()) or analysis.name)
        with context.opened(loaded, args.seed) as ctx:
            result = context.compute(analysis, ctx, settings)
            context.write(analysis, result, stage, ctx, settings, fmt=args.fmt)
        lines = list(analysis.describe(result)) if analysis.describe else []  # before --out is committed
        bar.update()
    print(f"model: {loaded.source}")
    for line in lines:
        print(line)
    files = [f"{stem}.csv" for stem in result.tables] + [f"{stem}.json" for stem in result.documents]
    drawn = [f"figures/{stem}.{args.fmt}" for stem, *_ in result.drawn + result.figures]
    print(f"wrote {out}/{', '.join(files + drawn)}")
    return 0


def register_analysis_command(subparsers, analysis: registry.Analysis) -> None:
    """``compose-lens <analysis.command>``, from its declaration."""
    parser = subparsers.add_parser(analysis.command, help=analysis.help or analysis.title)
    add_model_arguments(parser)
    for option in analysis.options:
        parser.add_argument(option.flag, dest=option.setting, type=int, default=analysis.settings[option.setting],
                            help=f"{option.help} (default {analysis.settings[option.setting]})")
    parser.add_argument("--seed", type=seed, default=0, help="seed of the sequences the command draws (default 0): the same seed, the same numbers")
    parser.add_argument("--out", required=True, help="directory for the tables and figures")
    add_format_argument(parser)
    add_overwrite(parser)
    add_quiet_argument(parser)
    parser.set_defaults(func=_cmd_registered, analysis=analysis.name)


def register(subparsers) -> None:
    for analysis in registry.ANALYSES:
        if analysis.command:
            register_analysis_command(subparsers, analysis)

    names = ", ".join(a.name for a in registry.ANALYSES)
    analyze = subparsers.add_parser("analyze", help=f"every registered analysis ({names}): files into --out/<name>/")
    add_model_arguments(analyze)
    analyze.add_argument("--out", required=True, help="directory for the tables, figures and summary.json")
    analyze.add_argument("--seed", type=seed, default=0, help="seed of the sequences the command draws (default 0): the same seed, the same numbers")
    analyze.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N: where the model's forwards run "
                                                         "(default cpu; README 'On a GPU')")
    causal = " and ".join(a.name for a in registry.ANALYSES if a.causal)
    analyze.add_argument("--skip-causal", action="store_true", help=f"skip the causal analyses ({causal})")
    add_overwrite(analyze)
    add_format_argument(analyze)
    add_quiet_argument(analyze)
    analyze.set_defaults(func=_cmd_analyze)

    same = subparsers.add_parser("same-mlp", help="does MLP2 add variables with the features it uses for "
                                                  "constants? three tests that can fail, and a verdict")
    add_model_arguments(same)
    same.add_argument("--out", required=True, help="directory for same_mlp.json, the CSVs and same_mlp.png")
    same.add_argument("--seed", type=seed, default=0, help="seed of the sequences the command draws (default 0): the same seed, the same numbers")
    n = registry.SAME_MLP.settings["n"]
    same.add_argument("--n", type=int, default=n, help=f"prompts per prompt set (default {n})")
    add_overwrite(same)
    add_quiet_argument(same)
    same.set_defaults(func=_cmd_same_mlp)

    fourier = subparsers.add_parser("fourier", help="Fourier analysis of the adder MLP (located; the paper's "
                                                     "MLP2): key frequencies and losses")
    add_model_arguments(fourier)
    fourier.add_argument("--out", required=True, help="directory for the tables and figures")
    fourier.add_argument("--seed", type=seed, default=0, help="seed of the sequences the command draws (default 0): the same seed, the same numbers")
    add_overwrite(fourier)
    add_format_argument(fourier)
    add_quiet_argument(fourier)
    fourier.set_defaults(func=_cmd_fourier)

    attention = subparsers.add_parser("attention", help="attention views of readable sequences (offline HTML + PNG)")
    add_model_arguments(attention)
    attention.add_argument("sequences", nargs="+", help="readable sequences, e.g. 'b=7, e=5, b+23=?'")
    attention.add_argument("--out", required=True, help="output directory")
    attention.add_argument("--device", default="cpu", help="where the model runs: cpu (default), cuda or cuda:N")
    add_overwrite(attention)
    add_format_argument(attention)
    add_quiet_argument(attention)
    attention.set_defaults(func=_cmd_attention)
