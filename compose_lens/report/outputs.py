"""The analyses not yet declared in the registry, as files: training dynamics (``dynamics``, the
report).

Each function composes: it asks :mod:`compose_lens.analysis` for the numbers,
:mod:`compose_lens.runs` to write them and :mod:`compose_lens.plots` to draw them. It computes and
draws nothing of its own. Figures are written by :func:`compose_lens.plots.save` as PNG, SVG or PDF
(``fmt``). The registered analyses (probes, QK, Fourier, same-MLP, DLA, ablation, patching, circuit,
the attention views, ...) are written by :func:`compose_lens.context.write_analysis` and their own commands, through
:mod:`compose_lens.context`: nothing here. This module shrinks as the rest move into the registry.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from compose_lens import runs
from compose_lens.analysis.dynamics import phases_document, run_phases_measured, trajectory, trajectory_settings
from compose_lens.errors import ComposeLensError


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

