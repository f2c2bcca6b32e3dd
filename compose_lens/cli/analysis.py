"""``compose-lens analyze`` and the command of every registered analysis.

``analyze MODEL --out DIR`` runs every analysis of the registry (:mod:`compose_lens.registry`) into
``DIR/<name>/`` and prints the findings they declare. An analysis that declares a ``command``
(``fourier``, ``patch``, ``attention``, ...) gets it here, built from its declaration
(:func:`register_analysis_command`): ``compose-lens <command> MODEL --out DIR`` with one option per declared
setting (an integer, a choice, a pairs file, or values after MODEL: ``attention MODEL 'b=7, b+23=?'``). It
writes what ``analyze`` writes for it, refuses before anything is loaded the settings and sizes the analysis
declares it cannot run, and prints the lines its ``describe`` gives. An analysis of a run's checkpoints
(``dynamics``, ``early-jump``, ``llc``) takes RUN where the others take MODEL (:func:`_run_command`).
"""

from __future__ import annotations

import argparse

from compose_lens.cli.common import (add_format_argument, add_model_arguments, add_outputs, emit, refuse_uncovered, seed,
                                     subject_of)
from compose_lens import registry  # plain declarations: no torch

# the findings analyze prints, from the registry (summary key, what it measures, what the circuit predicts)
FINDINGS = tuple(f for a in registry.ANALYSES for f in a.findings)


def same_mlp_verdict(report: dict | None) -> str | None:
    """The same-MLP report's verdict, wherever this version of the report keeps it."""
    if not isinstance(report, dict):
        return None
    return report["verdict"] if isinstance(report.get("verdict"), str) else same_mlp_verdict(report.get("conclusion"))


def print_findings(summary: dict) -> None:
    """What the model has learned, then each finding (naming the component it read), its value, what the
    circuit predicts and the verdict."""
    from compose_lens.cli.common import print_table

    learned = summary.get("learned")
    if learned:
        print(learned["line"])
    for line in (summary.get("roles") or {}).values():
        print(f"  {line}")
    heads = summary.get("circuit_heads") or {}
    if heads:  # which heads the measures below read (a role no head plays: its measures are none)
        print(f"probes read: {heads.get('how')}")

    def value(key: str) -> str:
        v = summary[key]
        if isinstance(v, str):  # a finding may name a component ("blocks.1 head 0")
            return v
        return "none (NaN)" if v is None or v != v else f"{v:.3f}"

    # the components the findings read, by role (None: none located)
    components = {role: (heads.get(role) or {}).get("component") for role in ("binder", "router", "gatherer")
                  if role in heads}
    if "component" in (summary.get("fourier_subject") or {}):
        components["adder"] = summary["fourier_subject"]["component"]
    rows = [[f.text(components), value(f.key), f.predicts, f.verdict(summary[f.key], summary)]
            for f in FINDINGS if f.key in summary]
    rows.append([f"{components.get('adder') or 'the adder'} key frequencies", str(summary.get("key_frequencies")),
                 "a few", "-"])
    print_table(rows, ["finding", "value", "circuit predicts", "verdict"])
    verdict = same_mlp_verdict(summary.get("same_mlp"))
    if verdict:
        reason = (summary.get("same_mlp") or {}).get("verdict_reason") if verdict == "inconclusive" else None
        print(f"same MLP for constants and variables: {verdict}" + (f" ({reason})" if reason else ""))


def _cmd_analyze(args: argparse.Namespace) -> int:
    refuse_uncovered("analyze", args.model)  # first: before torch is imported
    from compose_lens.core.cores import threads_now
    from compose_lens.views.drawing import Renderer
    from compose_lens.report.context import write_analysis  # lazy: torch
    from compose_lens.training.subject import check_device  # lazy: torch
    from compose_lens.data.safety import staged_output

    # two free cores: the figures are drawn by a worker while the analyses run (and while
    # the model loads, when the worker starts)
    check_device(args.device)  # one line, before the output is staged
    with staged_output(args.out, "analyze", args.overwrite) as stage, Renderer(threads_now() >= 2) as renderer:
        loaded = subject_of(args, device=args.device, bridge=False)  # see subject.for_analyses
        summary = write_analysis(loaded, stage, args.seed, causal=not args.skip_causal, fmt=args.fmt,
                                 progress=not args.quiet, renderer=renderer)
    if args.json:
        emit(args, {"model": loaded.source, "summary": summary, "out": args.out}, [])
        return 0
    print(f"model: {loaded.source}")
    print_findings(summary)
    print(f"wrote {args.out}/summary.json and each analysis's tables and figures in {args.out}/<name>/")
    return 0


def _settings_of(analysis: registry.Analysis, args: argparse.Namespace) -> dict:
    """The analysis's settings from its command's options, each checked as the API checks them."""
    from compose_lens.cli.common import check_pairs_path

    chosen = {}
    for option in analysis.options:
        value, default = getattr(args, option.setting), analysis.settings[option.setting]
        if option.many:  # the values of every repeat, an integer option's commas read (_ints)
            value = tuple(v for item in value for v in (item if isinstance(item, list) else [item])) if value \
                else tuple(default)
        if option.pairs_file and value not in option.choices:
            check_pairs_path(option.flag, value)
        chosen[option.setting] = value
    settings = analysis.with_settings(chosen, flags=True)
    if analysis.validate is not None:
        analysis.validate(settings)
    return settings


def _cmd_registered(args: argparse.Namespace) -> int:
    """The command of a registered analysis (see the module docstring)."""
    analysis = registry.by_name(registry.ANALYSES, args.analysis)
    if analysis.of == "run":
        return _run_command(analysis, args)
    refuse_uncovered(analysis.command, args.model)  # first: before torch is imported
    settings = _settings_of(analysis, args)
    from compose_lens.report import context  # lazy: torch
    from compose_lens.core.progress import phases
    from compose_lens.training.subject import check_device
    from compose_lens.data.safety import check_model_sizes, check_out_name, staged_output

    out = check_out_name(args.out)
    check_device(args.device)
    check_model_sizes(args.model, lambda config: context.guard(analysis, config, settings))  # before any load
    with staged_output(out, analysis.command, args.overwrite) as stage, \
            phases(analysis.command, not args.quiet) as phase:
        phase("loading the model")
        loaded = subject_of(args, device=args.device, bridge=False)  # see subject.for_analyses
        context.guard(analysis, loaded.config, settings)
        phase(f"{analysis.name}: " + (", ".join(f"{k} {v}" for k, v in settings.items() if v is not None) or "running"))
        result = context.run_analysis(analysis, loaded, stage, args.seed, args.fmt, **settings)
        lines = list(analysis.describe(result)) if analysis.describe else []  # before --out is committed
        phase("writing the files")
    _print_written(args, f"model: {loaded.source}", result, lines, out)
    return 0


def _run_command(analysis: registry.Analysis, args: argparse.Namespace) -> int:
    """The command of an analysis of a run's checkpoints, its settings guarded on RUN's config (no weights read)
    before anything is written; ``--update`` may write over its own --out, whose result the compute extends."""
    settings = _settings_of(analysis, args)
    from compose_lens.report import context  # lazy: torch
    from compose_lens.training.subject import check_device
    from compose_lens.data.safety import check_out_name, staged_output

    out = check_out_name(args.out)
    check_device(args.device)
    update = bool(settings.get("update"))
    run = context.RunContext(args.source, args.split, args.seed, args.device, progress=not args.quiet,
                             previous=out if update else None)
    context.guard(analysis, run.config, settings)
    with staged_output(out, analysis.command, args.overwrite or update) as stage:
        result = context.run_analysis(analysis, run, stage, fmt=args.fmt, **settings)
        lines = list(analysis.describe(result)) if analysis.describe else []  # before --out is committed
    _print_written(args, f"run: {args.source}", result, lines, out)
    return 0


def _print_written(args: argparse.Namespace, source: str, result: registry.Result, lines: list[str], out) -> None:
    """The model or run, the ``describe`` lines and the files written (``--json``: these and the facts)."""
    files = [f"{stem}.csv" for stem in result.tables] + [f"{stem}.json" for stem in result.documents]
    drawn = [f"figures/{stem}" + ("" if dpi is None else f".{args.fmt}") for stem, _, _, dpi in result.figures]
    what, name = source.split(": ", 1)
    emit(args, {what: name, "lines": lines, "facts": result.facts, "out": str(out), "wrote": files + drawn},
         [source, *lines, f"wrote {out}/{', '.join(files + drawn)}"])


def _ints(text: str) -> list[int]:
    """An integer option's value: one integer, or several with commas (``--steps 1000,2000``)."""
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: write integers, e.g. 1000 or 1000,2000") from None


def register_analysis_command(subparsers, analysis: registry.Analysis) -> None:
    """``compose-lens <analysis.command>``, from its declaration."""
    parser = subparsers.add_parser(analysis.command, help=analysis.help or analysis.title)
    if analysis.of == "run":
        parser.add_argument("source", metavar="RUN",
                            help="run directory, its checkpoints/ folder, or a folder of the study's step_N.pth files")
        parser.add_argument("--split", help="split file (default: the run's split.json)")
    else:
        add_model_arguments(parser)
    for option in analysis.options:
        default = analysis.settings[option.setting]
        kind = option.kind or (type(default[0] if default else "") if option.many else type(default))
        shown = f"{option.help} (default {default})"
        named = {"metavar": option.metavar} if option.metavar else {}
        if option.positional:  # after MODEL, no flag: one value, or (many) none or several
            parser.add_argument(option.setting, nargs="*" if option.many else None, type=kind,
                                metavar=option.flag.upper(), help=option.help)
        elif option.pairs_file:
            parser.add_argument(option.flag, dest=option.setting, default=default, help=option.help if default is None
                                else shown, metavar="|".join((*option.choices, "FILE")))
        elif option.many:  # one or more values, of the default's items' type; a repeated flag adds its values
            parser.add_argument(option.flag, dest=option.setting, nargs="+", action="extend", default=None,
                                help=f"{option.help}; repeat or list several"
                                     + (f" (default {' '.join(map(str, default))})" if default else ""),
                                **({"choices": option.choices} if option.choices else
                                   {"type": _ints if kind is int else kind}), **named)
        elif option.choices:
            parser.add_argument(option.flag, dest=option.setting, choices=option.choices, default=default, help=shown)
        elif isinstance(default, bool):
            parser.add_argument(option.flag, dest=option.setting, action="store_true", help=option.help)
        else:
            parser.add_argument(option.flag, dest=option.setting, type=kind, default=default,
                                help=option.help if default is None else shown, **named)
    parser.add_argument("--seed", type=seed, default=0, help="seed of the sequences the command draws (default 0): the same seed, the same numbers")
    add_outputs(parser, "directory for the tables and figures")
    add_format_argument(parser)
    parser.set_defaults(func=_cmd_registered, analysis=analysis.name)


def register(subparsers) -> None:
    for analysis in registry.ANALYSES:
        if analysis.command:
            register_analysis_command(subparsers, analysis)

    names = ", ".join(a.name for a in registry.ANALYSES if a.of == "model" and a.in_analyze)
    analyze = subparsers.add_parser("analyze", help=f"the analyses of one model ({names}): files into --out/<name>/")
    add_model_arguments(analyze)
    add_outputs(analyze, "directory for the tables, figures and summary.json")
    analyze.add_argument("--seed", type=seed, default=0, help="seed of the sequences the command draws (default 0): the same seed, the same numbers")
    causal = " and ".join(a.name for a in registry.ANALYSES if a.causal and a.in_analyze)
    analyze.add_argument("--skip-causal", action="store_true", help=f"skip the causal analyses ({causal})")
    add_format_argument(analyze)
    analyze.set_defaults(func=_cmd_analyze)

