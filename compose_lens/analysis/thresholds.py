"""Thresholds of a sweep: the smallest f (or r) at which the model generalises.

The study's Figure 3 reads its sweeps as thresholds: generalisation to held-out 0-var pairs needs
f of about 0.25 or more; to 2-var sequences, r of about 0.2 or more. A sweep's ``results.csv`` holds
one row per (value, seed) point with the final exhaustive accuracies.

**The threshold rule** (:func:`threshold`). For one seed, the threshold at level L is where the
accuracy curve crosses L for the last time from below: the smallest value v_i from which on every
accuracy is at least L, interpolated linearly with (v_{i-1}, a_{i-1}). "Last crossing" rather than
"first value above L" keeps a single lucky point below the transition from deciding the estimate.
If even the smallest value reaches L the threshold is that value (at or below the range); if the
largest stays below L it is NaN. The spread over seeds and the threshold of the seed-mean curve are
given too. A failed point (``status`` other than ``done``) is left out of every curve, and the output
says which; :func:`format_thresholds` says "at or below" and "one seed, no spread" in words.

**The logistic fit** (:func:`fit_logistic`, :func:`fit_thresholds`). The rule above
reads each seed's curve alone and says nothing about how sure it is. The fit pools
every seed's points of a sweep and fits, by (weighted) least squares,

    acc(x) = lo + (hi - lo) / (1 + exp(-(x - x0) / s)),   0 <= lo <= hi <= 1,  s > 0.

*lo and hi are fitted, within bounds.* The floor is not fixed at chance: below the threshold the
held-out accuracy sits a little above it, and the 2-var union's training-pair half is learned at any
r, so a fixed floor would bend the fit. A ceiling forced to 1 would invent a 90 % crossing for a
sweep whose best points stop at 0.8. The curve rises (s > 0): a threshold is a rise. For fixed
(x0, s) the curve is linear in (lo, hi), solved exactly on the triangle 0 <= lo <= hi <= 1
(:func:`_best_lo_hi`; ``scipy.optimize.lsq_linear`` takes box bounds only); (x0, log s) are searched
on one vectorised grid (``scipy.optimize.brute`` is ~100 times slower, and a fit runs ~1,000 times in
a bootstrap), then by Nelder-Mead from its best cell. Against the hand-written simplex this replaced,
the committed sweeps' fits agree to their 6 printed digits but for three last digits (``hi`` of the
f sweep's 0-var fit 0.984509 against 0.98451: scipy's simplex ends at a lower squared error) and the
x0 of a flat curve, which no data determine.

*Crossings.* The L crossing is x0 + s log((L - lo) / (hi - L)), and exists only if lo < L < hi. A
crossing outside the swept values is extrapolation: the estimate is None, ``where`` says "above" or
"below the swept range". A flat curve has no threshold, not a made-up one.

*95 % intervals* come from a two-stage percentile bootstrap. Stage one resamples the seeds (the unit
that repeats the experiment: it fixes split, data order and initialisation); stage two gives each
drawn seed new accuracies, its own fitted curve (the pooled one where its points determine none) plus
its own residuals resampled, clipped to [0, 1]. A replicate that never crosses L inside the range
counts as +-inf, so an interval end beyond the range is None, not clipped.

*How far to trust the interval with three seeds.* Measured on synthetic sweeps (12
values, 3 seeds, logistic with x0 = 0.3, s = 0.03, point noise 0.03; 40 sweeps per
row, 100 replicates each; ``experiments/threshold_interval_coverage.py``), the share of
95 % intervals that held the true 50 % crossing (stage one alone: before stage two was added):

    seed-to-seed shift of x0   stage one only   both stages (shipped)
    none                       25/40 (62 %)     36/40 (90 %)
    sd 0.01                    31/40 (78 %)     32/40 (80 %)

Stage one alone is far too narrow (three seeds give only ten distinct resamples);
both stages come closer but still fall short of 95 %, most where seeds differ. Read
the interval as a lower bound on the uncertainty; more seeds are the remedy.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np
from scipy import optimize

from compose_lens.data.sampler import EXHAUSTIVE_NAMES

METRICS = EXHAUSTIVE_NAMES  # the two exhaustive end-of-training evaluations
LEVELS = (0.5, 0.9)
FIRST_PASS_LEVEL = 0.9


def threshold(values: Sequence[float], accuracies: Sequence[float], level: float) -> float:
    """Where the accuracy curve crosses ``level`` for the last time from below (module docstring), NaN
    accuracies (failed points) dropped first."""
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


# -- the logistic fit and its bootstrap intervals (module docstring) ------------------------

LOGISTIC = "acc(x) = lo + (hi - lo) / (1 + exp(-(x - x0) / s)), 0 <= lo <= hi <= 1, s > 0"
FIT_PARAMETERS = 4  # lo, hi, x0, s
BOOTSTRAP_REPLICATES = 1000
BOOTSTRAP_METHOD = ("two-stage: seeds resampled with replacement, then each drawn seed's accuracies redrawn as "
                    "its own fitted curve + its own residuals resampled with replacement, clipped to [0, 1]; "
                    "percentile interval")


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # 1 / (1 + exp(-z)), without overflow


@dataclass(frozen=True)
class LogisticFit:
    """A fitted rising logistic (module docstring) and the residual it left."""

    lo: float
    hi: float
    x0: float
    s: float
    sse: float
    n: int

    def __call__(self, x) -> np.ndarray:
        return self.lo + (self.hi - self.lo) * _sigmoid((np.asarray(x, dtype=float) - self.x0) / self.s)

    def crossing(self, level: float) -> float:
        """Where the curve equals ``level``: +inf if it stays below it, -inf if it stays above."""
        if level >= self.hi:
            return math.inf
        if level <= self.lo:
            return -math.inf
        return self.x0 + self.s * math.log((level - self.lo) / (self.hi - level))


def _best_lo_hi(x: np.ndarray, y: np.ndarray, w: np.ndarray, x0: np.ndarray, s: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each of K shapes (x0[k], s[k]): the (lo, hi) with 0 <= lo <= hi <= 1 of least weighted squared
    error, and that error, three (K,) arrays. The error is a convex quadratic, so its minimum on the
    triangle is the unconstrained one when inside, else the best of the three edges, each clipped.
    """
    g = _sigmoid((x[None, :] - x0[:, None]) / s[:, None])
    u = 1.0 - g
    a, b, c = (w * u * u).sum(1), (w * u * g).sum(1), (w * g * g).sum(1)
    p, q, total = (w * u * y).sum(1), (w * g * y).sum(1), w.sum()
    det = a * c - b * b
    with np.errstate(divide="ignore", invalid="ignore"):
        inner = (np.where(det > 1e-12, (c * p - b * q) / det, np.nan),
                 np.where(det > 1e-12, (a * q - b * p) / det, np.nan))
        floor0 = (np.zeros_like(a), np.clip(np.where(c > 0, q / c, 0.0), 0, 1))
        ceil1 = (np.clip(np.where(a > 0, (p - b) / a, 0.0), 0, 1), np.ones_like(a))
    flat = np.full_like(a, min(max(float((w * y).sum() / total), 0.0), 1.0))
    best = (np.full_like(a, np.nan), np.full_like(a, np.nan), np.full_like(a, np.inf))
    for lo, hi in (inner, floor0, ceil1, (flat, flat)):
        ok = (lo >= 0) & (lo <= hi + 1e-12) & (hi <= 1)  # False where NaN
        sse = np.where(ok, (w * (y - lo[:, None] * u - hi[:, None] * g) ** 2).sum(1), np.inf)
        better = sse < best[2]
        best = tuple(np.where(better, new, old) for new, old in zip((lo, hi, sse), best))
    return best


def fit_logistic(x: Sequence[float], y: Sequence[float], weights: Sequence[float] | None = None
                 ) -> LogisticFit | None:
    """The least-squares rising logistic through the non-NaN points (module docstring), or None when
    fewer than two distinct x carry weight. s is searched between 1/1000 and 10 times the swept span.
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    w = np.ones_like(x) if weights is None else np.asarray(weights, dtype=float)
    keep = ~np.isnan(x) & ~np.isnan(y) & (w > 0)
    x, y, w = x[keep], y[keep], w[keep]
    if len(np.unique(x)) < 2:
        return None
    span = float(x.max() - x.min())
    bounds = (math.log(span / 1000), math.log(span * 10))
    grid_x0, grid_log_s = np.meshgrid(np.linspace(x.min() - 0.25 * span, x.max() + 0.25 * span, 61),
                                      np.linspace(bounds[0], bounds[1], 25))
    grid_x0, grid_log_s = grid_x0.ravel(), grid_log_s.ravel()
    sse = _best_lo_hi(x, y, w, grid_x0, np.exp(grid_log_s))[2]
    start = np.array([grid_x0[np.argmin(sse)], grid_log_s[np.argmin(sse)]])

    def error(theta: np.ndarray) -> float:
        log_s = min(max(theta[1], bounds[0]), bounds[1])
        return float(_best_lo_hi(x, y, w, theta[:1], np.exp([log_s]))[2][0])

    step = np.array([span / 60, (bounds[1] - bounds[0]) / 24])  # one grid cell
    found = optimize.minimize(error, start, method="Nelder-Mead",
                              options={"initial_simplex": np.vstack([start, start + np.diag(step)]),
                                       "xatol": 1e-8, "fatol": 1e-12, "maxiter": 200})
    x0, log_s = found.x
    log_s = min(max(log_s, bounds[0]), bounds[1])
    lo, hi, best = _best_lo_hi(x, y, w, np.array([x0]), np.exp([log_s]))
    return LogisticFit(float(lo[0]), float(hi[0]), float(x0), float(math.exp(log_s)), float(best[0]), len(x))


def in_range(crossing: float, x_min: float, x_max: float) -> float:
    """A crossing inside [x_min, x_max], else +inf (above the range) or -inf (below it)."""
    if crossing > x_max:
        return math.inf
    if crossing < x_min:
        return -math.inf
    return crossing


def sweep_xy(rows: Sequence[dict], metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values, accuracies, seeds) of the successful points with a numeric value and an accuracy."""
    points = [(numeric(r["value"]), accuracy_of(r, metric), int(r["seed"])) for r in successful(rows)]
    points = [p for p in points if p[0] is not None and not math.isnan(p[1])]
    x, y, seeds = (np.array([p[i] for p in points], dtype=float) for i in range(3))
    return x, y, seeds.astype(int)


def bootstrap_crossings(x: np.ndarray, y: np.ndarray, seeds: np.ndarray, fit: LogisticFit,
                        levels: Sequence[float], replicates: int = BOOTSTRAP_REPLICATES,
                        rng_seed: int = 0) -> np.ndarray:
    """Crossings of each level in each replicate of the two-stage bootstrap (module docstring), shape
    (replicates, len(levels)): +-inf outside the swept range, NaN where a replicate determines no curve.
    Its draws are written here: ``scipy.stats.bootstrap`` has one stage and no refit.
    """
    rng = np.random.default_rng(rng_seed)
    unique = np.unique(seeds)
    members = {s: np.flatnonzero(seeds == s) for s in unique}
    fitted = fit(x)
    for m in members.values():  # each seed's own curve where it has more values than parameters
        own = fit_logistic(x[m], y[m]) if len(np.unique(x[m])) > FIT_PARAMETERS else None
        fitted[m] = fitted[m] if own is None else own(x[m])
    x_min, x_max = float(x.min()), float(x.max())
    out = np.full((replicates, len(levels)), np.nan)
    for i in range(replicates):
        drawn = [members[s] for s in rng.choice(unique, size=len(unique), replace=True)]
        xs = np.concatenate([x[m] for m in drawn])
        ys = np.concatenate([fitted[m] + rng.choice(y[m] - fitted[m], size=len(m)) for m in drawn])
        again = fit_logistic(xs, np.clip(ys, 0, 1))
        if again is not None:
            out[i] = [in_range(again.crossing(level), x_min, x_max) for level in levels]
    return out


def where(crossing: float) -> str:
    return "above the swept range" if crossing == math.inf else (
        "below the swept range" if crossing == -math.inf else "inside the swept range")


def _finite_or_none(value: float) -> float | None:
    return None if math.isnan(value) or math.isinf(value) else round(float(value), 6)


def _level_summary(estimate: float, replicates: np.ndarray, missing: str = "no replicate") -> dict:
    """One level: the estimate, where it lies, the 95 % percentile interval (an end beyond the
    range is None, its side in ``ci95_where``; ``missing`` says why when there is no interval)
    and the share of replicates crossing inside."""
    done = replicates[~np.isnan(replicates)]
    if len(done):
        low, high = np.quantile(done, [0.025, 0.975], method="inverted_cdf")
    else:
        low = high = float("nan")
    return {
        "estimate": _finite_or_none(estimate), "where": where(estimate),
        "ci95": [_finite_or_none(low), _finite_or_none(high)],
        "ci95_where": [where(low) if not math.isnan(low) else missing,
                       where(high) if not math.isnan(high) else missing],
        "share_of_replicates_inside": round(float(np.isfinite(done).mean()), 4) if len(done) else 0.0,
    }


def fit_thresholds(rows: Sequence[dict], metric: str, levels: Sequence[float] = LEVELS,
                   replicates: int = BOOTSTRAP_REPLICATES, rng_seed: int = 0) -> dict:
    """The logistic fit of one metric over all seeds' points, its crossings of each level with 95 %
    bootstrap intervals, and what it was fitted to (``"fit": None`` where no curve is determined). With
    no more distinct values than the four parameters the residuals are zero, so there is no interval
    (``ci95`` None, ``bootstrap.skipped`` says why)."""
    x, y, seeds = sweep_xy(rows, metric)
    base = {"metric": metric, "model": LOGISTIC, "points": int(len(x)),
            "seeds": sorted({int(s) for s in seeds}), "values": sorted({float(v) for v in x})}
    fit = fit_logistic(x, y)
    if fit is None:
        return {**base, "fit": None, "levels": {}}
    distinct = len(base["values"])
    too_few = f"{distinct} values for {FIT_PARAMETERS} parameters: no interval" if distinct <= FIT_PARAMETERS else ""
    boot = (np.full((0, len(levels)), np.nan) if too_few
            else bootstrap_crossings(x, y, seeds, fit, levels, replicates, rng_seed))
    x_min, x_max = float(x.min()), float(x.max())
    return {
        **base,
        "fit": {k: round(v, 6) for k, v in asdict(fit).items() if k not in ("n",)},
        "rms_residual": round(math.sqrt(fit.sse / fit.n), 6),
        "levels": {str(level): _level_summary(in_range(fit.crossing(level), x_min, x_max), boot[:, i],
                                              too_few or "no replicate")
                   for i, level in enumerate(levels)},
        "bootstrap": {"skipped": too_few} if too_few else {
            "method": BOOTSTRAP_METHOD, "replicates": replicates, "rng_seed": rng_seed,
            "failed_replicates": int(np.isnan(boot[:, 0]).sum()) if len(levels) else 0},
    }
