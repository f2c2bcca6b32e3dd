"""The logistic threshold fit of a sweep: a known threshold is found, inside its 95 % interval;
a curve that never crosses a level gets no crossing; a crossing is never extrapolated."""

from __future__ import annotations

import math

import numpy as np
import pytest

from compose_lens.analysis.thresholds import LogisticFit, fit_logistic, fit_thresholds

VALUES = np.round(np.arange(0.10, 0.70, 0.05), 3)  # 12 values, as the full-budget sweeps have


def logistic(x, lo=0.05, hi=0.95, x0=0.3, s=0.03):
    return lo + (hi - lo) / (1 + np.exp(-(np.asarray(x) - x0) / s))


def rows_of(curve, seeds=(0, 1, 2), noise=0.03, rng_seed=0, metric="zero_var_heldout", values=VALUES):
    rng = np.random.default_rng(rng_seed)
    rows = []
    for seed in seeds:
        for v in values:
            acc = float(np.clip(curve(v) + rng.normal(0, noise), 0, 1))
            rows.append({"value": str(v), "seed": str(seed), "status": "done", f"{metric}_accuracy": str(acc)})
    return rows


def true_crossing(level, lo=0.05, hi=0.95, x0=0.3, s=0.03):
    return x0 + s * math.log((level - lo) / (hi - level))


def test_an_exact_logistic_is_fitted_exactly():
    fit = fit_logistic(VALUES, logistic(VALUES, lo=0.1, hi=0.9, x0=0.37, s=0.04))
    assert (fit.lo, fit.hi, fit.x0, fit.s) == pytest.approx((0.1, 0.9, 0.37, 0.04), abs=1e-3)
    assert fit.crossing(0.9 * 0.9) == pytest.approx(0.37 + 0.04 * math.log(0.71 / 0.09), abs=2e-3)


def test_the_floor_and_ceiling_stay_within_zero_and_one():
    fit = fit_logistic(VALUES, np.where(VALUES > 0.3, 1.0, 0.0) + np.where(VALUES > 0.3, 0.02, -0.02))
    assert 0.0 <= fit.lo <= fit.hi <= 1.0


def test_a_known_threshold_is_recovered_inside_its_interval():
    found = fit_thresholds(rows_of(logistic), "zero_var_heldout", replicates=200)
    for level in (0.5, 0.9):
        summary = found["levels"][str(level)]
        low, high = summary["ci95"]
        assert low <= true_crossing(level) <= high, (level, summary)
        assert high - low < 0.05  # an interval, not the whole range
    assert found["points"] == 36 and found["seeds"] == [0, 1, 2]


def test_a_crossing_at_0_3_is_not_reported_at_0_2():
    found = fit_thresholds(rows_of(lambda v: logistic(v, lo=0.02, hi=0.99)), "zero_var_heldout", replicates=200)
    summary = found["levels"]["0.5"]
    assert summary["estimate"] == pytest.approx(0.3, abs=0.02)
    assert summary["ci95"][0] > 0.2


@pytest.mark.parametrize("level", [0.5, 0.9])
def test_a_flat_curve_has_no_crossing(level):
    found = fit_thresholds(rows_of(lambda v: 0.3 + 0 * v), "zero_var_heldout", replicates=100)
    summary = found["levels"][str(level)]
    assert summary["estimate"] is None and summary["where"] == "above the swept range"
    assert summary["ci95"] == [None, None]


def test_a_curve_above_the_level_everywhere_is_below_the_range_not_at_its_first_value():
    found = fit_thresholds(rows_of(lambda v: 0.97 + 0 * v, noise=0.01), "zero_var_heldout", replicates=50)
    assert found["levels"]["0.5"]["estimate"] is None
    assert found["levels"]["0.5"]["where"] == "below the swept range"


def test_a_crossing_beyond_the_largest_value_is_not_extrapolated():
    # still rising at the last value (0.45 at 0.65): the fitted curve would cross 0.5 beyond it
    found = fit_thresholds(rows_of(lambda v: logistic(v, lo=0.02, hi=1.0, x0=0.68, s=0.05), noise=0.01),
                           "zero_var_heldout", replicates=50)
    assert found["levels"]["0.5"]["estimate"] is None
    assert found["levels"]["0.5"]["where"] == "above the swept range"


def test_a_falling_curve_is_not_read_as_a_threshold():
    found = fit_thresholds(rows_of(lambda v: 1.0 - logistic(v)), "zero_var_heldout", replicates=50)
    assert found["fit"]["lo"] == pytest.approx(found["fit"]["hi"], abs=1e-9)  # flat: the best rising curve
    assert found["levels"]["0.9"]["estimate"] is None


def test_failed_and_pending_points_and_missing_accuracies_are_left_out():
    rows = rows_of(logistic)
    rows[0]["status"] = "failed"
    rows[1]["status"] = "pending"
    rows[2]["zero_var_heldout_accuracy"] = ""  # f = 1: no held-out pair, no accuracy
    found = fit_thresholds(rows, "zero_var_heldout", replicates=20)
    assert found["points"] == len(rows) - 3


def test_one_seed_still_gets_an_interval_around_its_threshold():
    found = fit_thresholds(rows_of(logistic, seeds=(4,)), "zero_var_heldout", replicates=200)
    low, high = found["levels"]["0.5"]["ci95"]
    assert low is not None and high is not None and low < high
    assert low <= true_crossing(0.5) <= high


def test_one_value_determines_no_curve():
    rows = rows_of(logistic, values=[0.3])
    found = fit_thresholds(rows, "zero_var_heldout", replicates=20)
    assert found["fit"] is None and found["levels"] == {}


def test_crossing_says_on_which_side_a_level_is_never_reached():
    fit = LogisticFit(lo=0.2, hi=0.6, x0=0.3, s=0.05, sse=0.0, n=0)
    assert fit.crossing(0.9) == math.inf and fit.crossing(0.1) == -math.inf
    assert fit(fit.crossing(0.5)) == pytest.approx(0.5)


def test_four_values_are_interpolated_and_get_no_zero_width_interval():
    """Four values, four parameters: the curve passes through every point, so the residuals are
    zero and a bootstrap would shrink to a point. The estimate stays; the interval is refused."""
    rows = rows_of(logistic, seeds=(0,), noise=0.0, values=[0.1, 0.2, 0.3, 0.4])
    rows[2]["zero_var_heldout_accuracy"] = "0.7"
    found = fit_thresholds(rows, "zero_var_heldout", replicates=50)
    summary = found["levels"]["0.5"]
    assert found["rms_residual"] < 1e-3 and 0.2 < summary["estimate"] < 0.3
    assert summary["ci95"] == [None, None] and "no interval" in summary["ci95_where"][0]
    assert "skipped" in found["bootstrap"]
