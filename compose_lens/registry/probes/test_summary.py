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


def test_analyze_and_fourier_commands_write_their_files(tiny_config, tmp_path, monkeypatch):
    import pandas as pd

    from compose_lens.cli import main
    from compose_lens.training.runs import save_model

    from compose_lens.core import cores

    from compose_lens.registry.same_mlp import comparisons as same_mlp

    # the same-MLP report is its own module's to test; here a stand-in shows where it lands
    monkeypatch.setattr(same_mlp, "same_mlp_run", lambda *a, **k: ({}, {"stand_in": True}))
    monkeypatch.setattr(cores, "threads_now", lambda: 2)  # two free cores: analyze draws in a worker

    save_model(tl.boot(tiny_config.model), tiny_config, tmp_path / "model")
    assert main(["fourier", str(tmp_path / "model"), "--out", str(tmp_path / "fourier")]) == 0
    assert (tmp_path / "fourier" / "figures" / "frequency_shares.png").exists()
    assert main(["analyze", str(tmp_path / "model"), "--out", str(tmp_path / "analysis"), "--skip-causal"]) == 0
    summary = json.loads((tmp_path / "analysis" / "summary.json").read_text())
    for name, folder in (("frequency_shares", "fourier"), ("readout_fourier", "fourier"),
                         ("embedding_fourier", "fourier"), ("positional_qk", "qk"), ("logit_attribution", "dla")):
        assert (tmp_path / "analysis" / folder / "figures" / f"{name}.png").read_bytes().startswith(b"\x89PNG")
    assert REQUIRED <= set(summary) and summary["same_mlp"] == {"stand_in": True}
    assert isinstance(summary["key_frequencies"], list)
    assert summary["provenance"]["config"] == tiny_config.to_dict()
    neurons = pd.read_csv(tmp_path / "analysis" / "fourier" / "neuron_frequencies.csv", comment="#")
    assert len(neurons) == tiny_config.model.d_mlp
    # one provenance format: a JSON beside each CSV, so pandas reads the CSV as it is
    identity = pd.read_csv(tmp_path / "analysis" / "qk" / "variable_identity.csv")
    assert list(identity.columns) == ["query_variable", *tiny_config.task.variable_names]
    record = json.loads((tmp_path / "analysis" / "qk" / "variable_identity.provenance.json").read_text())
    assert record["seed"] == 0 and record["config"] == tiny_config.to_dict() and record["code_version"]


@pytest.mark.parametrize("changes, needs_hooks", [({}, False), (dict(n_heads=2, d_head=16), True)])
def test_analyze_boots_transformerlens_only_where_an_analysis_needs_hooks(tiny_config, tmp_path, changes,
                                                                          needs_hooks):
    """The paper architecture's analyses run on the fast forwards (``subject.for_analyses``): ``analyze``
    never imports TransformerLens for it, and does for a two-head model, whose analyses read hooks."""
    import subprocess
    import sys

    from compose_lens.training.runs import save_model

    config = tiny_config.replace(model=tiny_config.model.replace(**changes))
    save_model(tl.boot(config.model), config, tmp_path / "m")
    code = ("import sys; from compose_lens.cli import main; "
            f"rc = main(['analyze', {str(tmp_path / 'm')!r}, '--out', {str(tmp_path / 'a')!r}, '--quiet']); "
            "print(rc, 'transformer_lens' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip().splitlines()[-1] == f"0 {needs_hooks}", out.stderr[-2000:]
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["key_frequencies"] is not None
