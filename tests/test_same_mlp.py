"""The same-MLP test: a JSON report whose conclusion follows from its numbers; on the study's
model, the MLP2 input of a variable operand is that of the matching constant."""

from __future__ import annotations

import json

import pytest

from compose_lens.analysis import same_mlp
from compose_lens.model import tl


def test_report_is_json_and_the_verdict_follows_the_checks(tiny_config, tiny_split):
    report = same_mlp.same_mlp_report(tl.boot(tiny_config.model), tiny_config, tiny_split,
                                      n_prompts=40, pool_size=40)
    json.dumps(report)
    checks = report["conclusion"]["checks"]
    all_pass = all(c["passed"] for c in checks.values())
    assert report["conclusion"]["verdict"].startswith("supported") == all_pass
    if not checks["causal_patching"]["passed"]:
        assert report["conclusion"]["verdict"].startswith("not supported")


@pytest.fixture(scope="module")
def reference_report(reference_final):
    loaded = reference_final
    return same_mlp.same_mlp_report(loaded.model, loaded.config, loaded.split, n_prompts=200, pool_size=200)


def test_reference_matched_mlp_inputs_are_closer_than_mismatched(reference_report):
    for side in ("left", "right"):
        cos = reference_report["cosine"][side]
        assert cos["raw"]["matched"] > cos["raw"]["mismatched"] + 0.2
        assert cos["centred"]["matched"] > cos["centred"]["mismatched"] + 0.2


def test_reference_mlp_input_patch_preserves_and_transfers_the_answer(reference_report):
    for key, result in reference_report["patching"].items():
        if key.startswith("mlp_in/"):
            assert result["matched_accuracy"] > 0.9, key
            assert result["mismatched_follows_donor"] > 0.8, key


def test_reference_ov_circuit_predicts_layer2_attention(reference_report):
    for name, fit in reference_report["ov_prediction"].items():
        assert fit["cosine"] > 0.8, name


def test_reference_key_frequency_ablation_hurts_all_pools(reference_report):
    pools = reference_report["ablation"]["pools"]
    assert reference_report["ablation"]["key_frequencies"]
    for name in ("0var", "1var", "2var"):
        assert pools[name]["all_key_directions"] > 0.3, name
