"""The analyses of one model as files: tables (CSV, with a provenance JSON beside each),
documents (JSON) and figures (PNG), for ``compose-lens analyze``, ``fourier``, ``patch``,
``ablate`` and ``attention``.

Each ``write_*`` function composes: it asks :mod:`compose_lens.analysis` for the
numbers, :mod:`compose_lens.runs` to write them and :mod:`compose_lens.plots` to
draw them. It computes and draws nothing of its own. Figures are written by
:func:`compose_lens.plots.save` as PNG, SVG or PDF (``fmt``; ``data=None``): the table
each one draws is already written, with its provenance, as the CSV of the same analysis.

``write_analysis(loaded, DIR)`` writes

* ``summary.json``: :func:`~compose_lens.analysis.summary.circuit_summary` (every probe
  and Fourier measure, the key frequencies) and ``same_mlp`` (the verdict, tests and
  controls of :mod:`compose_lens.analysis.same_mlp`, without its tables);
* one CSV per analysis: ``positional_qk.csv``, ``variable_identity.csv`` (of the binder and router
  heads; absent where no head plays the role),
  ``scores_by_type.csv`` and the Fourier tables of :func:`write_fourier`, plus
  ``patching.csv`` and ``ablation.csv`` (unless ``causal=False``);
* PNG figures under ``DIR/figures``.

:func:`write_fourier` writes only the Fourier part: ``locate.json`` (which head binds,
which routes, which MLP adds, every candidate's score: :mod:`compose_lens.analysis.locate`),
``neuron_frequencies.csv``, ``key_frequencies.json`` (its ``fourier_subject`` and
``mlp_block`` name the MLP analysed; ``embedding_fourier`` compares the number embeddings'
frequencies with the key frequencies), ``best_neurons.csv``, ``readout_fourier.csv``,
``embedding_fourier.csv``, ``excluded_loss.csv``, ``constants_vs_variables.json`` and their figures.

:func:`write_same_mlp` writes the same-MLP tests (``compose-lens same-mlp``):
``same_mlp.json`` (verdict, each test's effect, interval, rule and status, the controls,
the thresholds, every table), ``same_mlp_interchange.csv``, ``same_mlp_feature_transfer.csv``,
``same_mlp_damage_profiles.csv``, ``same_mlp_probe.csv`` and ``same_mlp.png``.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Sequence

import pandas as pd
import torch
from tqdm.auto import tqdm

from compose_lens import plots
from compose_lens.analysis import circuit as C
from compose_lens.analysis import figure_data, fourier, locate
from compose_lens.analysis.ablation import ablation_table
from compose_lens.analysis.activations import torch_threads
from compose_lens.analysis.attention import sequence_views
from compose_lens.analysis.dynamics import find_phases, phases_document, trajectory, trajectory_settings
from compose_lens.analysis.patching import patching_table
from compose_lens.data.pairs import as_prompt_pairs
from compose_lens.analysis.same_mlp import check_layout, same_mlp_report, same_mlp_tables, verdict_table
from compose_lens.analysis.summary import circuit_summary
from compose_lens import runs
from compose_lens.config import ComposeLensError, RunConfig, json_safe
from compose_lens.model import tl
from compose_lens.provenance import provenance
from compose_lens.report.page import PAGE_STYLE, offline_page, view_html
from compose_lens.runs import Loaded, write_document, write_table


# -- training dynamics ----


def dynamics_for(run_dir: Path, results_dir: Path, split_file=None, stride: int = 1, progress: bool = True,
                 recompute: bool = False) -> tuple[pd.DataFrame, dict]:
    """The run's dynamics table and phases, kept in ``results_dir``.

    Computed if missing; if saved with the same settings but the run has written
    checkpoints since, only the new ones are evaluated (a report of a run still
    training stays current cheaply).
    """
    settings = trajectory_settings(split_file=split_file)
    known = None
    if not recompute and (results_dir / runs.DYNAMICS_FILE).exists() and (results_dir / runs.PHASES_FILE).exists():
        table, doc = runs.load_dynamics(results_dir)
        wanted = [c.step for c in runs.select_checkpoints(runs.find_checkpoints(run_dir, split_file)[0],
                                                          stride=stride)]
        if set(wanted) <= set(int(s) for s in table["step"]):
            return table, {**doc, "phases": find_phases(table)}  # the current rule, from the saved curves
        try:
            known = runs.previous_dynamics(results_dir, settings)
        except ComposeLensError:
            known = None  # made with other settings: start again
    traj = trajectory(run_dir, split_file, stride=stride, progress=progress, known=known)
    doc = phases_document(traj)
    runs.write_dynamics(traj.table, doc, results_dir)
    return traj.table, doc


# -- the Fourier part ----


def fourier_plan(loaded, seed: int) -> tuple[locate.Location, locate.FourierSubject]:
    """Locate the circuit and choose the MLP to analyse, refusing (one line) a model whose MLP the
    Fourier grids cannot read, before any table is made: a few seconds, not minutes."""
    model, config, split = loaded.model, loaded.config, loaded.split
    location = locate.locate(model, config, split, seed)
    adders = location.candidates[location.candidates["role"] == "adder"]
    subject = locate.fourier_subject(model, config, split, seed, adder=location.adder, candidates=adders)
    if subject.layer is None:
        raise ComposeLensError(f"{loaded.source}: {subject.note}; the Fourier analysis has nothing to read")
    fourier.check_readout_layer(config, subject.layer)
    return location, subject


def write_fourier(loaded, out: Path, seed: int, fmt: str = "png", renderer: plots.Renderer | None = None,
                  plan: tuple[locate.Location, locate.FourierSubject] | None = None) -> dict:
    """Write the Fourier tables and figures of one model's located adder MLP; return the key facts
    (``fourier_subject``/``mlp_block``: which MLP, and whether it adds).

    ``renderer``: where the figures are drawn (default: here, before returning).
    ``plan``: :func:`fourier_plan` of the same model and seed, if already made."""
    renderer, loaded = renderer or plots.Renderer(), runs.for_analyses(loaded)
    model, config, split = loaded.model, loaded.config, loaded.split
    location, subject = plan or fourier_plan(loaded, seed)
    layer = subject.layer
    # the OV test reads the router's head where it sits in the adder's block, else head 0
    ov_head = location.router.head if location.router.layer == layer else 0
    record = provenance(config, seed, loaded.source)
    figures = out / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    write_document(json_safe(location.to_dict()), out / "locate.json", record)
    with torch_threads(1), torch.no_grad():
        grid = fourier.operand_grid(model, config, split, "constant", seed, layer=layer)
        variable = fourier.operand_grid(model, config, split, "both", seed, layer=layer)
        neurons = fourier.neuron_frequencies(grid)
        keys = fourier.key_frequencies(neurons)
        best = fourier.best_neurons(grid, keys, neurons)
        readout = fourier.unembed_fourier(grid)
        excluded = fourier.excluded_loss(grid, keys)
        facts = {
            "fourier_subject": subject.to_dict(),
            "mlp_block": layer,
            "ov_head": ov_head,
            "key_frequencies": keys,
            "key_frequency_shares": {int(k): float(v) for k, v in fourier.frequency_shares(neurons).items()},
            "key_frequency_strength": fourier.key_frequency_strength(grid, keys),
            "grid_loss": fourier.grid_loss(grid),
            "restricted_loss": fourier.restricted_loss(grid, keys),
            "restricted_loss_logits": fourier.restricted_loss(grid, keys, on="logits"),
            "excluded_loss_all": fourier.excluded_loss_all(grid, keys) if keys else fourier.grid_loss(grid),
            "ov_mlp_addition_accuracy": fourier.ov_mlp_addition_accuracy(model, config, layer=layer, head=ov_head),
            "constant_grid_accuracy": grid.accuracy(),
        }
        comparison = fourier.compare_grids(grid, variable)
        embedding, facts["embedding_fourier"] = fourier.embedding_fourier(model, config, keys)
    write_table(neurons, out / "neuron_frequencies.csv", record)
    write_table(best, out / "best_neurons.csv", record)
    write_table(readout, out / "readout_fourier.csv", record)
    write_table(pd.DataFrame({"frequency": list(excluded), "excluded_loss": list(excluded.values())}),
               out / "excluded_loss.csv", record)
    write_table(embedding, out / "embedding_fourier.csv", record)
    write_document(facts, out / "key_frequencies.json", record)
    write_document(comparison, out / "constants_vs_variables.json", record)

    renderer.save(plots.frequency_shares_figure, figure_data.frequency_variance_shares(grid), keys,
                  path=figures / "frequency_shares", dpi=120, fmt=fmt)
    renderer.save(plots.readout_fourier_figure, fourier.unembed_frequency_norms(readout), keys,
                  path=figures / "readout_fourier", dpi=120, fmt=fmt)
    renderer.save(plots.embedding_fourier_figure, embedding, facts["embedding_fourier"],
                  path=figures / "embedding_fourier", dpi=120, fmt=fmt)
    if len(best):
        renderer.save(plots.best_neurons_figure, figure_data.best_neuron_patterns(grid, best),
                      path=figures / "best_neurons", dpi=110, fmt=fmt)
    return {**facts, "constants_vs_variables": comparison, "located": location}


def write_analysis(loaded, out: Path, seed: int = 0, causal: bool = True, fmt: str = "png",
                   progress: bool = False, renderer: plots.Renderer | None = None) -> dict:
    """Write every analysis of one model into ``out``; return ``summary.json``'s content.

    ``progress``: a progress bar over the steps (probes, QK, Fourier, same MLP, ablation, patching).
    ``renderer``: where the figures are drawn (:class:`compose_lens.plots.Renderer`; default:
    here, as each analysis finishes). With a background renderer the analyses run on one
    torch thread, so that they and the figure worker share two cores without
    oversubscription (two threads beside the worker made the same-MLP step 2.6x slower).
    Same files either way; the figures are all written when this returns.
    """
    check_layout(loaded.config)  # the same-MLP step needs the study's layout: refuse now, not after minutes
    renderer, loaded = renderer or plots.Renderer(), runs.for_analyses(loaded)
    model, config, split = loaded.model, loaded.config, loaded.split
    plan = fourier_plan(loaded, seed)
    figures = out / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    record = provenance(config, seed, loaded.source)
    summary: dict = {"located": {r.role: r.component for r in plan[0].roles()}}
    heads = locate.circuit_heads(model, config, split, seed, location=plan[0])  # the paper's, or the located

    def probes() -> None:
        summary.update(circuit_summary(model, config, split, seed=seed, subject=plan[1], heads=heads))
        by_type = pd.DataFrame([{"type": k, **v} for k, v in summary["scores_by_type"].items()])
        write_table(by_type, out / "scores_by_type.csv", record)

    def qk() -> None:  # drawn here: the figure gives the table (0.1 s each)
        positional, identity = figure_data.qk_matrices(model, config, heads)  # None: no head plays it
        drawn = {} if positional is None else {"positional_qk": plots.positional_qk_figure(positional)}
        if identity is not None:
            drawn["variable_identity"] = plots.variable_identity_figure(identity, config.task.variable_names)
        for name, (fig, table) in drawn.items():
            write_table(table, out / f"{name}.csv", record)
            plots.save(fig, None, figures / name, dpi=120, fmt=fmt)

    def fourier_step() -> None:
        summary["constants_vs_variables"] = write_fourier(loaded, out, seed, fmt, renderer,
                                                          plan)["constants_vs_variables"]

    def same_mlp() -> None:
        same = dict(same_mlp_report(model, config, split, seed=seed))
        same.pop("tables", None)  # the tables belong to `compose-lens same-mlp`; summary.json keeps the verdict
        for key in ("config", "code_version", "seed"):
            same.pop(key, None)
        summary["same_mlp"] = json_safe(same)

    def patching() -> None:
        table = patching_table(model, config, split, seed=seed)
        write_table(table, out / "patching.csv", record)
        renderer.save(plots.patching_figure, table, "activation patching, value corrupted",
                      path=figures / "patching", dpi=120, fmt=fmt)

    def ablation() -> None:
        table = ablation_table(model, config, split, seed=seed)
        write_table(table, out / "ablation.csv", record)
        renderer.save(plots.ablation_figure, table, path=figures / "ablation", dpi=120, fmt=fmt)

    steps = [("probes", probes), ("QK", qk), ("Fourier", fourier_step), ("same MLP", same_mlp)]
    steps += [("ablation", ablation), ("patching", patching)] if causal else []
    bar = tqdm(steps, desc="analyze", unit="step", disable=not progress, leave=False)
    with torch_threads(1 if renderer.background else None):
        for name, step in bar:
            bar.set_postfix_str(name)
            step()
    renderer.wait()
    for key in ("config", "code_version", "seed"):
        summary.pop(key, None)
    write_document(summary, out / "summary.json", record)
    return summary


# -- the same-MLP tests ----


def write_same_mlp(loaded: Loaded, out: Path, seed: int = 0, n: int = 400) -> tuple[dict, pd.DataFrame]:
    """Write the same-MLP tests of one model into ``out``; return the report and its verdict table."""
    out.mkdir(parents=True, exist_ok=True)
    loaded = runs.for_analyses(loaded)
    record = provenance(loaded.config, seed, loaded.source, n_prompts=n)
    with torch_threads(1), torch.no_grad():
        tables = same_mlp_tables(loaded.model, loaded.config, loaded.split, seed, n=n)
        report = same_mlp_report(loaded.model, loaded.config, loaded.split, seed, n=n, tables=tables)
    for name, table in tables.items():
        write_table(table, out / f"same_mlp_{name}.csv", record)
    write_document(report, out / "same_mlp.json", record)
    plots.save(plots.same_mlp_figure(report)[0], None, out / "same_mlp.png", dpi=110)
    return report, verdict_table(report)


# -- patching and ablation ----


def write_patching(loaded: Loaded, out: Path, corruption: str = "value", n_pairs: int = 1000, seed: int = 0,
                   by: str = "role", fmt: str = "png", pairs=None, metric: str = "logit_diff") -> pd.DataFrame:
    """``patching_<corruption>.csv`` (+ its ``.provenance.json``) and its heatmap into ``out``, by token
    role or absolute position (``by``); returns the table. ``pairs`` (a pairs file: ``patching_user.csv``)
    and ``metric``: see :func:`~compose_lens.analysis.patching.patching_table`."""
    loaded = runs.for_analyses(loaded)
    table = patching_table(loaded.model, loaded.config, loaded.split, n_pairs=n_pairs,
                           corruption=corruption, seed=seed, by=by, pairs=pairs, metric=metric)
    corruption, n_pairs = table["corruption"].iloc[0], int(table["n_pairs"].iloc[0])
    stem = f"patching_{corruption}" + ("" if by == "role" else "_by_position")
    given = {} if pairs is None else {"pairs": str(pairs)}
    write_table(table, out / f"{stem}.csv", provenance(loaded.config, seed, loaded.source, corruption=corruption,
                                                       n_pairs=n_pairs, by=by, metric=metric, **given))
    in_metric = "" if metric == "logit_diff" else f", metric {metric}"
    fig, table = plots.patching_figure(table, f"activation patching, {corruption} corrupted "
                                              f"({n_pairs} pairs{in_metric})")
    plots.save(fig, None, out / stem, dpi=120, fmt=fmt)
    return table


def write_ablation(loaded: Loaded, out: Path, pool_size: int = 500, seed: int = 0, fmt: str = "png") -> pd.DataFrame:
    """``ablation.csv`` (+ its ``.provenance.json``) and its heatmap into ``out``; returns the table."""
    loaded = runs.for_analyses(loaded)
    table = ablation_table(loaded.model, loaded.config, loaded.split, pool_size=pool_size, seed=seed)
    write_table(table, out / "ablation.csv", provenance(loaded.config, seed, loaded.source, pool_size=pool_size,
                                                        neuron_subject=table.attrs["neuron_subject"]))
    plots.save(plots.ablation_figure(table)[0], None, out / "ablation", dpi=120, fmt=fmt)
    return table


# -- attention ----


def write_attention(model: tl.Model, config: RunConfig, texts: Sequence[str], out: str | Path,
                    source: str = "", fmt: str = "png") -> tuple[list[Path], list[dict]]:
    """Write attention.html (offline), attention_<i>.png/.csv and attention.json into ``out``.

    Returns the files written (the page first) and the views (:func:`sequence_views`).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    views = sequence_views(model, config, texts)
    written = []
    body = [f"<h1>Attention views</h1><p>model: <code>{html.escape(source)}</code></p>",
            "<p>Click a head to enlarge it; hover a token to see where it attends.</p>"]
    for i, view in enumerate(views):
        body.append(view_html(view))
        written += plots.save(*plots.view_figure(view), out / f"attention_{i}", fmt=fmt)
    page = out / "attention.html"
    page.write_text(offline_page("compose-lens attention", "\n".join(body), PAGE_STYLE), encoding="utf-8")
    summary = [{k: (v.tolist() if isinstance(v, torch.Tensor) else v) for k, v in view.items()} for view in views]
    record = provenance(config, source=source, sequences=list(texts))
    (out / "attention.json").write_text(json.dumps({"model": source, "sequences": summary, "provenance": record}))
    return [page, out / "attention.json", *written], views


# -- circuit discovery ----


def write_circuit(loaded: Loaded, out: Path, method: str = "eap-ig", n_pairs: int = 300, seed: int = 0,
                  pairs_kind: str = "resample", positions: bool = False, target: float = 0.95,
                  threshold: float = 0.01, fmt: str = "png", pairs=None,
                  metric: str = "logit_diff") -> tuple[pd.DataFrame, dict]:
    """``circuit_<method>.csv`` (one row per edge) with its provenance, ``circuit_<method>_pools.csv``
    (faithfulness of the found circuit on every pool) and the graph figure into ``out``. ``pairs``
    (your own, e.g. a pairs file, in place of ``pairs_kind``) and ``metric``: see
    :func:`~compose_lens.analysis.circuit.discover`."""
    if pairs is not None:  # read here: the provenance names the file and counts its pairs
        pairs_kind, pairs = str(pairs), as_prompt_pairs(loaded.split.task, pairs)
        n_pairs = len(pairs)
    found = C.discover(loaded.model, loaded.config, loaded.split, method, n_pairs, seed, pairs_kind, positions,
                       target, threshold, pairs=pairs, metric=metric)
    summary = found.summary
    stem = f"circuit_{method}"
    write_table(found.edges, out / f"{stem}.csv", provenance(loaded.config, seed, loaded.source,
                n_pairs=n_pairs, pairs=pairs_kind, positions=positions, target=target, **summary))
    write_table(found.pools, out / f"{stem}_pools.csv", provenance(loaded.config, seed, loaded.source, method=method))
    plots.save(plots.circuit_figure(found.edges, found.title)[0], None, out / stem, dpi=120, fmt=fmt)
    recovered = found.pools["recovered"].min() if "recovered" in found.pools else None  # no pool has two answers
    return found.edges, {**summary, "min_pool_recovered": None if recovered is None else float(recovered)}
