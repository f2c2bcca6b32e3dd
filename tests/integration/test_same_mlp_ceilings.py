"""The interchange test reads each cross-type swap against the LOWER of its two same-type
ceilings (:mod:`compose_lens.analysis.same_mlp`, module doc): a model that cannot yet swap
an operand within one type's prompts gets "inconclusive", not "not supported"."""

from __future__ import annotations

import pandas as pd

from compose_lens.analysis import same_mlp
from compose_lens.runs import load_model


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


def test_a_cross_type_swap_is_read_against_its_weaker_ceiling():
    """Step 5001 of the study in miniature: const->var2 0.59 against var2->var2 0.575 passes
    (the old rule compared it with const->const 0.985 and failed it)."""
    same = {"const->const": 0.985, "var1->var1": 0.96, "var2->var2": 0.575}
    cross = {**dict.fromkeys(CROSS, 0.97), "const->var2": 0.59}
    judged = same_mlp.judge_interchange(interchange_table(same, cross))
    assert judged["status"] == "passed", judged
    row = [c for c in judged["conditions"] if c["condition"] == "const->var2"][0]
    assert row["ceiling_condition"] == "var2->var2" and row["ceiling"] == 0.575


def test_a_weak_ceiling_is_inconclusive_and_named():
    same = {"const->const": 0.99, "var1->var1": 0.46, "var2->var2": 0.9}
    judged = same_mlp.judge_interchange(interchange_table(same, dict.fromkeys(CROSS, 0.95)))
    assert judged["status"] == "inconclusive", judged
    assert "var1->var1" in judged["reason"] and "weak ceiling" in judged["reason"]
    blocked = {c["condition"] for c in judged["conditions"] if c["status"] == "inconclusive"}
    assert blocked == {"const->var1", "var1->const"}


def test_a_shortfall_against_a_strong_ceiling_still_fails():
    """A failure the model's own ceilings earn is kept, even beside a weak ceiling elsewhere."""
    same = {"const->const": 0.99, "var1->var1": 0.3, "var2->var2": 0.95}
    cross = {**dict.fromkeys(CROSS, 0.95), "const->var2": 0.4}
    judged = same_mlp.judge_interchange(interchange_table(same, cross))
    assert judged["status"] == "failed", judged
    assert judged["worst_condition"] == "const->var2 (left)" and "var2->var2" in judged["reason"]
    tests = {"interchange": judged, "probe_transfer": {"status": "passed"}}
    assert same_mlp.verdict(tests) == "not supported"
    assert same_mlp.verdict_reason(tests).startswith("interchange failed")


def test_study_step_5001_is_inconclusive(reference_dir):
    """Mid-training the model cannot yet swap a 1-var operand within 1-var prompts (left,
    var1->var1 0.46): the cross-type swaps through it test nothing."""
    loaded = load_model(reference_dir / "step_5001.pth", bridge=False)
    report = same_mlp.same_mlp_report(loaded.model, loaded.config, loaded.split, n=400)
    interchange = report["tests"]["interchange"]
    assert report["verdict"] == "inconclusive", report["tests"]
    assert interchange["status"] == "inconclusive"
    assert interchange["ceiling"] < same_mlp.THRESHOLDS["ceiling"]
    assert "var1->var1 (left)" in interchange["reason"] and "var1->var1 (left)" in report["verdict_reason"]
    assert not any(c["status"] == "failed" for c in interchange["conditions"])
