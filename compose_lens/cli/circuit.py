"""``compose-lens circuit``: automatic circuit discovery on the model's edge graph.

    compose-lens circuit MODEL [--split FILE] --method exact|eap|eap-ig|eap-ig-inputs|acdc [--n-pairs N]
                         [--pairs resample|mixed|FILE] [--metric logit_diff|prob|accuracy]
                         [--positions] [--threshold T] [--target F] [--format png|svg|pdf] --out DIR

Writes ``circuit_<method>.csv`` (every edge's score, rank, whether the found circuit
holds it and whether the labelled circuit does: the paper's on the paper architecture, the
located one on any other, none where a role is not located), its
``.provenance.json``, ``circuit_<method>_pools.csv`` (performance recovered and KL
on every evaluation pool) and the graph figure. The found circuit is the fewest
top-scored edges recovering ``--target`` of the clean-vs-corrupted logit difference
(ACDC: the edges its pruning keeps). See :mod:`compose_lens.analysis.circuit`.

``--pairs FILE`` scores the edges on your own clean / corrupted prompts (CSV or JSONL with
``clean`` and ``corrupted``: :mod:`compose_lens.data.pairs`); ``--metric`` replaces the
logit difference by the probability or the accuracy of the clean answer (accuracy has no
gradient: exact and ACDC only). The pools' faithfulness is read in the same metric.
"""

from __future__ import annotations

import argparse
import functools

from compose_lens.cli.common import (subject_of, METRICS, add_format_argument, add_model_arguments, add_overwrite,
                                     add_quiet_argument, check_pairs_file, progress_bar, refuse_uncovered, seed)

METHODS = ("exact", "eap", "eap-ig", "eap-ig-inputs", "acdc")
PAIR_KINDS = ("resample", "mixed")  # compose_lens.analysis.circuit.PAIRS


def _circuit_memory(n_pairs: int, positions: bool, config) -> None:
    """Per pair: up to five prompts rendered (``mixed``'s variable corruption draws four per pair;
    ``resample`` draws a pool and its partners); kept: every node's output on the clean and the
    corrupted prompt (the baseline the masked runs patch from), and one forward over all pairs
    with its activations kept for the edge-mask gradient (EAP, EAP-IG), the masks and their
    gradient (R, E) included. (The pools' faithfulness check, 4,500 prompts whatever
    ``--n-pairs``, is a few MB: left out.)"""
    from compose_lens.safety import activation_bytes, check_sizes

    m = config.model
    nodes = 1 + m.n_layers * (m.n_heads + 1)  # the embeddings, every head and every MLP
    edges = nodes ** 2 * (m.n_ctx if positions else 1)  # more than the graph has
    kept = 2 * 4 * m.n_ctx * m.d_model * nodes + activation_bytes(config, training=True) + 8 * edges
    check_sizes(config, {f"--n-pairs {n_pairs}": (n_pairs, 5, kept)})


def _cmd_circuit(args: argparse.Namespace) -> int:
    refuse_uncovered("circuit", args.model)  # first: before torch is imported
    from compose_lens.errors import ComposeLensError
    from compose_lens.report.outputs import write_circuit  # lazy: torch
    from compose_lens.safety import check_count, check_model_sizes, check_out_name, staged_output
    from compose_lens.stats import format_estimate

    check_count(args.n_pairs, "--n-pairs", minimum=6)
    if not 0 < args.target <= 1:
        raise ComposeLensError(f"--target {args.target}: give a share in (0, 1]")
    if not 0 <= args.threshold < 1:
        raise ComposeLensError(f"--threshold {args.threshold}: give a share in [0, 1)")
    args.pairs_kind, args.pairs = (args.pairs, None) if args.pairs in PAIR_KINDS else ("resample", args.pairs)
    check_pairs_file(args)
    if args.metric == "accuracy" and args.method in ("eap", "eap-ig", "eap-ig-inputs"):
        raise ComposeLensError(f"--metric accuracy has no gradient, which {args.method} follows; use --method "
                               f"exact or acdc with it, or --metric logit_diff or prob")
    out = check_out_name(args.out)
    guard = functools.partial(_circuit_memory, args.n_pairs, args.positions)
    check_model_sizes(args.model, guard)  # before anything is loaded or made
    with staged_output(out, "circuit", args.overwrite) as stage, progress_bar("circuit", 2, args.quiet) as bar:
        bar.set_postfix_str("loading the model")
        loaded = subject_of(args)
        guard(loaded.config)
        bar.update()
        bar.set_postfix_str(f"{args.method} on {args.n_pairs} pairs")
        table, summary = write_circuit(loaded, stage, args.method, args.n_pairs, args.seed, args.pairs_kind,
                                       args.positions, args.target, args.threshold, args.fmt,
                                       pairs=args.pairs, metric=args.metric)
        bar.update()
    stem = f"circuit_{args.method}"
    ci = summary.get("circuit_edges_ci95")
    size_ci = "" if ci is None else f" [{ci[0]}, {ci[1]}] (95 % bootstrap over the pairs)"
    auc = "" if summary["roc_auc"] is None else (
        f", ROC-AUC {format_estimate(summary['roc_auc'], *(summary.get('roc_auc_ci95') or [None, None]))} "
        f"(95 % bootstrap over the edges; {summary['labelled_edges'][0]} labelled, {summary['labelled_edges'][1]} "
        f"not) against {summary['labelled']}")
    print(f"wrote {out}/{stem}.csv, {stem}_pools.csv, {stem}.provenance.json, {stem}.{args.fmt} "
          f"({summary['circuit_edges']}{size_ci} of {summary['edges']} edges in the circuit{auc})")
    if summary["roc_auc"] is None:
        print(f"  not scored against a circuit: {summary['labelled']} (inconclusive)")
    if summary["min_pool_recovered"] is None:
        print(f"  {stem}_pools.csv is empty: no evaluation pool of this split has prompts with two different "
              f"answers, so the circuit could not be checked on the pools")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("circuit", help="automatic circuit discovery (exact, EAP, EAP-IG, ACDC)")
    add_model_arguments(p)
    p.add_argument("--method", choices=METHODS, default="eap-ig", help="how edges are scored (default eap-ig)")
    p.add_argument("--n-pairs", type=int, default=300, help="clean/corrupted prompt pairs (at least 6)")
    p.add_argument("--pairs", default="resample", metavar="resample|mixed|FILE",
                   help="resample: another prompt of the same pool; mixed: the one-token corruptions; "
                        "or a CSV / JSONL file of your own clean,corrupted pairs (--n-pairs then unused)")
    p.add_argument("--metric", choices=METRICS, default="logit_diff",
                   help="what the edges are scored on: logit difference (default), probability or accuracy "
                        "of the clean answer (accuracy: exact and acdc only)")
    p.add_argument("--positions", action="store_true", help="split every edge by position")
    p.add_argument("--threshold", type=float, default=0.01, help="ACDC's pruning threshold (share)")
    p.add_argument("--target", type=float, default=0.95, help="performance the found circuit recovers")
    p.add_argument("--seed", type=seed, default=0, help="seed of the sequences the command draws (default 0): the same seed, the same numbers")
    p.add_argument("--out", required=True, help="directory for the CSVs, JSON and figure")
    add_overwrite(p)
    add_format_argument(p)
    add_quiet_argument(p)
    p.set_defaults(func=_cmd_circuit)
