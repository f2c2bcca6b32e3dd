"""``compose-lens analyze`` and ``compose-lens fourier``: the analyses of one model, as files.

``compose-lens analyze MODEL --out DIR`` writes

* ``summary.json``: :func:`~compose_lens.analysis.summary.circuit_summary` (every probe
  and Fourier measure, the key frequencies) and ``same_mlp`` (the constants-vs-variables
  report of :mod:`compose_lens.analysis.same_mlp`, when that module is installed);
* one CSV per analysis: ``positional_qk.csv``, ``variable_identity.csv``,
  ``scores_by_type.csv`` and the Fourier tables of ``compose-lens fourier``, plus
  ``patching.csv`` and ``ablation.csv`` (unless ``--skip-causal``);
* PNG figures under ``DIR/figures``.

``compose-lens fourier MODEL --out DIR`` writes only the Fourier part:
``neuron_frequencies.csv``, ``key_frequencies.json``, ``best_neurons.csv``,
``readout_fourier.csv``, ``excluded_loss.csv``, ``constants_vs_variables.json``
and their figures.

MODEL is anything :func:`compose_lens.model.load_model` accepts. Every JSON file
records the config, the seed and the code version; every CSV starts with one
``# provenance: {...}`` comment line holding the same (read it with
``pandas.read_csv(path, comment="#")``).
"""

from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path

import pandas as pd

from compose_lens import code_version
from compose_lens.config import write_json_atomic


def _provenance(config, seed: int, source: str) -> dict:
    return {"model": source, "seed": seed, "code_version": code_version(), "config": config.to_dict()}


def _write_csv(table: pd.DataFrame, path: Path, provenance: dict) -> None:
    with open(path, "w") as handle:
        handle.write("# provenance: " + json.dumps(provenance, sort_keys=True) + "\n")
        table.to_csv(handle, index=False)


def _write_json(data: dict, path: Path, provenance: dict) -> None:
    write_json_atomic(path, {**data, "provenance": provenance})


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _heatmap(matrix, labels, title: str, path: Path, xlabel: str, ylabel: str) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 4.2))
    image = ax.imshow(matrix, cmap="RdBu_r", vmin=-abs(matrix).max(), vmax=abs(matrix).max())
    ax.set_xticks(range(len(labels)), labels)
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- the Fourier part ----------------------------------------------------------------------


def write_fourier(loaded, out: Path, seed: int) -> dict:
    """Write the Fourier tables and figures of one model; return the key facts."""
    import torch

    from compose_lens.analysis import fourier
    from compose_lens.analysis.activations import torch_threads

    model, config, split = loaded.model, loaded.config, loaded.split
    provenance = _provenance(config, seed, loaded.source)
    figures = out / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    with torch_threads(1), torch.no_grad():
        grid = fourier.operand_grid(model, config, split, "constant", seed)
        variable = fourier.operand_grid(model, config, split, "both", seed)
        neurons = fourier.neuron_frequencies(grid.mlp_post)
        keys = fourier.key_frequencies(neurons)
        best = fourier.best_neurons(grid, keys, neurons)
        readout = fourier.unembed_fourier(grid)
        excluded = fourier.excluded_loss(grid, keys)
        facts = {
            "key_frequencies": keys,
            "key_frequency_shares": {int(k): float(v) for k, v in fourier.frequency_shares(neurons).items()},
            "key_frequency_strength": fourier.key_frequency_strength(grid, keys),
            "grid_loss": fourier.grid_loss(grid),
            "restricted_loss": fourier.restricted_loss(grid, keys),
            "restricted_loss_logits": fourier.restricted_loss(grid, keys, on="logits"),
            "excluded_loss_all": fourier.excluded_loss_all(grid, keys) if keys else fourier.grid_loss(grid),
            "ov_mlp_addition_accuracy": fourier.ov_mlp_addition_accuracy(model, config),
            "constant_grid_accuracy": grid.accuracy(),
        }
        comparison = fourier.compare_grids(grid, variable)
    _write_csv(neurons, out / "neuron_frequencies.csv", provenance)
    _write_csv(best, out / "best_neurons.csv", provenance)
    _write_csv(readout, out / "readout_fourier.csv", provenance)
    _write_csv(pd.DataFrame({"frequency": list(excluded), "excluded_loss": list(excluded.values())}),
               out / "excluded_loss.csv", provenance)
    _write_json(facts, out / "key_frequencies.json", provenance)
    _write_json(comparison, out / "constants_vs_variables.json", provenance)

    plt = _pyplot()
    p = config.task.modulus
    shares = fourier.frequency_fractions(grid.mlp_post)
    variance = grid.mlp_post.flatten(0, 1).var(0, unbiased=False)
    weighted = (shares * variance).sum(1) / variance.sum().clamp_min(1e-30)
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.bar(range(p // 2 + 1), weighted.tolist(),
           color=["tab:red" if k in keys else "tab:gray" for k in range(p // 2 + 1)])
    ax.set_xlabel("frequency k")
    ax.set_ylabel("share of MLP2 variance")
    ax.set_title(f"MLP2 activations by frequency (key: {keys})")
    fig.tight_layout()
    fig.savefig(figures / "frequency_shares.png", dpi=120)
    plt.close(fig)

    norms = fourier.unembed_frequency_norms(readout)
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.bar(norms.index, norms.values, color=["tab:red" if k in keys else "tab:gray" for k in norms.index])
    ax.set_xlabel("frequency k")
    ax.set_ylabel("norm of W_out W_U")
    ax.set_title("the readout in the Fourier basis")
    fig.tight_layout()
    fig.savefig(figures / "readout_fourier.png", dpi=120)
    plt.close(fig)

    if len(best):
        fig, axes = plt.subplots(len(best), 2, figsize=(6, 2.8 * len(best)), squeeze=False)
        for row, record in enumerate(best.itertuples()):
            pattern = grid.mlp_post[:, :, record.neuron]
            _, _, fitted = fourier.fit_ideal_pattern(pattern, record.frequency)
            axes[row, 0].imshow(pattern, cmap="viridis")
            axes[row, 0].set_title(f"neuron {record.neuron} (k={record.frequency})", fontsize=9)
            axes[row, 1].imshow(fitted, cmap="viridis")
            axes[row, 1].set_title(f"ideal cos k(x+y), r={record.cos_correlation:.2f}", fontsize=9)
            for ax in axes[row]:
                ax.set_xlabel("y")
                ax.set_ylabel("x")
        fig.tight_layout()
        fig.savefig(figures / "best_neurons.png", dpi=100)
        plt.close(fig)
    return {**facts, "constants_vs_variables": comparison}


# -- analyze ---------------------------------------------------------------------------------


def _optional(module: str, name: str):
    """A teammate module's function, or None where it does not exist (yet)."""
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


def write_analysis(loaded, out: Path, seed: int = 0, causal: bool = True) -> dict:
    """Write every analysis of one model into ``out``; return ``summary.json``'s content."""
    from compose_lens.analysis import probes
    from compose_lens.analysis.summary import circuit_summary

    model, config, split = loaded.model, loaded.config, loaded.split
    out.mkdir(parents=True, exist_ok=True)
    figures = out / "figures"
    figures.mkdir(exist_ok=True)
    provenance = _provenance(config, seed, loaded.source)
    summary = circuit_summary(model, config, split, seed=seed)

    positional = probes.positional_qk_scores(model, config)
    C = positional.shape[0]
    _write_csv(pd.DataFrame(positional.numpy(), index=range(C), columns=range(C))
               .rename_axis("query_position").reset_index(), out / "positional_qk.csv", provenance)
    _heatmap(positional.masked_fill(~positional.new_ones(C, C, dtype=bool).tril(), 0).numpy(),
             list(range(C)), "layer 1: P QK1 P^T (context)", figures / "positional_qk.png", "key position",
             "query position")
    identity = probes.variable_identity_matrix(model, config)
    names = list(config.task.variable_names)
    _write_csv(pd.DataFrame(identity.numpy(), index=names, columns=names).rename_axis("query_variable")
               .reset_index(), out / "variable_identity.csv", provenance)
    _heatmap(identity.numpy(), names, "layer 2: (E_var OV1) QK2 (E_var OV1)^T", figures / "variable_identity.png",
             "key variable", "query variable")
    by_type = pd.DataFrame([{"type": k, **v} for k, v in summary["scores_by_type"].items()])
    _write_csv(by_type, out / "scores_by_type.csv", provenance)

    fourier_facts = write_fourier(loaded, out, seed)
    summary["constants_vs_variables"] = fourier_facts["constants_vs_variables"]

    same_mlp_report = _optional("compose_lens.analysis.same_mlp", "same_mlp_report")
    if same_mlp_report is not None:
        summary["same_mlp"] = same_mlp_report(model, config, split, seed=seed)
    else:
        summary["same_mlp"] = {"available": False,
                               "reason": "compose_lens.analysis.same_mlp.same_mlp_report is not installed"}
    if causal:
        for module, name, file in (("compose_lens.analysis.patching", "patching_table", "patching.csv"),
                                   ("compose_lens.analysis.ablation", "ablation_table", "ablation.csv")):
            table_fn = _optional(module, name)
            if table_fn is not None:
                _write_csv(table_fn(model, config, split, seed=seed), out / file, provenance)
    summary.pop("config", None)
    summary.pop("code_version", None)
    summary.pop("seed", None)
    _write_json(summary, out / "summary.json", provenance)
    return summary


def _cmd_analyze(args: argparse.Namespace) -> int:
    from compose_lens.model import load_model

    loaded = load_model(args.model, args.split, device="cpu")
    summary = write_analysis(loaded, Path(args.out), args.seed, causal=not args.skip_causal)
    keys = ("prev_token_weight_score", "prev_token_attention_score", "prev_token_probe_accuracy",
            "equals_to_operands_score", "variable_identity_score", "equals_to_values_score",
            "ov_mlp_addition_accuracy", "key_frequency_strength")
    print(f"model: {loaded.source}")
    for key in keys:
        print(f"  {key:30s} {summary[key]:.4f}")
    print(f"  {'key_frequencies':30s} {summary['key_frequencies']}")
    print(f"wrote {args.out}/summary.json and the tables and figures beside it")
    return 0


def _cmd_fourier(args: argparse.Namespace) -> int:
    from compose_lens.model import load_model

    loaded = load_model(args.model, args.split, device="cpu")
    facts = write_fourier(loaded, Path(args.out), args.seed)
    print(f"model: {loaded.source}")
    print(f"  key frequencies {facts['key_frequencies']} (strength {facts['key_frequency_strength']:.3f})")
    print(f"  grid loss {facts['grid_loss']:.4g}, restricted {facts['restricted_loss']:.4g}, "
          f"all keys excluded {facts['excluded_loss_all']:.4g}")
    print(f"  OV2 -> MLP2 addition accuracy {facts['ov_mlp_addition_accuracy']:.4f}")
    print(f"wrote {args.out}")
    return 0


def register(subparsers) -> None:
    from compose_lens.cli import add_model_arguments

    analyze = subparsers.add_parser("analyze", help="probes, Fourier, same-MLP, patching: files into --out")
    add_model_arguments(analyze)
    analyze.add_argument("--out", required=True, help="directory for the tables, figures and summary.json")
    analyze.add_argument("--seed", type=int, default=0)
    analyze.add_argument("--skip-causal", action="store_true", help="skip the patching and ablation tables")
    analyze.set_defaults(func=_cmd_analyze)

    fourier = subparsers.add_parser("fourier", help="Fourier analysis of MLP2: key frequencies and losses")
    add_model_arguments(fourier)
    fourier.add_argument("--out", required=True, help="directory for the tables and figures")
    fourier.add_argument("--seed", type=int, default=0)
    fourier.set_defaults(func=_cmd_fourier)
