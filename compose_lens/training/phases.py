"""The three learning phases of the study, read from accuracy curves by one rule.

The study (SPEC section 6, item 7) reads its training run as three phases: **addition** (the 0-var
accuracy on held-out pairs reaches its plateau), the **assignment** structure (the 1-var and 2-var pools
with variables in allowed slots are solved) and a late **refinement** (the var-restricted 2-var pools).
:func:`find_phases` applies one rule to any table of curves, never a typed-in step: the **onset** of a
phase is the first step at which its metric is at or above ``threshold`` and never falls below
``threshold - margin`` later ("crosses and stays"). Training, the stall detector
(:mod:`compose_lens.training.outcome`) and the dynamics analyses share it.

**A run's onsets, as printed** (``make reproduce``, ``compose-lens dynamics``, the report, the README)
are one measurement, :func:`measure_phases`, on the run's *evaluated checkpoints* (``compose-lens
dynamics``'s pools, the same draw of ``pool_size`` sequences for every checkpoint). The pools a run logs
while training are another draw, and by the same rule can land a few hundred steps away (seed 42:
addition 1,400 logged, 1,200 at the checkpoints); they serve the stall detector and the sweeps only.
Each onset comes with the interval it is known to:

* **checkpoint spacing**: the curve crossed after the checkpoint before the onset: ``(bracket[0], step]``;
* **pool sampling**: the rule read again on each pool's 95 % Wilson band (upper: the earliest plausible
  onset, lower: the latest); the interval runs from the earliest reading's bracket start to the latest
  reading's step (``None`` where the lower band never crosses and stays);
* **stride**: read on every ``stride``-th checkpoint, an onset is flagged (``stride_may_move``) where the
  reading skipped a checkpoint after the bracket's start, which may cross first or dip below
  ``threshold - margin``; the interval is then the reading's own, not the run's.

>>> phase_onset([100, 200, 300, 400], [0.1, 0.95, 0.5, 0.99], threshold=0.9, margin=0.05)["step"]
400
>>> phase_onset([100, 200, 300], [0.1, 0.95, 0.93], threshold=0.9, margin=0.05)["interpolated_step"]
194.1
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

import pandas as pd

from compose_lens.core.stats import wilson_bounds
from compose_lens.data.pools import POOL_NAMES

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
    """First step at/above ``threshold`` after which the curve never drops below ``threshold - margin``:
    ``step`` (None if the curve never crosses and stays), ``bracket`` (the checkpoint before it and it),
    ``interpolated_step`` (where the line between the bracket's points meets the threshold) and
    ``later_checkpoints`` (how many show that it stays; 0: provisional)."""
    steps, values = list(map(int, steps)), list(map(float, values))
    onset = next((i for i in range(len(steps))
                  if values[i] >= threshold and all(v >= threshold - margin for v in values[i + 1:])), None)
    if onset is None:
        return {"step": None, "bracket": None, "interpolated_step": None, "later_checkpoints": 0}
    later = len(steps) - 1 - onset
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
    return {rule.name: {**phase_onset(table["step"], table[rule.metric], rule.threshold, rule.margin), **asdict(rule)}
            for rule in rules}


def logged_phases(metrics: Sequence[dict], rules: Sequence[PhaseRule] = PHASE_RULES) -> dict:
    """The phases read from a run's ``metrics.jsonl`` (its logged pools) instead of evaluated checkpoints:
    the same rule on a denser, noisier curve. ``{}`` if nothing was logged."""
    if not metrics:
        return {}
    return find_phases(add_derived_columns(pd.DataFrame(list(metrics))), rules)


def _pool_band(table: pd.DataFrame, pool_size: int, side: int) -> pd.DataFrame:
    """``table`` with every pool accuracy moved to its Wilson bound (``side`` +1 upper, -1 lower) and
    the phase curves derived again from those bounds."""
    band = table.copy()
    for col in POOL_NAMES:
        if col in band:
            low, high = wilson_bounds(band[col].to_numpy(float), pool_size)
            band[col] = high if side > 0 else low
    return add_derived_columns(band)


def measure_phases(table: pd.DataFrame, pool_size: int | None = None, available_steps: Iterable[int] | None = None,
                   rules: Sequence[PhaseRule] = PHASE_RULES) -> dict:
    """The run's phase onsets: :func:`find_phases` plus, per phase, ``interval`` (spacing and, given
    ``pool_size``, pool sampling), ``stride_may_move`` (given the run's ``available_steps``) and ``text``
    (``"5,000 [4,900, 5,200]"``): see the module doc.

    >>> curve = [0.5, 0.965, 0.99, 0.99]  # 0.965 of 2,000 may be 0.97: the interval reaches back to 100
    >>> table = pd.DataFrame({"step": [100, 200, 300, 400], **{pool: curve for pool in POOL_NAMES}})
    >>> found = measure_phases(table, rules=PHASE_RULES[:1], pool_size=2000, available_steps=[100, 200, 250, 300, 400])
    >>> found["addition"]["step"], found["addition"]["interval"], found["addition"]["stride_may_move"]
    (300, [100, 300], True)
    """
    table = add_derived_columns(table).sort_values("step")
    found = find_phases(table, rules)
    early = late = None
    if pool_size:
        early, late = find_phases(_pool_band(table, pool_size, +1), rules), find_phases(_pool_band(table, pool_size, -1), rules)
    read = set(int(s) for s in table["step"])
    skipped = sorted(set(int(s) for s in available_steps) - read) if available_steps is not None else []
    for rule in rules:
        onset = found[rule.name]
        if onset["step"] is None:
            onset.update(interval=None, stride_may_move=False, text="not reached", pool_size=pool_size)
            continue
        low, high = onset["bracket"][0], onset["step"]
        if early is not None and early[rule.name]["step"] is not None:
            low = min(low, early[rule.name]["bracket"][0])
        if late is not None:
            high = late[rule.name]["step"]
        moves = any(s > onset["bracket"][0] for s in skipped)
        onset.update(interval=[low, high], stride_may_move=moves, pool_size=pool_size,
                     text=onset_text(onset["step"], [low, high]))
    return found


def onset_text(step: int | None, interval: Sequence | None) -> str:
    """``5,000 [4,900, 5,200]``; ``[.., open]`` where the interval has no upper end."""
    if step is None:
        return "not reached"
    if not interval:
        return f"{step:,}"
    return f"{step:,} [{interval[0]:,}, " + (f"{interval[1]:,}]" if interval[1] is not None else "not established]")


PROVISIONAL_BELOW = 3  # later checkpoints needed to show that an onset stays


def phase_line(phase: dict | None) -> str:
    """The one sentence every printer uses for a :func:`measure_phases` onset.

    >>> phase_line({"step": 5000, "interval": [4700, 5000], "bracket": [4900, 5000], "interpolated_step": 4950.0,
    ...             "later_checkpoints": 250, "stride_may_move": False, "pool_size": 2000})
    'step 5,000 [4,700, 5,000] (crossed between checkpoints 4,900 and 5,000, ~4,950; interval: spacing and pools of 2,000)'
    """
    if not phase or phase.get("step") is None:
        return "not reached"
    interval = phase.get("interval")
    lo, hi = phase["bracket"]
    why = "spacing and pools of " + f"{phase['pool_size']:,}" if phase.get("pool_size") else "checkpoint spacing"
    text = (f"step {onset_text(phase['step'], interval)} (crossed between checkpoints {lo:,} and {hi:,}, "
            f"~{phase['interpolated_step']:,.0f}; interval: {why})")
    if phase.get("stride_may_move"):
        text += "; read on a stride that skipped checkpoints from the bracket on: a denser reading can move it"
    if phase.get("later_checkpoints", PROVISIONAL_BELOW) < PROVISIONAL_BELOW:
        text += "; provisional: too few later checkpoints to show that it stays"
    return text
