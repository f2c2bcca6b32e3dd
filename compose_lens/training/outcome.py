"""Did a run compose the two skills, stall, or is it still learning? The stall detector.

The study's recipe is fragile: trajectories that differ only in seed or float rounding either compose
addition and assignment, or learn addition and then **stall** with no layer-2 routing within the budget
(the 1-var training accuracy near 0.6 and the 2-var union near 0.3 on most such runs; a few, still
forming it late, end near 0.9 and 0.55: docs/stalls.md). A run's outcome is named from its logged pools
(``metrics.jsonl``) and, once finished, its exhaustive accuracies (``results.json``):

* ``generalised``: exhaustive 0-var held-out and 2-var union accuracies both >= 0.98 (for a run still
  training, read from the pools: addition, routing and refinement phases all reached);
* ``stalled``: addition was learned (:data:`compose_lens.training.phases.PHASE_RULES`) but layer-2 routing
  never formed within the run's budget: the 1-var pools (one operand a variable whose value must be
  fetched from the context) never crossed 0.9 and stayed (:data:`ROUTING`), or, for a run still
  training, have not by a step after which every calibration run in that state formed none within the
  budget (:func:`stall_certain_after`). The 2-var pools are left out on purpose: at small r a run can
  route single variables and still miss pairs, which is the r threshold, not a stall. It is a verdict
  within a budget: two by-seed runs without routing at 30,000 steps formed it by 45,000;
* ``diverged``: the last logged training loss is above the first and more than :data:`DIVERGED_FACTOR`
  times the lowest (a spike that never came back down: with the stall remedy's learning rate at d_model
  512 the loss went from ~1 to over 1,000; a bf16 run at the study's width had learned every pool and
  fell to chance in its last 200 steps): no circuit to read; lower the learning rate;
* ``learning``: anything else (a run still before that step, or one that composed but has not yet refined).

The calibration (``compose_lens/assets/stall_calibration.json``, docs/stalls.md) holds tables, each for a
setting and a horizon H: for each step N, how many runs had learned addition but no routing by N, and
how many of those formed none within H. A run reads the table of its setting with the smallest horizon
that covers its budget (:func:`calibration`). The training-time warning fires at :data:`WARN_AFTER` and
quotes that table's count, so a late learner is never called stalled on a guess. A rate over such
outcomes counts each seed once: :mod:`compose_lens.core.stats`.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import pandas as pd

from compose_lens.core import study
from compose_lens.training.evaluate import BINDING_POOLS, LEARNED, headline_holds
from compose_lens.training.phases import PHASE_RULES, PhaseRule, find_phases, logged_phases
from compose_lens.training.runs import read_metrics

GENERALISED = study.HEADLINE  # on both exhaustive accuracies
CALIBRATION_FILE = Path(__file__).resolve().parents[1] / "assets" / "stall_calibration.json"
ADDITION, _, REFINEMENT = (rule.name for rule in PHASE_RULES)
ROUTING_POOLS = BINDING_POOLS  # one model's binding is read from the same pools (evaluate.learned)
ROUTING = PhaseRule("routing", "layer-2 routing formed: mean accuracy of the 1-var pools with the variable "
                    "in an allowed slot (training and held-out pairs)", "routing_accuracy", LEARNED, 0.10)


@lru_cache(maxsize=1)
def _calibrations() -> dict:
    return json.loads(CALIBRATION_FILE.read_text())


def calibration(f: float | None = None, r: float | None = None, budget: int | None = None) -> dict:
    """The committed calibration table for a run: of its setting (the study's, f = 0.7 and r = 1, or
    every committed run for any other), with the smallest horizon that covers its ``budget`` (steps;
    the study's 30,000 when not given); ``{}`` where no table reaches that far, so nothing is certain."""
    setting = "study" if (f, r) == (study.SETTING["f"], study.SETTING["r"]) else "all"
    budget = study.SETTING["steps"] if budget is None else budget
    tables = [t for t in _calibrations()["tables"] if t["setting"] == setting and t["horizon"] >= budget]
    return min(tables, key=lambda t: t["horizon"]) if tables else {}


def not_routed_by(step: int, table: dict | None = None) -> tuple[int, int]:
    """(never, of): of the calibration runs without routing by ``step`` (the table's last step at or
    before it), how many formed none within the table's horizon."""
    table = calibration() if table is None else table
    rows = [r for r in table.get("by_step", []) if r["step"] <= step]
    return (rows[-1]["never"], rows[-1]["not_routed"]) if rows else (0, 0)


def stall_certain_after(table: dict | None = None, min_runs: int | None = None) -> int | None:
    """The first step after which every calibration run without routing (at least ``min_runs`` of
    them, the calibration's own minimum by default) formed none within the table's horizon; None
    where no step is that certain."""
    table = calibration() if table is None else table
    min_runs = _calibrations()["min_runs"] if min_runs is None else min_runs
    return next((row["step"] for row in table.get("by_step", [])
                 if row["not_routed"] >= min_runs and row["never"] == row["not_routed"]), None)


DIVERGED_FACTOR = 10.0
# ``stop_at=decided`` ends a run once its loss has read diverged at this many evaluations in a row: one
# modularity-grid run (4 layers, d_model 128, seed 1, 3x lr) read diverged for one evaluation (loss 1.54
# at step 2,500, lowest 0.086) and came back to 0.094 at 2,750 and 0.003 at 4,000 (that run's log is not
# committed); of the committed logs only one ever reads diverged and it never came back
# (python experiments/divergence_scan.py)
DIVERGED_STOP_AFTER = 3


def diverged(metrics: Sequence[dict]) -> tuple[float, float, float] | None:
    """(first, lowest, last) logged training loss where the last is above the first and more than
    :data:`DIVERGED_FACTOR` times the lowest, else None (also where no training loss was logged). A run
    that never learned (its loss near the first throughout) is not diverged, whatever its noise.

    >>> diverged([{"train_loss": 1.6}, {"train_loss": 0.18}, {"train_loss": 3.14}])  # learned, then chance
    (1.6, 0.18, 3.14)
    >>> diverged([{"train_loss": 4.0}, {"train_loss": 3.9}, {"train_loss": 4.1}]) is None  # never learned
    True
    >>> diverged([{"train_loss": 3.2}, {"train_loss": 1e-4}, {"train_loss": 0.01}]) is None  # a late bump
    True
    """
    losses = [m["train_loss"] for m in metrics if m.get("train_loss") is not None]
    if len(losses) < 2 or not (losses[-1] > losses[0] and losses[-1] > DIVERGED_FACTOR * min(losses)):
        return None
    return losses[0], min(losses), losses[-1]


def diverged_for(metrics: Sequence[dict]) -> int:
    """How many of the last logged evaluations in a row read :func:`diverged` (each judged on the
    evaluations up to it): 0 for a run whose loss is not diverged now.

    >>> diverged_for([{"train_loss": 1.4}, {"train_loss": 0.09}, {"train_loss": 1.5}, {"train_loss": 2.0}])
    2
    >>> diverged_for([{"train_loss": 1.4}, {"train_loss": 0.09}, {"train_loss": 1.5}, {"train_loss": 0.09}])
    0
    """
    count = 0
    while count < len(metrics) and diverged(metrics[:len(metrics) - count]) is not None:
        count += 1
    return count


def divergence_line(spike: tuple[float, float, float], step: int | None = None) -> str:
    """The sentence that names a divergence (:func:`diverged`'s triple): the outcome's reason once a run
    ended, ``train``'s warning (with the ``step``) while it runs."""
    first, lowest, last = spike
    now = f"is {last:.4g} at step {step}" if step is not None else f"ended at {last:.4g}"
    return (f"the training loss {now}, above its first logged value {first:.4g} and {DIVERGED_FACTOR:g} x "
            f"its lowest {lowest:.3g}: training diverged; lower the learning rate")


def onsets(metrics: Sequence[dict]) -> dict:
    """Addition, routing and refinement onsets in logged pools (or a dynamics table's rows)."""
    if not metrics:
        return {ADDITION: None, ROUTING.name: None, REFINEMENT: None}
    phases = logged_phases(metrics)
    table = pd.DataFrame(list(metrics))
    table["routing_accuracy"] = table[list(ROUTING_POOLS)].mean(axis=1)
    routing = find_phases(table, [ROUTING])[ROUTING.name]["step"]
    return {ADDITION: (phases.get(ADDITION) or {}).get("step"), ROUTING.name: routing,
            REFINEMENT: (phases.get(REFINEMENT) or {}).get("step")}


def outcome(metrics: Sequence[dict], exhaustive: dict | None = None, finished: bool = False,
            table: dict | None = None) -> dict:
    """The outcome of one run from its logged pools (and exhaustive accuracies, once finished).
    ``finished``: the run trained its whole budget (or stopped), so a missing phase is final."""
    onset = onsets(metrics)
    last = int(metrics[-1]["step"]) if metrics else 0
    never, of = not_routed_by(last, table)
    certain = stall_certain_after(table)
    headline = headline_holds(exhaustive, GENERALISED) if exhaustive is not None else all(onset.values())
    spike = diverged(metrics)
    if headline:
        verdict = "generalised"
    elif spike is not None:
        verdict = "diverged"
    elif onset[ROUTING.name] is None and onset[ADDITION] is not None and (
            finished or (certain is not None and last >= certain)):
        verdict = "stalled"
    else:
        verdict = "learning"
    why = {
        "generalised": "the study's headline holds (0-var held-out and 2-var union >= 0.98)" if exhaustive
        else "addition, routing and refinement phases all reached",
        "stalled": f"addition was learned but layer-2 routing (1-var pools >= 0.9) had not formed by "
                   f"step {last}",
        "diverged": divergence_line(spike) if spike else "",
        "learning": "still learning" if onset[ROUTING.name] is None else
                    "routing formed; the headline (>= 0.98 on both exhaustive accuracies) is not yet reached",
    }[verdict]
    if onset[ROUTING.name] is None and onset[ADDITION] is not None and of:
        why += f"; {calibration_line(never, of, table)}"
    horizon = (calibration() if table is None else table).get("horizon")
    return {"outcome": verdict, "why": why, "last_step": last, "onsets": onset,
            "calibration": {"not_routed_by_now": of, "formed_none": never, "horizon": horizon,
                            "stall_certain_after": certain}}


def calibration_line(never: int, of: int, table: dict | None = None) -> str:
    """What the calibration says of a run without routing now: ``k of n calibration runs without
    routing by then formed none within H steps``."""
    horizon = (calibration() if table is None else table).get("horizon")
    within = f"within {horizon:,} steps" if horizon else "within their budget"
    return f"{never} of {of} calibration runs without routing by then formed none {within}"


def trajectory_outcome(records: Sequence[dict], source: str | Path, config) -> dict:
    """:func:`outcome` of a dynamics table (``records``: one dict per checkpoint) read from
    ``source`` trained under ``config`` (a :class:`~compose_lens.core.config.RunConfig`: its setting and
    budget choose the calibration); a run directory's ``results.json`` (beside ``source`` or above
    its ``checkpoints/``) says the run finished and gives its exhaustive accuracies."""
    source = Path(source)
    run = source.parent if source.name == "checkpoints" else source
    results_path = run / "results.json"
    results = json.loads(results_path.read_text()) if results_path.is_file() else None
    return outcome(list(records), (results or {}).get("exhaustive"), finished=results is not None,
                   table=calibration(config.task.f, config.task.r, config.train.steps))


def classify_run(run_dir: str | Path, table: dict | None = None) -> dict:
    """:func:`outcome` of a run directory, with the fields the stall-rate table keeps."""
    run_dir = Path(run_dir)
    metrics = read_metrics(run_dir)
    results_path = run_dir / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else None
    if table is None and (run_dir / "config.json").exists():
        config = json.loads((run_dir / "config.json").read_text())
        task = config.get("task", {})
        table = calibration(task.get("f"), task.get("r"), config.get("train", {}).get("steps"))
    found = outcome(metrics, (results or {}).get("exhaustive"), finished=results is not None, table=table)
    return {**found, "steps": (results or {}).get("steps", found["last_step"]),
            "routing_formed_step": found["onsets"][ROUTING.name],
            "final_1var_train": metrics[-1].get("1var_train") if metrics else None}


WARN_AFTER: int = _calibrations()["warn_after"]  # the calibrated step (module docstring)


def stall_warning(metrics: Sequence[dict], table: dict | None = None, after: int | None = None,
                  found: dict | None = None) -> str | None:
    """The line ``train`` prints once a run looks stalled: addition learned, no routing by ``after``
    steps (default :data:`WARN_AFTER`). ``found``: :func:`outcome` of ``metrics``, if known already."""
    after = WARN_AFTER if after is None else after
    if not metrics or int(metrics[-1]["step"]) < after:
        return None
    found = found or outcome(metrics, table=table)
    if found["onsets"][ROUTING.name] is not None or found["onsets"][ADDITION] is None:
        return None
    c = found["calibration"]
    tail = f"; {calibration_line(c['formed_none'], c['not_routed_by_now'], table)}" if c["not_routed_by_now"] else ""
    return (f"layer-2 routing has not formed by step {found['last_step']} (addition learned, 1-var pools "
            f"below 0.9){tail}")
