"""Every claim with its uncertainty: the statistics the study's numbers are quoted with, in one place.

Each kind of sample has its own honest interval, and ``scipy.stats`` does the tests:

* **A rate over independent runs**: the Wilson score interval (:func:`wilson_interval`), which
  keeps its coverage at small ``n`` and near 0. Two trajectories of one seed (native and scalar
  kernels, fp32 and bf16) share split, weights and data order: they are *paired*, not two trials
  (:func:`one_per_seed`, :func:`paired_agreement`).
* **Two run sets**: Fisher's exact test for rates (:func:`compare_rates`), Mann-Whitney for steps
  (:func:`compare_steps`), or, on the same seeds, McNemar (:func:`paired_agreement`).
* **Time to an event with censoring**: a run that never reached it is censored at its last step,
  not left out (:func:`compare_times`: Kaplan-Meier medians, log-rank test).
* **A score over prompts**: the seeded percentile bootstrap (:func:`bootstrap_interval`,
  :func:`bootstrap_draws`, :func:`percentile_interval`).
* **Printing**: :func:`format_estimate`, at the digits the interval supports; float noise prints as 0.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import torch
from scipy import stats as _scipy

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 1000
ZERO_TOLERANCE = 1e-6  # below this a printed value is float noise: it prints as 0


# -- a rate over independent trials -------------------------------------------------------------


def wilson_interval(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The Wilson score interval of a fraction ``k / n`` (``n = 0``: the whole [0, 1])."""
    if not 0 <= k <= n:
        raise ValueError(f"a rate needs 0 <= k <= n; got k = {k}, n = {n}")
    if n == 0:
        return 0.0, 1.0
    ci = _scipy.binomtest(int(k), int(n)).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


def difference_bounds(first, second, n: int, confidence: float = CONFIDENCE) -> tuple[np.ndarray, np.ndarray]:
    """The 95 % interval of ``first - second``, two fractions each of ``n`` trials, as arrays (Newcombe's
    hybrid score interval, his method 10, from the two :func:`wilson_bounds`). It treats the two as
    independent samples; two accuracies read on the same sequences are paired, and their paired interval
    is narrower, so this one errs wide. Written here: scipy has no interval for a difference of rates.

    >>> low, high = difference_bounds([1.0, 0.9], [0.9, 0.9], 500)
    >>> [float(round(v, 3)) for v in low], [float(round(v, 3)) for v in high]
    ([0.075, -0.038], [0.129, 0.038])
    """
    first, second = np.asarray(first, dtype=float), np.asarray(second, dtype=float)
    (l1, u1), (l2, u2) = wilson_bounds(first, n, confidence), wilson_bounds(second, n, confidence)
    d = first - second
    return d - np.sqrt((first - l1) ** 2 + (u2 - second) ** 2), d + np.sqrt((u1 - first) ** 2 + (second - l2) ** 2)


def wilson_bounds(fraction, n: int, confidence: float = CONFIDENCE) -> tuple[np.ndarray, np.ndarray]:
    """:func:`wilson_interval` of many observed fractions at once (each of ``n`` trials), as arrays:
    the band around an accuracy curve whose every point is a pool of ``n`` sequences."""
    p = np.clip(np.asarray(fraction, float), 0.0, 1.0)
    z = float(_scipy.norm.ppf(0.5 + confidence / 2))
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return np.clip(centre - half, 0.0, 1.0), np.clip(centre + half, 0.0, 1.0)


def trials_for_half_width(fraction: float, half_width: float, confidence: float = CONFIDENCE,
                          most: int = 1_000_000) -> int:
    """How many independent trials (seeds to train) a rate near ``fraction`` needs before its Wilson
    interval is at most ``+- half_width``.

    >>> trials_for_half_width(0.36, 0.08), trials_for_half_width(0.1, 0.08)
    (135, 57)
    """
    if not 0 < half_width < 0.5:
        raise ValueError(f"a half-width must lie in (0, 0.5); got {half_width}")
    n = np.arange(1, most + 1)
    low, high = wilson_bounds(fraction, n, confidence)
    enough = np.flatnonzero((high - low) / 2 <= half_width)
    if not len(enough):
        raise ValueError(f"no count up to {most:,} trials gives +-{half_width} at {fraction}")
    return int(n[enough[0]])


def count_decimals(n: int) -> int:
    """Decimals that tell ``k / n`` from ``(k + 1) / n`` and no more (0.9925 of 2,000, not float32's
    0.9925000071525574).

    >>> count_decimals(2000), count_decimals(1045), count_decimals(7)
    (4, 4, 2)
    """
    return max(2, math.ceil(math.log10(n))) if n > 0 else 2


def rate_record(k: int, n: int, confidence: float = CONFIDENCE) -> dict:
    """``k`` of ``n`` as a JSON record: the count, the fraction and its Wilson interval, rounded to
    :func:`count_decimals` (what ``n`` trials resolve)."""
    low, high = wilson_interval(k, n, confidence)
    digits = count_decimals(n)
    return {"correct": int(k), "n": int(n), "accuracy": round(k / n, digits) if n else float("nan"),
            "low": round(low, digits), "high": round(high, digits)}


@dataclass(frozen=True)
class Rate:
    """``k`` of ``n`` independent trials, the fraction and its Wilson interval."""

    k: int
    n: int
    fraction: float
    low: float
    high: float

    @classmethod
    def of(cls, k: int, n: int, confidence: float = CONFIDENCE) -> "Rate":
        low, high = wilson_interval(k, n, confidence)
        return cls(int(k), int(n), k / n if n else float("nan"), low, high)

    def text(self) -> str:
        """``2 of 14, 0.14 [0.04, 0.40]``."""
        return f"{self.k} of {self.n}, {format_estimate(self.fraction, self.low, self.high)}"

    def as_dict(self) -> dict:
        return asdict(self)


# -- paired trajectories of one seed ----------------------------------------------------------


def one_per_seed(runs: pd.DataFrame, prefer: Sequence[tuple[str, object]], seed: str = "seed") -> pd.DataFrame:
    """One row per seed: the first by ``prefer``, ``(column, value)`` pairs most preferred first (ties:
    the frame's order). The rule is fixed before the outcomes are read, so it cannot favour an outcome."""
    if runs.empty:
        return runs
    rank = pd.DataFrame({f"_p{i}": (runs[col] != value).astype(int) for i, (col, value) in enumerate(prefer)},
                        index=runs.index)
    rank["_order"] = np.arange(len(runs))
    order = rank.sort_values(list(rank.columns)).index
    return runs.loc[order].drop_duplicates(seed, keep="first").sort_values(seed, kind="stable")


def paired_agreement(runs: pd.DataFrame, variant: str, a: object, b: object, outcome: str,
                     seed: str = "seed") -> dict:
    """Do two variants of a seed (``variant == a`` and ``variant == b``) reach the same boolean ``outcome``?

    Over the seeds that have both: the agreeing and the discordant pairs each way, McNemar's exact
    test (a two-sided binomial test at 1/2 of one direction's count; p = 1 when none disagrees), and
    ``flip_interval_95``, the Wilson interval of the share of seeds the variant flips.
    """
    left = runs[runs[variant] == a].drop_duplicates(seed).set_index(seed)[outcome].astype(bool)
    right = runs[runs[variant] == b].drop_duplicates(seed).set_index(seed)[outcome].astype(bool)
    both = left.index.intersection(right.index)
    left, right = left.loc[both], right.loc[both]
    only_a, only_b = int((left & ~right).sum()), int((~left & right).sum())
    discordant = only_a + only_b
    p = float(_scipy.binomtest(only_a, discordant, 0.5).pvalue) if discordant else 1.0
    flips = list(wilson_interval(discordant, len(both))) if len(both) else None
    return {"variant": variant, "a": a, "b": b, "outcome": outcome, "seeds": int(len(both)),
            "agree": int(len(both) - discordant), "only_a": only_a, "only_b": only_b, "mcnemar_exact_p": p,
            "flip_interval_95": flips}


# -- two run sets compared ----------------------------------------------------------------------


def compare_rates(k_a: int, n_a: int, k_b: int, n_b: int) -> dict:
    """Fisher's exact test (two-sided) of ``k_a / n_a`` against ``k_b / n_b``, each with its Wilson interval."""
    table = [[k_a, n_a - k_a], [k_b, n_b - k_b]]
    res = _scipy.fisher_exact(table, alternative="two-sided")
    return {"a": Rate.of(k_a, n_a).as_dict(), "b": Rate.of(k_b, n_b).as_dict(),
            "difference": (k_a / n_a if n_a else float("nan")) - (k_b / n_b if n_b else float("nan")),
            "odds_ratio": float(res.statistic), "p_value": float(res.pvalue), "test": "Fisher exact, two-sided"}


def compare_steps(a: Sequence[float], b: Sequence[float], alternative: str = "two-sided") -> dict:
    """Mann-Whitney rank test of two samples (steps, onsets) with its effect sizes.

    ``common_language``: the chance that a value of ``a`` exceeds one of ``b`` (ties count half),
    i.e. U / (n_a n_b); ``rank_biserial``: ``2 * common_language - 1``. ``alternative`` as in
    scipy (``"less"``: ``a`` tends below ``b``).
    """
    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) == 0 or len(b) == 0:
        raise ValueError(f"a rank test needs both samples; got {len(a)} and {len(b)} values")
    res = _scipy.mannwhitneyu(a, b, alternative=alternative)
    cl = float(res.statistic) / (len(a) * len(b))
    return {"n_a": len(a), "n_b": len(b), "median_a": float(np.median(a)), "median_b": float(np.median(b)),
            "u": float(res.statistic), "p_value": float(res.pvalue), "alternative": alternative,
            "common_language": cl, "rank_biserial": 2 * cl - 1, "test": "Mann-Whitney U"}


def km_median(times: Sequence[float], reached: Sequence[bool]) -> float | None:
    """The Kaplan-Meier median of times to an event (``reached`` False: censored at that time): the
    first time at which at most half are still waiting; None where more than half never reached it.

    >>> km_median([10, 20, 30, 30], [True, True, False, False]), km_median([10, 30, 30], [True, False, False])
    (20.0, None)
    """
    times, reached = np.asarray(times, float), np.asarray(reached, bool)
    survival = _scipy.ecdf(_scipy.CensoredData(uncensored=times[reached], right=times[~reached])).sf
    below = survival.quantiles[survival.probabilities <= 0.5]
    return float(below[0]) if len(below) else None


def compare_times(a_times: Sequence[float], a_reached: Sequence[bool], b_times: Sequence[float],
                  b_reached: Sequence[bool]) -> dict:
    """Two sets' times to an event with right censoring (a run that did not reach it counts to its
    last step): how many reached it, each set's Kaplan-Meier median (None: not reached by half), and
    the log-rank test (two-sided) of equal time-to-event curves.

    >>> found = compare_times([1, 2, 3, 9, 9], [1, 1, 1, 0, 0], [5, 6, 7, 8, 9], [1, 1, 1, 1, 0])
    >>> found["reached_a"], found["median_a"], found["median_b"], round(found["p_value"], 2)
    (3, 3.0, 7.0, 0.9)
    """
    samples = []
    for times, reached in ((a_times, a_reached), (b_times, b_reached)):
        times, reached = np.asarray(times, float), np.asarray(reached, bool)
        if len(times) == 0 or len(times) != len(reached):
            raise ValueError(f"a time-to-event comparison needs times and as many reached flags; got "
                             f"{len(times)} and {len(reached)}")
        samples.append((times, reached))
    (ta, ra), (tb, rb) = samples
    test = _scipy.logrank(_scipy.CensoredData(uncensored=ta[ra], right=ta[~ra]),
                          _scipy.CensoredData(uncensored=tb[rb], right=tb[~rb]))
    return {"n_a": len(ta), "n_b": len(tb), "reached_a": int(ra.sum()), "reached_b": int(rb.sum()),
            "median_a": km_median(ta, ra), "median_b": km_median(tb, rb), "p_value": float(test.pvalue),
            "test": "log-rank, two-sided (Kaplan-Meier medians; runs that did not reach it censored)"}


# -- a score over prompts -----------------------------------------------------------------------


def bootstrap_draws(n: int, rng, resamples: int = BOOTSTRAP_RESAMPLES):
    """(resamples, n) indices of ``n`` rows drawn with replacement, for an analysis that reweights one
    resample for many scores. A seed or numpy ``Generator`` draws as ``scipy.stats.bootstrap`` does
    (so both see the same resamples); a ``torch.Generator`` (:mod:`compose_lens.data.streams`) gives a tensor.

    >>> bootstrap_draws(5, 0, resamples=2).tolist()
    [[4, 3, 2, 1, 1], [0, 0, 0, 0, 4]]
    """
    if isinstance(rng, torch.Generator):
        return torch.randint(0, n, (resamples, n), generator=rng)
    return np.random.default_rng(rng).integers(0, n, (resamples, n))


def bootstrap_interval(statistic: Callable[..., float], *samples: Sequence, seed=0,
                       resamples: int = BOOTSTRAP_RESAMPLES, confidence: float = CONFIDENCE,
                       vectorized: bool = False) -> tuple[float, float, float]:
    """``statistic(*samples)`` and its seeded percentile bootstrap interval, the paired ``samples`` (one
    row per prompt) resampled together (``vectorized``: ``statistic`` takes ``axis=-1``, as ``np.mean``).
    A resample where the statistic is NaN (a ROC-AUC drawing no negative) is left out.

    >>> value, low, high = bootstrap_interval(np.mean, np.r_[np.zeros(50), np.ones(50)], seed=1)
    >>> value, 0.38 < low < 0.45, 0.55 < high < 0.62
    (0.5, True, True)
    """
    arrays = [np.asarray(s) for s in samples]
    value = float(statistic(*arrays, axis=-1) if vectorized else statistic(*arrays))
    with warnings.catch_warnings():  # a NaN replicate makes scipy's own interval NaN: it is taken below
        warnings.simplefilter("ignore", _scipy.DegenerateDataWarning)
        res = _scipy.bootstrap(arrays, statistic, paired=True, vectorized=vectorized, n_resamples=resamples,
                               confidence_level=confidence, method="percentile", rng=np.random.default_rng(seed))
    replicates = np.asarray(res.bootstrap_distribution, dtype=float)
    low, high = percentile_interval(replicates[~np.isnan(replicates)], confidence)
    return value, float(low), float(high)


def percentile_interval(replicates, confidence: float = CONFIDENCE, axis: int = -1):
    """The percentile interval (low, high) of bootstrap ``replicates`` along ``axis`` (numpy or torch)."""
    alpha = (1 - confidence) / 2
    if hasattr(replicates, "new_tensor"):  # a torch tensor: torch's quantile, the result stays a tensor
        return tuple(replicates.quantile(replicates.new_tensor([alpha, 1 - alpha]), dim=axis))
    return tuple(np.quantile(np.asarray(replicates), [alpha, 1 - alpha], axis=axis))


def roc_auc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """The ROC-AUC: the chance that a positive scores above a negative (ties half), the Mann-Whitney U
    of the positives over n_pos n_neg. With 11 positives and 5 negatives it moves in steps of 1/55.

    >>> roc_auc([0.9, 0.8, 0.3, 0.1], [True, False, True, False])
    0.75
    """
    scores, labels = np.asarray(scores, float), np.asarray(labels, bool)
    pos, neg = scores[labels], scores[~labels]
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    return float(_scipy.mannwhitneyu(pos, neg).statistic) / (len(pos) * len(neg))


def _auc_along(scores: np.ndarray, labels: np.ndarray, axis: int = -1) -> np.ndarray:
    """:func:`roc_auc` of each row of a stack, from ranks (Mann-Whitney's U1 over n_pos n_neg); NaN
    where a row has no positive or no negative."""
    ranks = _scipy.rankdata(scores, axis=axis)
    labels = labels.astype(bool)
    pos = labels.sum(axis)
    neg = labels.shape[axis] - pos
    u = (ranks * labels).sum(axis) - pos * (pos + 1) / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((pos > 0) & (neg > 0), u / (pos * neg), np.nan)


def auc_interval(scores: Sequence[float], labels: Sequence[bool], seed: int = 0,
                 resamples: int = BOOTSTRAP_RESAMPLES) -> tuple[float, float, float]:
    """:func:`roc_auc` and its percentile bootstrap interval over the scored items."""
    scores, labels = np.asarray(scores, float), np.asarray(labels, bool)
    _, low, high = bootstrap_interval(_auc_along, scores, labels, seed=seed, resamples=resamples, vectorized=True)
    return roc_auc(scores, labels), low, high


# -- printing -----------------------------------------------------------------------------------


def snap_to_zero(values, tolerance: float = ZERO_TOLERANCE):
    """``values`` (numpy or torch) with every entry of magnitude below ``tolerance`` set to exactly 0:
    a normalised score of float32 arithmetic is not resolved below ~1e-7, so -3.2e-08 is 0."""
    if hasattr(values, "masked_fill"):  # a torch tensor
        return values.masked_fill(values.abs() < tolerance, 0.0)
    return np.where(np.abs(values) < tolerance, 0.0, values)


def _decimals(width: float, significant: int) -> int:
    """Decimal places that give ``width`` ``significant`` significant digits (at least 0)."""
    return max(0, significant - 1 - math.floor(math.log10(width)))


def format_estimate(value: float, low: float | None = None, high: float | None = None, significant: int = 2,
                    zero_below: float = ZERO_TOLERANCE) -> str:
    """``value [low, high]`` with the interval's width to ``significant`` digits (at most 6 decimals);
    magnitudes below ``zero_below`` print as 0. Without an interval, ``value`` to ``significant`` digits.

    >>> format_estimate(0.5, 0.49999999, 0.5)
    '0.50 [0.50, 0.50]'
    >>> format_estimate(0.0123, -0.0003, 0.0251)
    '0.012 [0.000, 0.025]'

    An undefined value (NaN) prints as ``n/a``; an undefined interval (NaN ends: a normalised score
    whose denominator is 0 in some resamples) as ``[no interval]``:

    >>> format_estimate(0.25, float("nan"), float("nan")), format_estimate(float("nan"))
    ('0.25 [no interval]', 'n/a')
    """
    if value is None or math.isnan(value):
        return "n/a"
    if low is not None and high is not None and (math.isnan(low) or math.isnan(high)):
        return format_estimate(value, significant=significant, zero_below=zero_below) + " [no interval]"
    value, low, high = (0.0 if v is not None and abs(v) < zero_below else v for v in (value, low, high))
    if low is None or high is None:
        scale = abs(value)
        digits = 2 if scale == 0 else min(6, max(_decimals(scale, significant), 0))
        return _fixed(value, digits)
    width = high - low
    if width <= zero_below:
        scale = max(abs(value), abs(low), abs(high))
        digits = 0 if scale == 0 else min(6, _decimals(scale, significant))
    else:
        digits = min(6, _decimals(width, significant))
    return f"{_fixed(value, digits)} [{_fixed(low, digits)}, {_fixed(high, digits)}]"


def _fixed(v: float, digits: int) -> str:
    text = f"{v:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text
