"""The early jump's numbers: layer 1's (blocks.0) attention on one sequence and layer 2's variable-identity
matrix (:func:`compose_lens.analysis.probes.variable_identity_matrix`) at two checkpoints of a run, the ones
just before and after the variable-assignment jump, with the assignment accuracy the run's dynamics table
gives at each."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from compose_lens.registry.attention.sequences import sequence_views
from compose_lens.analysis.probes import variable_identity_matrix
from compose_lens.core.config import RunConfig
from compose_lens.model import tl
from compose_lens.training.subject import load_checkpoint


def jump_state(model: tl.Model, config: RunConfig, text: str, step: int, accuracy: float | None = None) -> dict:
    """One side of the early-jump figure: ``{"step", "pattern0" (n, n), "tokens", "identity" (V, V), "accuracy"}``."""
    view = sequence_views(model, config, [text])[0]
    return {"step": step, "pattern0": view["patterns"][0, 0].numpy(), "tokens": view["words"],
            "identity": variable_identity_matrix(model, config).numpy(), "accuracy": accuracy}


def accuracy_at(table: pd.DataFrame | None, step: int, column: str = "assignment_accuracy") -> float | None:
    """``column`` of the dynamics table at ``step``, None where the table lacks it."""
    if table is None or column not in table or not (table["step"] == step).any():
        return None
    return float(table.loc[table["step"] == step, column].iloc[0])


def jump_states(source: str | Path, before: int, after: int, text: str, table: pd.DataFrame | None = None,
                split_file=None) -> tuple[dict, dict, list[str]]:
    """(state before, state after, variable names) between two checkpoint steps of a run or reference folder."""
    states = []
    for step in (before, after):
        loaded = load_checkpoint(source, step, split_file)
        states.append(jump_state(loaded.model, loaded.config, text, step, accuracy_at(table, step)))
    return states[0], states[1], list(loaded.config.task.variable_names)
