"""The interchange test reads each cross-type swap against the LOWER of its two same-type
scores, its reference (:mod:`compose_lens.registry.same_mlp.comparisons`, module doc): a model that cannot yet swap
an operand within one type's prompts gets "inconclusive", not "not supported"."""

from __future__ import annotations

import pandas as pd

from compose_lens.registry.same_mlp import comparisons as same_mlp
from compose_lens.training.subject import load_model


def interchange_table(same: dict[str, float], cross: dict[str, float], half_width: float = 0.04) -> pd.DataFrame:
    """A table as :func:`same_mlp.interchange_table` writes it: the given accuracies on both
    sides, and controls at chance."""
    rows = []
    for side in ("left", "right"):
        for kind, values in (("same", same), ("cross", cross)):
            for condition, value in values.items():
                rows.append({"test": "interchange", "side": side, "condition": condition, "kind": kind,
                             "value": value, "ci_low": max(value - half_width, 0.0),
                             "ci_high": min(value + half_width, 1.0), "chance": 1 / 59, "isolation": "token"})
        rows.append({"test": "interchange", "side": side, "condition": "random-token donor const->var1",
                     "kind": "control", "value": 0.02, "ci_low": 0.01, "ci_high": 0.04, "chance": 1 / 59,
                     "isolation": "token"})
    return pd.DataFrame(rows)


CROSS = ("const->var1", "var1->const", "const->var2", "var2->const")


def test_a_cross_type_swap_is_read_against_its_weaker_reference():
    """Step 5001 of the study in miniature: const->var2 0.59 against var2->var2 0.575 passes
    (the old rule compared it with const->const 0.985 and failed it)."""
    same = {"const->const": 0.985, "var1->var1": 0.96, "var2->var2": 0.575}
    cross = {**dict.fromkeys(CROSS, 0.97), "const->var2": 0.59}
    judged = same_mlp.judge_interchange(interchange_table(same, cross))
    assert judged["status"] == "passed", judged
    row = [c for c in judged["conditions"] if c["condition"] == "const->var2"][0]
    assert row["reference_condition"] == "var2->var2" and row["reference"] == 0.575


def test_a_weak_reference_is_inconclusive_and_named():
    same = {"const->const": 0.99, "var1->var1": 0.46, "var2->var2": 0.9}
    judged = same_mlp.judge_interchange(interchange_table(same, dict.fromkeys(CROSS, 0.95)))
    assert judged["status"] == "inconclusive", judged
    assert "var1->var1" in judged["reason"] and "weak reference" in judged["reason"]
    blocked = {c["condition"] for c in judged["conditions"] if c["status"] == "inconclusive"}
    assert blocked == {"const->var1", "var1->const"}


def test_a_shortfall_against_a_strong_reference_still_fails():
    """A failure the model's own references earn is kept, even beside a weak ceiling elsewhere."""
    same = {"const->const": 0.99, "var1->var1": 0.3, "var2->var2": 0.95}
    cross = {**dict.fromkeys(CROSS, 0.95), "const->var2": 0.4}
    judged = same_mlp.judge_interchange(interchange_table(same, cross))
    assert judged["status"] == "failed", judged
    assert judged["deciding_condition"] == "const->var2 (left)" and "var2->var2" in judged["reason"]
    tests = {"interchange": judged, "probe_transfer": {"status": "passed"}}
    assert same_mlp.verdict(tests) == "not supported"
    assert same_mlp.verdict_reason(tests).startswith("interchange failed")


def test_the_summary_names_the_deciding_condition_the_lowest_score_and_the_weakest_reference_apart():
    """Step 5001 in miniature: var1->const (0.72) exceeds its reference var1->var1 (0.46), which is
    weak, so var1->const decides (inconclusive) while the lowest score is const->var2 (0.59)."""
    same = {"const->const": 0.985, "var1->var1": 0.46, "var2->var2": 0.575}
    cross = {"const->var1": 0.97, "var1->const": 0.72, "const->var2": 0.59, "var2->const": 0.8}
    judged = same_mlp.judge_interchange(interchange_table(same, cross))
    assert judged["status"] == "inconclusive"
    assert judged["reference_condition"] == judged["weakest_reference_condition"] == "var1->var1 (left)"
    assert judged["reference"] == judged["weakest_reference"] == 0.46
    assert judged["deciding_condition"] in ("const->var1 (left)", "var1->const (left)")
    assert judged["lowest_condition"] == "const->var2 (left)" and judged["lowest_value"] == 0.59
    above = [c for c in judged["conditions"] if c["condition"] == "var1->const" and c["side"] == "left"][0]
    assert above["value"] > above["reference"] and above["share_of_reference"] > 1


def test_a_report_with_the_old_names_is_read_with_the_new():
    """same_mlp.json files written before the rename (``worst_condition``, ``ceiling``, ...) still print."""
    same = {"const->const": 0.985, "var1->var1": 0.46, "var2->var2": 0.575}
    judged = same_mlp.judge_interchange(interchange_table(same, dict.fromkeys(CROSS, 0.9)))
    new = {"tests": {"interchange": judged}, "thresholds": dict(same_mlp.THRESHOLDS)}
    old_names = {v: k for k, v in same_mlp.RENAMED.items()}
    old = {"tests": {"interchange": {**{old_names.get(k, k): v for k, v in judged.items()},
                                     "conditions": [{old_names.get(k, k): v for k, v in c.items()}
                                                    for c in judged["conditions"]]}},
           "thresholds": {"ceiling" if k == "reference_min" else k: v for k, v in same_mlp.THRESHOLDS.items()}}
    assert "worst_condition" in old["tests"]["interchange"] and "ceiling" in old["thresholds"]
    assert same_mlp.upgrade(old) == same_mlp.upgrade(new) == new
    table = same_mlp.verdict_table(old)
    assert table.loc[0, "condition"] == judged["deciding_condition"] and table.loc[0, "reference"] == 0.46


def test_study_step_5001_is_inconclusive(reference_dir):
    """Mid-training the model does not yet answer the variable prompts (1-var left 0.56, 2-var 0.62):
    no test is run, and the verdict says so instead of reading swaps it cannot make."""
    loaded = load_model(reference_dir / "step_5001.pth", bridge=False)
    report = same_mlp.same_mlp_report(loaded, n=400)
    assert report["verdict"] == "inconclusive", report["tests"]
    assert "does not answer the prompts" in report["verdict_reason"] and "1-var left" in report["verdict_reason"]
    assert all(t["status"] == "inconclusive" and t["effect"] is None for t in report["tests"].values())


def probe_table(cross: dict[str, float], reference: float = 0.95, half_width: float = 0.03) -> pd.DataFrame:
    """A table as :func:`same_mlp.probe_table` writes it: both metrics, held-out constants at
    ``reference``, the given cross values, a control at chance."""
    rows = []
    for test in ("probe", "subspace"):
        for kind, values in (("same", {"held-out constants": reference}), ("cross", cross)):
            for condition, value in values.items():
                rows.append({"test": test, "side": "both", "condition": condition, "kind": kind, "value": value,
                             "ci_low": value - half_width, "ci_high": value + half_width, "chance": 1 / 59})
    rows.append({"test": "probe", "side": "both", "condition": "random-token terms (constant prompts)",
                 "kind": "control", "value": 0.02, "ci_low": 0.01, "ci_high": 0.04, "chance": 1 / 59})
    return pd.DataFrame(rows)


def competence(var1_left: float, var1_right: float, var2: float) -> pd.DataFrame:
    return pd.DataFrame({"set": ["var1_left", "var1_right", "var2"], "accuracy": [var1_left, var1_right, var2],
                         "n": 150})


SHORT_RIGHT = {"1-var left": 0.93, "1-var right": 0.2, "2-var": 0.92}


def test_a_probe_shortfall_on_prompts_the_model_cannot_answer_is_inconclusive():
    """A model that answers 1-var right prompts at 0.07 does not yet route that operand: its
    term not looking like a constant's says nothing about the adder."""
    judged = same_mlp.judge_probe(probe_table(SHORT_RIGHT), competence(0.95, 0.07, 0.9))
    assert judged["status"] == "inconclusive", judged
    assert "1-var right 0.070" in judged["reason"] and "1-var left" not in judged["reason"]
    tests = {"interchange": {"status": "passed"}, "feature_transfer": {"status": "passed"}, "probe_transfer": judged}
    assert same_mlp.verdict(tests) == "inconclusive"
    assert "1-var right 0.070" in same_mlp.verdict_reason(tests)


def test_a_probe_shortfall_on_prompts_the_model_answers_still_fails():
    """The same shortfall fails where the model answers those prompts, or where a weak set sits
    beside a failing set the model does answer."""
    assert same_mlp.judge_probe(probe_table(SHORT_RIGHT), competence(0.95, 0.9, 0.9))["status"] == "failed"
    assert same_mlp.judge_probe(probe_table(SHORT_RIGHT))["status"] == "failed"  # no competence: as before
    both_short = {**SHORT_RIGHT, "2-var": 0.3}
    judged = same_mlp.judge_probe(probe_table(both_short), competence(0.95, 0.07, 0.9))
    assert judged["status"] == "failed" and judged["deciding_condition"].startswith("2-var"), judged


def test_a_feature_shortfall_on_prompts_the_model_cannot_answer_is_inconclusive():
    rows = [{"test": "feature transfer", "condition": name, "kind": kind, "units": 12, "mean_damage_const": 0.8,
             "pearson": r, "pearson_low": r - 0.1, "pearson_high": r + 0.1, "null_high": 0.2}
            for name, kind, r in (("const (split half)", "same", 0.95), ("const vs 1-var", "cross", 0.9),
                                  ("const vs 2-var", "cross", 0.1))]
    table = pd.DataFrame(rows)
    assert same_mlp.judge_features(table, competence(0.9, 0.9, 0.9))["status"] == "failed"
    judged = same_mlp.judge_features(table, competence(0.9, 0.9, 0.04))
    assert judged["status"] == "inconclusive" and "2-var 0.040" in judged["reason"], judged


def test_a_probe_failure_on_an_isolation_that_carries_no_constant_is_inconclusive():
    """The probe transfer reads the same isolation's terms as the interchange: where swapping that term
    does not move even a constant operand (const->const below the floor), the variables' terms not
    decoding like the constants' says nothing about the adder (the 3-layer chain models: 0.000)."""
    def tests(const_swap: float) -> dict:
        return {"interchange": {"status": "inconclusive", "const_to_const": const_swap},
                "feature_transfer": {"status": "passed"},
                "probe_transfer": {"status": "failed", "effect": 0.005,
                                   "deciding_condition": "1-var left (probe accuracy)"}}

    carried = same_mlp.reconcile(tests(0.985))
    assert carried["probe_transfer"]["status"] == "failed" and same_mlp.verdict(carried) == "not supported"
    blind = same_mlp.reconcile(tests(0.0))
    assert blind["probe_transfer"]["status"] == "inconclusive" and same_mlp.verdict(blind) == "inconclusive"
    assert "do not carry a constant operand" in same_mlp.verdict_reason(blind)
