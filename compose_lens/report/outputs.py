"""A run's training dynamics as the report and the figure scripts keep them: the ``dynamics``
declaration (:mod:`compose_lens.registry.dynamics`) run through :mod:`compose_lens.report.context` into the run's
``results/`` folder, read back where it already holds every checkpoint, extended where the run has
written more. Every analysis, this one included, is computed through its declaration; nothing here
computes or draws.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from compose_lens.training import runs

from compose_lens.data import safety
from compose_lens.report.context import RunContext, run_analysis
from compose_lens.core.errors import ComposeLensError


# -- training dynamics ----


def dynamics_for(run_dir: Path, results_dir: Path, split_file=None, stride: int = 1, progress: bool = True,
                 recompute: bool = False, device: str = "cpu") -> tuple[pd.DataFrame, dict]:
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
    run = RunContext(run_dir, split_file, progress=progress, previous=results_dir, device=device)
    try:
        result = run_analysis("dynamics", run, results_dir, **settings)
    except ComposeLensError:  # saved with other settings: made again
        result = run_analysis("dynamics", run, results_dir, **{**settings, "update": False})
    if safety.read_marker(results_dir) is None:  # a run's results/ folder: `dynamics --update` may extend it
        runs.mark_written(results_dir, "dynamics")
    return result.tables["dynamics"], result.documents["phases"]

