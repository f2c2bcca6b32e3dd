"""Thresholds of a sweep: the smallest f (or r) at which the model generalises.

The study's Figure 3 reads its sweeps as thresholds: generalisation to held-out
0-var pairs needs f of about 0.25 or more; to 2-var sequences, r of about 0.2 or
more. A sweep's ``results.csv`` holds one row per (value, seed) point with the
final exhaustive accuracies (``zero_var_heldout_accuracy``, ``two_var_union_accuracy``).

**The threshold rule** (:func:`threshold`). For one seed, sort the points by
parameter value. The threshold at level L is where the accuracy curve crosses L
for the last time from below: take the smallest value v_i from which on every
accuracy is at least L, and interpolate linearly between (v_{i-1}, a_{i-1}) and
(v_i, a_i). If even the smallest value reaches L the threshold is reported as
that value (it lies at or below the swept range); if the largest value stays
below L it is NaN (above the range). The spread is the mean, standard deviation,
minimum and maximum over seeds; the threshold of the seed-mean curve is given too.
"Last crossing from below" rather than "first value above L" keeps a single
lucky point below the true transition from deciding the estimate.

**Only successful points count.** A point whose training failed (``status`` other
than ``done``) has no accuracy, and is left out of every curve; the output says how
many points each estimate used and which were left out. A threshold at the smallest
successful value is a bound ("at or below"), and a spread over one seed is not a
spread: :func:`format_thresholds` says both in words instead of printing ``+- 0``.

>>> threshold([0.1, 0.2, 0.3, 0.4], [0.0, 0.2, 0.8, 1.0], level=0.5)
0.25
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from compose_lens.data.sampler import EXHAUSTIVE_NAMES

METRICS = EXHAUSTIVE_NAMES  # the two exhaustive end-of-training evaluations
LEVELS = (0.5, 0.9)
FIRST_PASS_LEVEL = 0.9


def threshold(values: Sequence[float], accuracies: Sequence[float], level: float) -> float:
    """Where the accuracy curve crosses ``level`` for the last time from below (module docstring).

    NaN accuracies (failed points) are dropped first.

    >>> threshold([0.1, 0.2, 0.3], [0.95, 0.97, 0.99], level=0.9)  # at or below the range
    0.1
    >>> threshold([0.1, 0.2, 0.3], [0.1, 0.2, 0.3], level=0.9)  # above the range
    nan
    >>> threshold([0.1, 0.2, 0.3, 0.4], [0.1, 0.9, 0.1, 0.9], level=0.5)  # the last crossing
    0.35
    """
    curve = sorted((float(v), float(a)) for v, a in zip(values, accuracies) if not math.isnan(float(a)))
    if not curve or curve[-1][1] < level:
        return float("nan")
    i = len(curve) - 1
    while i > 0 and curve[i - 1][1] >= level:
        i -= 1
    if i == 0:
        return curve[0][0]
    (v0, a0), (v1, a1) = curve[i - 1], curve[i]
    return round(v0 + (level - a0) / (a1 - a0) * (v1 - v0), 10)


def _spread(estimates: Sequence[float]) -> dict[str, float | int]:
    finite = [e for e in estimates if not math.isnan(e)]
    if not finite:
        return {"mean": float("nan"), "std": float("nan"), "min": float("nan"), "max": float("nan"), "n": 0}
    mean = sum(finite) / len(finite)
    std = math.sqrt(sum((e - mean) ** 2 for e in finite) / (len(finite) - 1)) if len(finite) > 1 else 0.0
    return {"mean": mean, "std": std, "min": min(finite), "max": max(finite), "n": len(finite)}


def accuracy_of(row: dict, metric: str) -> float:
    raw = row.get(f"{metric}_accuracy", "")
    return float(raw) if raw not in ("", None) else float("nan")


def numeric(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def successful(rows: Sequence[dict]) -> list[dict]:
    """The points that finished training (``status`` done; rows without a status count as done)."""
    return [r for r in rows if r.get("status", "done") in ("done", "")]


def thresholds(rows: Sequence[dict], metrics: Sequence[str] = METRICS,
               levels: Sequence[float] = LEVELS) -> dict:
    """Per metric and level: the threshold of each seed, their spread, and that of the mean curve,
    from the successful points only (each entry lists the points left out).

    Only numeric parameter values have thresholds; for others this returns ``{}``.
    """
    if not rows or any(numeric(r["value"]) is None for r in rows):
        return {}
    left_out = [f"{r['value']} (seed {r['seed']}, {r.get('status') or 'no status'})"
                for r in rows if r not in successful(rows)]
    rows = successful(rows)
    if not rows:
        return {}
    seeds = sorted({int(r["seed"]) for r in rows})
    values = sorted({float(r["value"]) for r in rows})
    out: dict[str, dict] = {}
    for metric in metrics:
        by_seed = {s: {float(r["value"]): accuracy_of(r, metric) for r in rows if int(r["seed"]) == s}
                   for s in seeds}
        mean_curve = []
        for v in values:
            accs = [by_seed[s][v] for s in seeds if v in by_seed[s] and not math.isnan(by_seed[s][v])]
            mean_curve.append(sum(accs) / len(accs) if accs else float("nan"))
        out[metric] = {}
        for level in levels:
            per_seed = {str(s): threshold(list(by_seed[s]), list(by_seed[s].values()), level) for s in seeds}
            out[metric][str(level)] = {
                "per_seed": per_seed,
                **_spread(list(per_seed.values())),
                "of_mean_curve": (of_mean := threshold(values, mean_curve, level)),
                "mean_curve_at_or_below_range": of_mean == values[0],
                "at_or_below_range": {s: v == min(by_seed[int(s)]) for s, v in per_seed.items()},
                "points_used": len(rows),
                "points_left_out": left_out,
            }
    return out


def first_step_above(metrics: Sequence[dict], pool: str, level: float = FIRST_PASS_LEVEL) -> int | None:
    """The first evaluated step at which ``pool`` reached ``level`` (None if never).

    >>> first_step_above([{"step": 100, "x": 0.5}, {"step": 200, "x": 0.95}], "x")
    200
    """
    for line in sorted(metrics, key=lambda m: m["step"]):
        if line.get(pool, -1.0) >= level:
            return int(line["step"])
    return None


THRESHOLD_RULE = ("per seed: the smallest swept value from which on every accuracy is >= level, "
                  "linearly interpolated with the value before it; the smallest value if all reach the "
                  "level, NaN if the largest does not")


def format_thresholds(found: dict, param: str) -> list[str]:
    """One line per metric and level; 'not reached' where the accuracy never stays above it."""

    def show(v: float, below: bool = False) -> str:
        return "not reached" if math.isnan(v) else ("<= " if below else "") + f"{v:.3g}"

    lines = []
    for metric, by_level in found.items():
        for level, t in by_level.items():
            below = t.get("at_or_below_range", {})
            seeds = ", ".join(f"seed {s}: {show(v, below.get(s, False))}" for s, v in t["per_seed"].items())
            if not t["n"]:
                head = f"{param}: not reached ("
            elif t["n"] == 1:
                head = f"{param} = {t['mean']:.3g} (one seed, no spread; "
            else:
                head = f"{param} = {t['mean']:.3g} +- {t['std']:.2g} (range {t['min']:.3g}..{t['max']:.3g}; "
            used = f"; from {t['points_used']} successful points" if "points_used" in t else ""
            if t.get("points_left_out"):
                used += f", failed points left out: {', '.join(t['points_left_out'])}"
            lines.append(f"{metric} >= {float(level):.0%}: {head}{seeds}; mean curve "
                         f"{show(t['of_mean_curve'], t.get('mean_curve_at_or_below_range', False))}{used})")
    return lines
