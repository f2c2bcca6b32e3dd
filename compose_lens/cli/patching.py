"""``compose-lens patch`` and ``compose-lens ablate``: the patching and ablation tables on disk.

    compose-lens patch MODEL [--split FILE] [--corruption value|variable|constant] [--n-pairs N] --out DIR
    compose-lens ablate MODEL [--split FILE] [--pool-size N] --out DIR

MODEL is anything :func:`compose_lens.runs.load_model` accepts. Each command
writes a CSV (the table), its provenance JSON and a PNG heatmap into DIR.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from compose_lens.cli.common import add_model_arguments
from compose_lens.config import CORRUPTIONS, ComposeLensError


def _out_dir(path: str) -> Path:
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise ComposeLensError(f"--out {out}: exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _cmd_patch(args: argparse.Namespace) -> int:
    from compose_lens.report.outputs import write_patching  # lazy: torch
    from compose_lens.runs import load_model  # lazy: torch

    if args.n_pairs < 2:
        raise ComposeLensError(f"--n-pairs {args.n_pairs}: use at least 2")
    out = _out_dir(args.out)
    loaded = load_model(args.model, args.split)
    table = write_patching(loaded, out, args.corruption, args.n_pairs, args.seed)
    print(f"wrote {out}/patching_{args.corruption}.csv, .provenance.json, .png "
          f"({len(table)} sites, {args.n_pairs} pairs)")
    return 0


def _cmd_ablate(args: argparse.Namespace) -> int:
    from compose_lens.report.outputs import write_ablation  # lazy: torch
    from compose_lens.runs import load_model  # lazy: torch

    if args.pool_size < 1:
        raise ComposeLensError(f"--pool-size {args.pool_size}: use at least 1")
    out = _out_dir(args.out)
    loaded = load_model(args.model, args.split)
    table = write_ablation(loaded, out, args.pool_size, args.seed)
    print(f"wrote {out}/ablation.csv, .provenance.json, .png ({len(table)} rows)")
    return 0


def register(subparsers) -> None:
    patch = subparsers.add_parser("patch", help="activation patching by component, layer and position")
    add_model_arguments(patch)
    patch.add_argument("--corruption", default="value", choices=CORRUPTIONS,
                       help="what the corrupted prompt changes (default value)")
    patch.add_argument("--n-pairs", type=int, default=1000, help="clean/corrupted prompt pairs")
    patch.add_argument("--seed", type=int, default=0)
    patch.add_argument("--out", required=True, help="directory for the CSV, JSON and PNG")
    patch.set_defaults(func=_cmd_patch)

    ablate = subparsers.add_parser("ablate", help="zero/mean/resample ablation, accuracy on the nine pools")
    add_model_arguments(ablate)
    ablate.add_argument("--pool-size", type=int, default=500, help="sequences per pool")
    ablate.add_argument("--seed", type=int, default=0)
    ablate.add_argument("--out", required=True, help="directory for the CSV, JSON and PNG")
    ablate.set_defaults(func=_cmd_ablate)
