"""The three learning phases of the study, read from accuracy curves by one rule.

The study (SPEC section 6, item 7) reads its training run as three phases: **addition**
(the 0-var accuracy on held-out pairs reaches its plateau), the **assignment** structure
(the 1-var and 2-var pools with variables in allowed slots are solved) and a late
**refinement** (the var-restricted 2-var pools). :func:`find_phases` applies one rule to
any table of curves, never a typed-in step: the **onset** of a phase is the first step at
which its metric is at or above ``threshold`` and never falls below ``threshold - margin``
later ("crosses and stays").

These functions read curves only (a dynamics table of evaluated checkpoints, or the pool
accuracies a run logs in ``metrics.jsonl``), so training, the stall detector
(:mod:`compose_lens.outcome`) and the analyses of :mod:`compose_lens.analysis.dynamics`
share them.

>>> phase_onset([100, 200, 300, 400], [0.1, 0.95, 0.5, 0.99], threshold=0.9, margin=0.05)["step"]
400
>>> phase_onset([100, 200, 300], [0.1, 0.95, 0.93], threshold=0.9, margin=0.05)["interpolated_step"]
194.1
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import pandas as pd

# Derived curves the phase rules read (also written to dynamics.csv).
ASSIGNMENT_POOLS = ("1var_train", "1var_add_restricted", "2var_train", "2var_add_restricted")
REFINEMENT_POOLS = ("2var_var_restricted_1", "2var_var_restricted_2")


def add_derived_columns(table: pd.DataFrame, variables: Sequence[str] = ()) -> pd.DataFrame:
    """The curves the phase rules read, and the spread of the ``=`` variable scores."""
    table = table.copy()
    table["addition_accuracy"] = table["0var_add_restricted"]
    table["assignment_accuracy"] = table[list(ASSIGNMENT_POOLS)].mean(axis=1)
    table["refinement_accuracy"] = table[list(REFINEMENT_POOLS)].min(axis=1)
    score_cols = [f"equals_score_{v}" for v in variables if f"equals_score_{v}" in table]
    if score_cols:
        table["equals_score_spread"] = table[score_cols].max(axis=1) - table[score_cols].min(axis=1)
    return table


@dataclass(frozen=True)
class PhaseRule:
    """A phase begins where ``metric`` crosses ``threshold`` and stays above ``threshold - margin``."""

    name: str
    description: str
    metric: str
    threshold: float
    margin: float


PHASE_RULES = (
    PhaseRule("addition", "modular addition learned: 0-var accuracy on held-out pairs at its plateau",
              "addition_accuracy", 0.97, 0.10),
    PhaseRule("assignment", "variable-assignment structure formed: mean accuracy of the 1-var and 2-var "
              "pools with variables in allowed slots (train and held-out pairs)",
              "assignment_accuracy", 0.85, 0.10),
    PhaseRule("refinement", "var-restricted 2-var sequences solved: the lower of the one- and "
              "two-forbidden-slot 2-var pool accuracies", "refinement_accuracy", 0.90, 0.10),
)


def phase_onset(steps: Sequence[int], values: Sequence[float], threshold: float, margin: float) -> dict:
    """First step at/above ``threshold`` after which the curve never drops below ``threshold - margin``.

    Returns ``step`` (None if the curve never crosses and stays), ``bracket`` (the
    checkpoint before it and it), ``interpolated_step`` (where the straight line
    between the bracket's two points meets the threshold) and ``later_checkpoints``
    (how many checkpoints after it show that it stays; 0 means provisional: a run
    still training may yet fall back).
    """
    steps, values = list(map(int, steps)), list(map(float, values))
    onset = None
    for i in range(len(steps)):
        if values[i] >= threshold and all(v >= threshold - margin for v in values[i + 1:]):
            onset = i
            break
    if onset is None:
        return {"step": None, "bracket": None, "interpolated_step": None, "later_checkpoints": 0}
    later = len(steps) - 1 - onset  # how many checkpoints confirm that it stays (0: provisional)
    if onset == 0:
        return {"step": steps[0], "bracket": [steps[0], steps[0]], "interpolated_step": float(steps[0]),
                "later_checkpoints": later}
    s0, s1, v0, v1 = steps[onset - 1], steps[onset], values[onset - 1], values[onset]
    frac = (threshold - v0) / (v1 - v0) if v1 > v0 else 1.0
    return {"step": s1, "bracket": [s0, s1], "interpolated_step": round(s0 + frac * (s1 - s0), 1),
            "later_checkpoints": later}


def find_phases(table: pd.DataFrame, rules: Sequence[PhaseRule] = PHASE_RULES) -> dict:
    """The onset of each phase from a dynamics table (see :func:`phase_onset`)."""
    table = table.sort_values("step")
    out = {}
    for rule in rules:
        onset = phase_onset(table["step"], table[rule.metric], rule.threshold, rule.margin)
        out[rule.name] = {**onset, **asdict(rule)}
    return out


def logged_phases(metrics: Sequence[dict], rules: Sequence[PhaseRule] = PHASE_RULES) -> dict:
    """The phases of a run read from its ``metrics.jsonl`` (the nine pool accuracies logged
    every ``eval_every`` steps) instead of from evaluated checkpoints: the same rule on a
    denser, noisier curve (pools of ``train.pool_size`` sequences). ``{}`` if nothing was logged."""
    if not metrics:
        return {}
    return find_phases(add_derived_columns(pd.DataFrame(list(metrics))), rules)
