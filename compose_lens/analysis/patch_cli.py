"""``compose-lens patch`` and ``compose-lens ablate``: the patching and ablation tables on disk.

    compose-lens patch MODEL [--split FILE] [--corruption value|variable|constant] [--n-pairs N] --out DIR
    compose-lens ablate MODEL [--split FILE] [--pool-size N] --out DIR

MODEL is anything :func:`compose_lens.model.load_model` accepts. Each command
writes a CSV (the table), a JSON (the table plus config, seed and code version)
and a PNG heatmap into DIR.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from compose_lens.config import ComposeLensError, write_json_atomic


def _out_dir(path: str) -> Path:
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise ComposeLensError(f"--out {out}: exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _provenance(loaded, seed: int, **extra) -> dict:
    from compose_lens import code_version

    return {"model": loaded.source, "config": loaded.config.to_dict(), "seed": seed,
            "code_version": code_version(), **extra}


def _heatmap(path: Path, matrix, row_labels, col_labels, title: str, label: str, center: bool) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6, 0.45 * len(col_labels)), max(3, 0.4 * len(row_labels))))
    vmax = max(1e-9, float(abs(matrix).max())) if center else None
    im = ax.imshow(matrix, cmap="RdBu_r" if center else "viridis", aspect="auto",
                   vmin=-vmax if center else None, vmax=vmax)
    ax.set_xticks(range(len(col_labels)), col_labels, rotation=90 if len(col_labels) > 12 else 0, fontsize=8)
    ax.set_yticks(range(len(row_labels)), row_labels, fontsize=8)
    ax.set_title(title)
    fig.colorbar(im, ax=ax, label=label)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _cmd_patch(args: argparse.Namespace) -> int:
    from compose_lens.analysis.patching import CORRUPTIONS, patching_table
    from compose_lens.model import load_model

    if args.corruption not in CORRUPTIONS:
        raise ComposeLensError(f"--corruption {args.corruption}: use one of {', '.join(CORRUPTIONS)}")
    if args.n_pairs < 2:
        raise ComposeLensError(f"--n-pairs {args.n_pairs}: use at least 2")
    out = _out_dir(args.out)
    loaded = load_model(args.model, args.split)
    table = patching_table(loaded.model, loaded.config, loaded.split, n_pairs=args.n_pairs,
                           corruption=args.corruption, seed=args.seed)
    stem = f"patching_{args.corruption}"
    table.to_csv(out / f"{stem}.csv", index=False)
    write_json_atomic(out / f"{stem}.json", {**_provenance(loaded, args.seed, corruption=args.corruption,
                                                           n_pairs=args.n_pairs),
                                             "rows": table.to_dict(orient="records")})
    table = table.assign(site=[f"{c}{'' if h < 0 else f'.h{h}'} L{layer + 1}" for c, h, layer
                               in zip(table["component"], table["head"], table["layer"])])
    grid = table.pivot_table(index="site", columns="position", values="mean", sort=False)
    roles = table.drop_duplicates("position").set_index("position")["role"]
    _heatmap(out / f"{stem}.png", grid.to_numpy(), list(grid.index),
             [f"{p} {roles[p]}" if roles[p] != "context" else str(p) for p in grid.columns],
             f"activation patching ({args.corruption} corrupted), {len(loaded.split.task.variable_names)} vars",
             "normalised logit difference", center=True)
    print(f"wrote {out / stem}.csv, .json, .png ({len(table)} sites, {args.n_pairs} pairs)")
    return 0


def _cmd_ablate(args: argparse.Namespace) -> int:
    from compose_lens.analysis.ablation import ablation_table
    from compose_lens.model import load_model

    if args.pool_size < 1:
        raise ComposeLensError(f"--pool-size {args.pool_size}: use at least 1")
    out = _out_dir(args.out)
    loaded = load_model(args.model, args.split)
    table = ablation_table(loaded.model, loaded.config, loaded.split, pool_size=args.pool_size, seed=args.seed)
    table.to_csv(out / "ablation.csv", index=False)
    write_json_atomic(out / "ablation.json", {**_provenance(loaded, args.seed, pool_size=args.pool_size),
                                              "rows": table.astype({"pool": str}).to_dict(orient="records")})
    shown = table[~table["target"].isin(["neuron", "none"])]
    shown = shown.assign(name=[f"{t} L{layer + 1}{'' if i < 0 else f' #{i}'} {k}" for t, layer, i, k
                               in zip(shown["target"], shown["layer"], shown["index"], shown["kind"])])
    grid = shown.pivot_table(index="name", columns="pool", values="accuracy_drop", sort=False, observed=True)
    _heatmap(out / "ablation.png", grid.to_numpy(), list(grid.index), [str(c) for c in grid.columns],
             "ablation: accuracy lost per pool", "accuracy drop", center=True)
    print(f"wrote {out}/ablation.csv, .json, .png ({len(table)} rows)")
    return 0


def register(subparsers) -> None:
    from compose_lens.cli import add_model_arguments

    patch = subparsers.add_parser("patch", help="activation patching by component, layer and position")
    add_model_arguments(patch)
    patch.add_argument("--corruption", default="value", help="value, variable or constant (default value)")
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
