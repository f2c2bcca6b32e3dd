"""The early jump's numbers: layer 1's (blocks.0) attention on one sequence and layer 2's variable-identity
matrix (:func:`compose_lens.analysis.probes.variable_identity_matrix`) at two checkpoints of a run, the ones
just before and after the variable-assignment jump, with the assignment accuracy the run's dynamics table
gives at each."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from compose_lens.registry.attention.sequences import sequence_views
from compose_lens.analysis.probes import variable_identity_matrix
from compose_lens.training.subject import load_checkpoint


def jump_states(source: str | Path, before: int, after: int, text: str, table: pd.DataFrame | None = None,
                split_file=None) -> tuple[dict, dict, list[str]]:
    """(state before, state after, variable names) between two checkpoint steps of a run or reference folder;
    a state is one side of the figure: ``{"step", "pattern0" (n, n), "tokens", "identity" (V, V), "accuracy"}``,
    the accuracy None where the dynamics table lacks the step."""
    states = []
    for step in (before, after):
        loaded = load_checkpoint(source, step, split_file)
        view = sequence_views(loaded.model, loaded.config, [text])[0]
        accuracy = None
        if table is not None and "assignment_accuracy" in table and (table["step"] == step).any():
            accuracy = float(table.loc[table["step"] == step, "assignment_accuracy"].iloc[0])
        states.append({"step": step, "pattern0": view["patterns"][0, 0].numpy(), "tokens": view["words"],
                       "identity": variable_identity_matrix(loaded.model, loaded.config).numpy(), "accuracy": accuracy})
    return states[0], states[1], list(loaded.config.task.variable_names)
