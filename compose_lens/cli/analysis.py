"""``compose-lens analyze``, ``fourier`` and ``attention``: the analyses of one model, as files.

MODEL is anything :func:`compose_lens.runs.load_model` accepts; what each command
writes is described in :mod:`compose_lens.report.outputs`. Every command takes
``--quiet`` (no progress bar).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from compose_lens.cli.common import (add_format_argument, add_model_arguments, add_overwrite, add_quiet_argument,
                                     progress_bar, refuse_uncovered, seed)
from compose_lens.config import ComposeLensError

# the findings analyze prints: (summary key, what it measures, what the circuit predicts)
FINDINGS = (
    ("prev_token_attention_score", "layer 1: each value attends to its variable", "near 1"),
    ("prev_token_probe_accuracy", "layer 1 writes the variable into the value's stream", "near 1"),
    ("equals_to_operands_score", "layer 1: = attends to the operands", "high"),
    ("variable_identity_score", "layer 2 QK: = finds the value of its variable", "high"),
    ("equals_to_values_score", "layer 2: = attends to the queried values", "high"),
    ("ov_mlp_addition_accuracy", "OV2 -> MLP2 adds the routed values", "near 1"),
    ("key_frequency_strength", "MLP2 variance in its key frequencies", "high"),
)


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
    from compose_lens.runs import load_model  # lazy: torch
    from compose_lens.safety import staged_output

    # two free cores: the figures are drawn by a worker while the analyses run (and while
    # the model loads, when the worker starts)
    with staged_output(args.out, "analyze", args.overwrite) as stage, Renderer(threads_now() >= 2) as renderer:
        loaded = load_model(args.model, args.split, device="cpu", bridge=False)  # see runs.for_analyses
        summary = write_analysis(loaded, stage, args.seed, causal=not args.skip_causal, fmt=args.fmt,
                                 progress=not args.quiet, renderer=renderer)
    print(f"model: {loaded.source}")
    print_findings(summary)
    print(f"wrote {args.out}/summary.json and the tables and figures beside it")
    return 0


def _cmd_same_mlp(args: argparse.Namespace) -> int:
    refuse_uncovered("same-mlp", args.model)  # first: before torch is imported
    import time

    from compose_lens.analysis import same_mlp  # lazy: torch
    from compose_lens.provenance import provenance
    from compose_lens.report.outputs import write_same_mlp  # lazy: torch
    from compose_lens.runs import load_model, write_document  # lazy: torch
    from compose_lens.safety import check_count, check_model_sizes, check_sizes, kept_activation_bytes, staged_output

    check_count(args.n, "--n", minimum=20)

    def guard(config):  # six prompt sets of n, and as many again for the damage profiles and the probes
        check_sizes(config, {f"--n {args.n}": (args.n, 12)}, kept_activation_bytes(config))

    check_model_sizes(args.model, guard)  # before anything is loaded or made
    start = time.perf_counter()
    with staged_output(args.out, "same-mlp", args.overwrite) as stage, \
            progress_bar("same-mlp", 2, args.quiet) as bar:
        bar.set_postfix_str("loading the model")
        loaded = load_model(args.model, args.split, device="cpu", bridge=False)  # see runs.for_analyses
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
    from compose_lens.runs import load_model  # lazy: torch
    from compose_lens.safety import staged_output

    with staged_output(args.out, "fourier", args.overwrite) as stage, progress_bar("fourier", 2, args.quiet) as bar:
        bar.set_postfix_str("loading the model")
        loaded = load_model(args.model, args.split, device="cpu", bridge=False)  # see runs.for_analyses
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
    from compose_lens.runs import load_model  # lazy: torch
    from compose_lens.safety import staged_output

    if len(args.sequences) > 100:
        raise ComposeLensError(f"{len(args.sequences)} sequences: at most 100 per page")
    with staged_output(args.out, "attention", args.overwrite) as stage, \
            progress_bar("attention", 2, args.quiet) as bar:
        bar.set_postfix_str("loading the model")
        loaded = load_model(args.model, args.split, device=args.device)
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


def register(subparsers) -> None:
    analyze = subparsers.add_parser("analyze", help="probes, Fourier, same-MLP, patching: files into --out")
    add_model_arguments(analyze)
    analyze.add_argument("--out", required=True, help="directory for the tables, figures and summary.json")
    analyze.add_argument("--seed", type=seed, default=0)
    analyze.add_argument("--skip-causal", action="store_true", help="skip the patching and ablation tables")
    add_overwrite(analyze)
    add_format_argument(analyze)
    add_quiet_argument(analyze)
    analyze.set_defaults(func=_cmd_analyze)

    same = subparsers.add_parser("same-mlp", help="does MLP2 add variables with the features it uses for "
                                                  "constants? three tests that can fail, and a verdict")
    add_model_arguments(same)
    same.add_argument("--out", required=True, help="directory for same_mlp.json, the CSVs and same_mlp.png")
    same.add_argument("--seed", type=seed, default=0)
    same.add_argument("--n", type=int, default=400, help="prompts per prompt set (default 400)")
    add_overwrite(same)
    add_quiet_argument(same)
    same.set_defaults(func=_cmd_same_mlp)

    fourier = subparsers.add_parser("fourier", help="Fourier analysis of the adder MLP (located; the paper's "
                                                     "MLP2): key frequencies and losses")
    add_model_arguments(fourier)
    fourier.add_argument("--out", required=True, help="directory for the tables and figures")
    fourier.add_argument("--seed", type=seed, default=0)
    add_overwrite(fourier)
    add_format_argument(fourier)
    add_quiet_argument(fourier)
    fourier.set_defaults(func=_cmd_fourier)

    attention = subparsers.add_parser("attention", help="attention views of readable sequences (offline HTML + PNG)")
    add_model_arguments(attention)
    attention.add_argument("sequences", nargs="+", help="readable sequences, e.g. 'b=7, e=5, b+23=?'")
    attention.add_argument("--out", required=True, help="output directory")
    attention.add_argument("--device", default="cpu")
    add_overwrite(attention)
    add_format_argument(attention)
    add_quiet_argument(attention)
    attention.set_defaults(func=_cmd_attention)
