"""The analyses of one model as files: tables (CSV, with a provenance JSON beside each),
documents (JSON) and figures (PNG), for ``compose-lens analyze``, ``fourier``, ``patch``,
``ablate`` and ``attention``.

Each ``write_*`` function composes: it asks :mod:`compose_lens.analysis` for the
numbers, :mod:`compose_lens.runs` to write them and :mod:`compose_lens.plots` to
draw them. It computes and draws nothing of its own. Figures are written by
:func:`compose_lens.plots.save` as PNG, SVG or PDF (``fmt``; ``data=None``): the table
each one draws is already written, with its provenance, as the CSV of the same analysis.

``write_analysis(loaded, DIR)`` runs every analysis of the registry
(:mod:`compose_lens.registry`, in its order) over one :class:`~compose_lens.report.context.Context`
and writes

* ``DIR/<name>/`` for each analysis: its tables (CSV, with a provenance JSON beside each that
  records the analysis's ``settings``), its documents (JSON) and its figures under
  ``DIR/<name>/figures``: ``probes/`` (``scores_by_type.csv``, ``circuit_summary.json``), ``qk/``
  (``positional_qk.csv``, ``variable_identity.csv``: of the binder and router heads; absent where
  no head plays the role), ``fourier/`` (the files of :func:`write_fourier`), ``same_mlp/``
  (``same_mlp.json``), ``dla/`` (``logit_attribution.csv``, ``logit_lens.csv``), and, unless
  ``causal=False``, ``ablation/`` (``ablation.csv``) and ``patching/`` (``patching.csv``);
* ``DIR/summary.json``: every analysis's facts: :func:`~compose_lens.analysis.summary.circuit_summary`
  (every probe and Fourier measure, the key frequencies) and ``same_mlp`` (the verdict, tests and
  controls of :mod:`compose_lens.analysis.same_mlp`, without its tables).

:func:`write_fourier` writes only the Fourier part (``compose-lens fourier``, and ``DIR/fourier/``):
``locate.json`` (which head binds, which routes, which MLP adds, every candidate's score:
:mod:`compose_lens.analysis.locate`), ``neuron_frequencies.csv``, ``key_frequencies.json`` (its
``fourier_subject`` and ``mlp_block`` name the MLP analysed; ``embedding_fourier`` compares the number
embeddings' frequencies with the key frequencies), ``best_neurons.csv``, ``readout_fourier.csv``,
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
from compose_lens.analysis.activations import torch_threads
from compose_lens.analysis.attention import sequence_views
from compose_lens.analysis.dynamics import phases_document, run_phases_measured, trajectory, trajectory_settings
from compose_lens.data.pairs import as_prompt_pairs
from compose_lens.analysis.same_mlp import check_layout, same_mlp_report, same_mlp_tables, verdict_table
from compose_lens import runs
from compose_lens.config import RunConfig
from compose_lens.errors import ComposeLensError
from compose_lens.model import tl
from compose_lens.provenance import provenance
from compose_lens import registry
from compose_lens.registry import ABLATION, FOURIER, PATCHING
from compose_lens.report import context
from compose_lens.report.page import PAGE_STYLE, offline_page, view_html
from compose_lens.runs import write_document, write_table
from compose_lens.subject import Subject


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
            # the current rule and intervals, from the saved curves
            return table, {**doc, "phases": run_phases_measured(table, run_dir, doc.get("settings"), split_file)}
        try:
            known = runs.previous_dynamics(results_dir, settings)
        except ComposeLensError:
            known = None  # made with other settings: start again
    traj = trajectory(run_dir, split_file, stride=stride, progress=progress, known=known)
    doc = phases_document(traj)
    runs.write_dynamics(traj.table, doc, results_dir)
    return traj.table, doc


# -- the Fourier part ----


def write_fourier(loaded, out: Path, seed: int, fmt: str = "png", renderer: plots.Renderer | None = None,
                  plan: tuple | None = None) -> dict:
    """Write the Fourier tables and figures of one model's located adder MLP (the registry's
    ``fourier`` analysis) into ``out``; return the key facts (``fourier_subject``/``mlp_block``:
    which MLP, and whether it adds) and ``located``.

    ``renderer``: where the figures are drawn (default: here, before returning).
    ``plan``: :func:`~compose_lens.report.context.fourier_plan` of the same model and seed, if already made."""
    with context.opened(loaded, seed, renderer) as ctx:
        if plan is not None:
            ctx.plan = plan
        result = context.compute(FOURIER, ctx)
        context.write(FOURIER, result, out, ctx, fmt=fmt)
    return result.value


def write_analysis(loaded, out: Path, seed: int = 0, causal: bool = True, fmt: str = "png",
                   progress: bool = False, renderer: plots.Renderer | None = None) -> dict:
    """Write every registered analysis of one model into ``out/<name>/``; return ``summary.json``'s content.

    ``progress``: a progress bar over the analyses (:data:`compose_lens.registry.ANALYSES`).
    ``renderer``: where the figures are drawn (:class:`compose_lens.plots.Renderer`; default:
    here, as each analysis finishes). With a background renderer the analyses run on one
    torch thread, so that they and the figure worker share two cores without
    oversubscription (two threads beside the worker made the same-MLP step 2.6x slower).
    Same files either way; the figures are all written when this returns.
    """
    check_layout(loaded.config)  # the same-MLP step needs the study's layout: refuse now, not after minutes
    renderer = renderer or plots.Renderer()
    steps = [a for a in registry.ANALYSES if (causal or not a.causal) and a.reads(loaded.config)]
    with context.opened(loaded, seed, renderer) as ctx:
        record = ctx.record()
        summary: dict = {"located": {r.role: r.component for r in ctx.plan[0].roles()}}
        bar = tqdm(steps, desc="analyze", unit="step", disable=not progress, leave=False)
        with torch_threads(1 if renderer.background else None):
            for analysis in bar:
                bar.set_postfix_str(analysis.name)
                result = context.compute(analysis, ctx)
                context.write(analysis, result, out / analysis.name, ctx, fmt=fmt)
                summary.update(result.facts)
        renderer.wait()
    for key in ("config", "code_version", "seed"):
        summary.pop(key, None)
    write_document(summary, out / "summary.json", record)
    return summary


# -- the same-MLP tests ----


def write_same_mlp(loaded: Subject, out: Path, seed: int = 0, n: int = 400) -> tuple[dict, pd.DataFrame]:
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


def write_patching(loaded: Subject, out: Path, corruption: str = "value", n_pairs: int | None = None, seed: int = 0,
                   by: str = "role", fmt: str = "png", pairs=None, metric: str = "logit_diff") -> pd.DataFrame:
    """``patching_<corruption>.csv`` (+ its ``.provenance.json``) and its heatmap into ``out``, by token
    role or absolute position (``by``); returns the table. ``pairs`` (a pairs file: ``patching_user.csv``)
    and ``metric``: see :func:`~compose_lens.analysis.patching.patching_table`; ``n_pairs``: the
    registry's ``patching`` setting where not given."""
    settings = {"corruption": corruption, "by": by, "pairs": pairs, "metric": metric}
    chosen = PATCHING.with_settings(settings | ({} if n_pairs is None else {"n_pairs": n_pairs}))
    table = context.compute(PATCHING, context.Context(loaded, seed), chosen).tables["patching"]
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


def write_ablation(loaded: Subject, out: Path, pool_size: int | None = None, seed: int = 0,
                   fmt: str = "png") -> pd.DataFrame:
    """``ablation.csv`` (+ its ``.provenance.json``) and its heatmap into ``out`` (the registry's
    ``ablation`` analysis; ``pool_size``: its setting where not given); returns the table."""
    settings = ABLATION.with_settings(None if pool_size is None else {"pool_size": pool_size})
    table = context.compute(ABLATION, context.Context(loaded, seed), settings).tables["ablation"]
    write_table(table, out / "ablation.csv", provenance(loaded.config, seed, loaded.source, **settings,
                                                        neuron_subject=table.attrs.get("neuron_subject")))
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


def write_circuit(loaded: Subject, out: Path, method: str = "eap-ig", n_pairs: int = 300, seed: int = 0,
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
    plots.save(plots.circuit_figure(found.edges, found.title, summary["metric"])[0], None, out / stem, dpi=120,
               fmt=fmt)
    recovered = found.pools["recovered"].min() if "recovered" in found.pools else None  # no pool has two answers
    return found.edges, {**summary, "min_pool_recovered": None if recovered is None else float(recovered)}
