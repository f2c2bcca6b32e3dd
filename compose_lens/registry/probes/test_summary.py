"""circuit_measures / circuit_summary: the keys the dynamics tools read, determinism, the study's model."""

from __future__ import annotations

import json
import math

import pytest

from compose_lens.registry.probes.summary import MEASURE_KEYS, circuit_measures, circuit_summary, measure_inputs
from compose_lens.model import tl
from compose_lens.training.subject import Subject

REQUIRED = {"prev_token_weight_score", "prev_token_attention_score", "prev_token_probe_accuracy",
            "equals_to_operands_score", "variable_identity_score", "equals_to_values_score",
            "ov_mlp_addition_accuracy", "key_frequency_strength", "restricted_loss", "excluded_loss"}


def test_circuit_measures_keys_ranges_and_determinism(tiny_config, tiny_split):
    model = tl.boot(tiny_config.model)
    first = circuit_measures(Subject(model, tiny_config, tiny_split, "test"), n=180, seed=3)
    assert REQUIRED <= set(first) and list(first) == list(MEASURE_KEYS)
    for key, value in first.items():
        assert isinstance(value, float) and math.isfinite(value), key
        if key.endswith(("score", "accuracy", "strength")):
            assert 0.0 <= value <= 1.0, key
    assert circuit_measures(Subject(model, tiny_config, tiny_split, "test"), n=180, seed=3) == first


def test_measures_from_inputs_rendered_once_are_the_same_numbers(tiny_config, tiny_split):
    """The dynamics loop renders the probe batch and the grid once; that changes nothing, and
    inputs of another seed (other sequences) are refused rather than silently used."""
    model = tl.boot(tiny_config.model)
    fresh = circuit_measures(Subject(model, tiny_config, tiny_split, "test"), n=180, seed=3)
    assert circuit_measures(Subject(model, tiny_config, tiny_split, "test"), n=180, seed=3,
                            inputs=measure_inputs(tiny_split, 180, 3)) == fresh
    other = measure_inputs(tiny_split, 180, 4)
    assert not (other.probe_tokens.shape == measure_inputs(tiny_split, 180, 3).probe_tokens.shape
                and (other.probe_tokens == measure_inputs(tiny_split, 180, 3).probe_tokens).all())
    with pytest.raises(ValueError, match="seed=4"):
        circuit_measures(Subject(model, tiny_config, tiny_split, "test"), n=180, seed=3, inputs=other)


def test_circuit_summary_is_json_and_records_its_provenance(tiny_config, tiny_split):
    summary = circuit_summary(Subject(tl.boot(tiny_config.model), tiny_config, tiny_split, "test"), seed=1, n=180)
    text = json.dumps(summary)
    assert REQUIRED <= set(summary)
    assert isinstance(summary["key_frequencies"], list)
    assert summary["seed"] == 1 and summary["config"] == tiny_config.to_dict() and summary["code_version"]
    assert json.loads(text)["n_sequences"] == 180


def test_reference_measures_find_the_whole_circuit(reference_final):
    m = circuit_measures(reference_final)
    # measured on final.pth: every routing score 1.0, OV accuracy 0.998, strength 0.83,
    # restricted loss ~1e-10 < grid loss 0.017 < excluded loss 0.033 << all keys excluded 11.4
    for key in ("prev_token_weight_score", "prev_token_attention_score", "prev_token_probe_accuracy",
                "equals_to_operands_score", "variable_identity_score", "equals_to_values_score",
                "ov_mlp_addition_accuracy"):
        assert m[key] >= 0.9, key
    assert m["key_frequency_strength"] > 0.6
    assert 1 <= m["n_key_frequencies"] <= 10
    assert m["restricted_loss"] <= m["grid_loss"] < m["excluded_loss"] < m["excluded_loss_all"]


def test_an_untrained_model_scores_low(tiny_config, tiny_split):
    m = circuit_measures(Subject(tl.boot(tiny_config.model), tiny_config, tiny_split, "test"), n=180)
    assert m["ov_mlp_addition_accuracy"] < 0.5
    assert m["equals_to_values_score"] < 0.5
