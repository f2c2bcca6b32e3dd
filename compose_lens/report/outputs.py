"""The analyses not yet declared in the registry, as files: training dynamics (``dynamics``, the
report), attention views (``attention``) and circuit discovery (``circuit``).

Each function composes: it asks :mod:`compose_lens.analysis` for the numbers,
:mod:`compose_lens.runs` to write them and :mod:`compose_lens.plots` to draw them. It computes and
draws nothing of its own. Figures are written by :func:`compose_lens.plots.save` as PNG, SVG or PDF
(``fmt``). The registered analyses (probes, QK, Fourier, same-MLP, DLA, ablation, patching, ...) are
written by :func:`compose_lens.context.write_analysis` and their own commands, through
:mod:`compose_lens.context`: nothing here. This module shrinks as the rest move into the registry.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Sequence

import pandas as pd
import torch

from compose_lens import plots, runs
from compose_lens.analysis import circuit as C
from compose_lens.analysis.attention import sequence_views
from compose_lens.analysis.dynamics import phases_document, run_phases_measured, trajectory, trajectory_settings
from compose_lens.config import RunConfig
from compose_lens.data.pairs import as_prompt_pairs
from compose_lens.errors import ComposeLensError
from compose_lens.model import tl
from compose_lens.provenance import provenance
from compose_lens.report.page import PAGE_STYLE, offline_page, view_html
from compose_lens.runs import write_table
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
