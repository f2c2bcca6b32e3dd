"""The analyses not yet declared in the registry, as files: training dynamics (``dynamics``, the
report) and attention views (``attention``).

Each function composes: it asks :mod:`compose_lens.analysis` for the numbers,
:mod:`compose_lens.runs` to write them and :mod:`compose_lens.plots` to draw them. It computes and
draws nothing of its own. Figures are written by :func:`compose_lens.plots.save` as PNG, SVG or PDF
(``fmt``). The registered analyses (probes, QK, Fourier, same-MLP, DLA, ablation, patching, circuit, ...) are
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

from compose_lens import plots, runs, safety
from compose_lens.analysis.attention import sequence_views
from compose_lens.config import RunConfig
from compose_lens.context import RunContext, run_analysis
from compose_lens.errors import ComposeLensError
from compose_lens.model import tl
from compose_lens.provenance import provenance
from compose_lens.report.page import PAGE_STYLE, offline_page, view_html


# -- training dynamics ----


def dynamics_for(run_dir: Path, results_dir: Path, split_file=None, stride: int = 1, progress: bool = True,
                 recompute: bool = False) -> tuple[pd.DataFrame, dict]:
    """The run's dynamics table and phases (the ``dynamics`` declaration), kept in ``results_dir``.

    Computed if missing. Saved ones are read where they hold every wanted checkpoint (the phases measured
    again, nothing evaluated), else extended (``update``): only the checkpoints the run has written since are
    evaluated, so a report of a run still training stays current cheaply; made with other settings, they
    are made again.
    """
    if not recompute and (results_dir / runs.DYNAMICS_FILE).exists() and (results_dir / runs.PHASES_FILE).exists():
        table, doc = runs.load_dynamics(results_dir)
        wanted = [c.step for c in runs.select_checkpoints(runs.find_checkpoints(run_dir, split_file)[0],
                                                          stride=stride)]
        if set(wanted) <= set(int(s) for s in table["step"]):  # the phases measured again, nothing evaluated
            return table, {**doc, "phases": runs.run_phases_measured(table, run_dir, doc.get("settings"), split_file)}
    settings = {"stride": stride, "update": not recompute}
    run = RunContext(run_dir, split_file, progress=progress, previous=results_dir)
    try:
        result = run_analysis("dynamics", run, results_dir, **settings)
    except ComposeLensError:  # saved with other settings: made again
        result = run_analysis("dynamics", run, results_dir, **{**settings, "update": False})
    if safety.read_marker(results_dir) is None:  # a run's results/ folder: `dynamics --update` may extend it
        runs.mark_written(results_dir, "dynamics")
    return result.tables["dynamics"], result.documents["phases"]


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
