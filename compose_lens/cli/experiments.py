"""The command line the experiments/ figure scripts share: SOURCE, --out, --split, --dynamics, --step.

Each script in ``experiments/`` draws one figure of the study from a run directory or the study's
checkpoint folder, from an analysis's numbers (:mod:`compose_lens.registry`) or the dynamics table, with
that analysis's figures, as the report does; these helpers find the table and the model and save the figure.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from compose_lens import registry
from compose_lens.training.subject import final_model, load_checkpoint
from compose_lens.views.drawing import save
from compose_lens.report.context import RunContext, obtain


def experiment_parser(description: str, step: bool = True):
    """The arguments every figure script takes: SOURCE, --out, --split, --dynamics (and --step)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("source", help="run directory, or a folder of the study's step_N.pth files")
    p.add_argument("--out", default="figures", help="directory for the PNG and CSV (default: figures)")
    p.add_argument("--split", help="split file (default: the run's own)")
    p.add_argument("--dynamics", help="directory with dynamics.csv/phases.json; computed there if missing "
                                      "(default: OUT/dynamics)")
    if step:
        p.add_argument("--step", type=int, help="checkpoint step (default: the final model)")
    return p


def save_figure(figure: tuple, args, name: str) -> None:
    """Save a script's (figure, data) as ``args.out``/NAME.png and .csv; print the paths."""
    for path in save(*figure, Path(args.out) / name):
        print(f"wrote {path}")


def dynamics_of(args) -> tuple[pd.DataFrame, dict]:
    """The dynamics table and phases document of ``args.source`` (read, extended or computed there, as the
    report's: :func:`compose_lens.report.context.obtain`)."""
    directory = Path(args.dynamics) if args.dynamics else Path(args.out) / "dynamics"
    run = RunContext(Path(args.source), args.split, previous=directory)
    found = obtain(registry.DYNAMICS, run, directory, {"update": True})
    return found.tables["dynamics"], found.documents["phases"]


def model_of(args):
    """The model of ``args.source`` at ``args.step`` (the final one if None), as a Subject."""
    if getattr(args, "step", None) is None:
        return final_model(Path(args.source), args.split)[0]
    return load_checkpoint(args.source, args.step, args.split)
