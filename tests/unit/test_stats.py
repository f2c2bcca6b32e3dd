"""compose_lens.core.stats against values a statistician would compute by hand (or read from a table)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from compose_lens.core import stats


def hand_wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def test_wilson_interval_known_values():
    low, high = stats.wilson_interval(2, 14)  # the fp32 stall rate counted by seed (issue 44)
    assert (round(low, 2), round(high, 2)) == (0.04, 0.40)
    low, high = stats.wilson_interval(3, 8)
    assert low == pytest.approx(0.1369, abs=1e-3) and high == pytest.approx(0.6943, abs=1e-3)
    for k, n in [(0, 16), (2, 24), (7, 7), (13, 60)]:
        assert stats.wilson_interval(k, n) == pytest.approx(hand_wilson(k, n), abs=1e-6)
    assert stats.wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError, match="0 <= k <= n"):
        stats.wilson_interval(5, 3)


def test_rate_text_and_fields():
    rate = stats.Rate.of(2, 14)
    assert rate.fraction == pytest.approx(1 / 7) and rate.text() == "2 of 14, 0.14 [0.04, 0.40]"


def test_fisher_exact_remedy_against_recipe():
    found = stats.compare_rates(0, 16, 3, 31)  # issue 44: p ~ 0.54, no evidence of a change
    assert found["p_value"] == pytest.approx(0.5404, abs=1e-3)
    assert found["a"]["k"] == 0 and found["b"]["n"] == 31
    assert stats.compare_rates(0, 20, 10, 20)["p_value"] < 0.001  # a real difference is seen


def test_mann_whitney_effect_sizes():
    found = stats.compare_steps([1, 2, 3], [4, 5, 6], alternative="less")
    assert found["u"] == 0 and found["rank_biserial"] == -1 and found["p_value"] == pytest.approx(0.05)
    tied = stats.compare_steps([1, 2], [1, 2])
    assert tied["common_language"] == 0.5 and tied["rank_biserial"] == 0
    with pytest.raises(ValueError, match="both samples"):
        stats.compare_steps([], [1.0])


def test_one_per_seed_keeps_the_preferred_variant_and_every_seed():
    runs = pd.DataFrame({"seed": [7, 7, 8, 9, 9], "kernel": ["default", "native", "default", "native", "default"],
                         "stalled": [False, True, False, False, True]})
    kept = stats.one_per_seed(runs, [("kernel", "native")])
    assert kept["seed"].tolist() == [7, 8, 9]
    assert kept["kernel"].tolist() == ["native", "default", "native"]
    assert kept["stalled"].tolist() == [True, False, False]


def test_paired_agreement_counts_discordant_pairs_both_ways():
    runs = pd.DataFrame({"seed": [1, 1, 2, 2, 3, 3, 4], "kernel": ["native", "default"] * 3 + ["native"],
                         "stalled": [True, False, False, False, False, True, True]})
    found = stats.paired_agreement(runs, "kernel", "native", "default", "stalled")
    assert (found["seeds"], found["agree"], found["only_a"], found["only_b"]) == (3, 1, 1, 1)
    assert found["mcnemar_exact_p"] == pytest.approx(1.0)
    one_way = pd.DataFrame({"seed": sorted(list(range(6)) * 2), "kernel": ["native", "default"] * 6,
                            "stalled": [True, False] * 6})
    assert stats.paired_agreement(one_way, "kernel", "native", "default", "stalled")["mcnemar_exact_p"] == \
        pytest.approx(2 / 2 ** 6)


def test_bootstrap_interval_is_seeded_and_holds_the_estimate():
    values = np.random.default_rng(0).random(200)
    first = stats.bootstrap_interval(np.mean, values, seed=3)
    assert first == stats.bootstrap_interval(np.mean, values, seed=3)
    assert first[1] < first[0] < first[2]
    # the standard error of a mean of U(0, 1) draws is 0.29 / sqrt(200) = 0.020; the 95 % interval ~ +-0.04
    assert 0.06 < first[2] - first[1] < 0.10


def test_roc_auc_and_its_interval():
    labels = np.array([True] * 11 + [False] * 5)
    scores = np.r_[np.linspace(1, 2, 11), np.linspace(0, 1.5, 5)]  # one tie (1.0) counts half
    pos, neg = scores[labels], scores[~labels]
    by_hand = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / 55
    auc = stats.roc_auc(scores, labels)
    assert auc == pytest.approx(by_hand) and auc * 110 == pytest.approx(round(auc * 110))  # steps of 1/110
    value, low, high = stats.auc_interval(scores, labels, seed=0)
    assert value == auc and low <= value <= high <= 1


def test_percentile_interval_numpy_and_torch_agree():
    draws = np.arange(1001, dtype=float)
    low, high = stats.percentile_interval(draws)
    assert (low, high) == pytest.approx((25.0, 975.0))
    tlow, thigh = stats.percentile_interval(torch.tensor(draws))
    assert (tlow.item(), thigh.item()) == pytest.approx((25.0, 975.0))


@pytest.mark.parametrize("args, text", [
    ((-3.2e-8, -4.3e-8, -2.1e-8), "0 [0, 0]"),
    ((0.8333, 0.6124, 0.9421), "0.83 [0.61, 0.94]"),
    ((23100.0, 21800.0, 23100.0), "23100 [21800, 23100]"),
    ((0.9, 0.8987, 0.9012), "0.9000 [0.8987, 0.9012]"),
    ((0.97,), "0.97"),
])
def test_format_estimate(args, text):
    assert stats.format_estimate(*args) == text


def test_wilson_bounds_match_the_scalar_interval():
    fractions = np.array([0.0, 0.14, 0.5, 0.97, 1.0])
    low, high = stats.wilson_bounds(fractions, 2000)
    for f, lo, hi in zip(fractions, low, high):
        assert (lo, hi) == pytest.approx(stats.wilson_interval(round(f * 2000), 2000), abs=1e-9)


def test_snap_to_zero_removes_float_noise_and_keeps_real_values():
    noisy = torch.tensor([-3.2e-8, -4.3e-8, -2.1e-8, 0.125, -0.5])
    assert stats.snap_to_zero(noisy).tolist() == [0.0, 0.0, 0.0, 0.125, -0.5]
    assert str(stats.snap_to_zero(noisy)[0].item()) == "0.0"  # not -0.0


def test_a_rate_record_keeps_the_digits_its_count_resolves_and_the_hand_wilson_interval():
    record = stats.rate_record(1985, 2000)
    low, high = hand_wilson(1985, 2000)
    assert record == {"correct": 1985, "n": 2000, "accuracy": 0.9925, "low": round(low, 4), "high": round(high, 4)}
    assert record["low"] == 0.9877 and record["high"] == 0.9954
    assert stats.rate_record(1, 3)["accuracy"] == 0.33  # not 0.3333333333333333
    for n in (3, 7, 59, 1045, 2000, 193580):  # neighbouring counts stay apart after rounding
        digits = stats.count_decimals(n)
        assert len({round(k / n, digits) for k in range(n + 1)}) == n + 1 and 10 ** digits >= n


def test_evaluate_prints_each_pool_with_its_interval_and_rounds_its_json(capsys):
    import json

    from compose_lens import cli

    assert cli.main(["evaluate", "paper", "--pool-size", "40", "--json", "--quiet"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert set(printed["pool_intervals"]) == set(printed["pools"])
    for name, record in printed["pool_intervals"].items():
        assert record["n"] == 40 and printed["pools"][name] == record["accuracy"] == round(record["correct"] / 40, 2)
        low, high = hand_wilson(record["correct"], 40)
        assert (record["low"], record["high"]) == (round(low, 2), round(high, 2))
        assert record["low"] <= record["accuracy"] <= record["high"] and record["high"] - record["low"] > 0.03
    assert cli.main(["evaluate", "paper", "--pool-size", "40", "--quiet"]) == 0
    table = capsys.readouterr().out
    record = printed["pool_intervals"]["2var_add_restricted"]
    assert (f"2var_add_restricted      {record['accuracy']:.4f} [{record['low']:.4f}, {record['high']:.4f}] "
            f"({record['correct']}/40)") in table


def test_trials_for_half_width_is_the_least_count_that_reaches_the_goal():
    n = stats.trials_for_half_width(0.36, 0.08)
    for count, narrow_enough in ((n, True), (n - 1, False)):
        low, high = stats.wilson_bounds(0.36, count)
        assert bool((high - low) / 2 <= 0.08) == narrow_enough
    assert stats.trials_for_half_width(0.1, 0.08) < n  # a rate near 0 is pinned down by fewer seeds
    with pytest.raises(ValueError, match="half-width"):
        stats.trials_for_half_width(0.36, 0.0)
