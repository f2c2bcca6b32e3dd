"""The ``analyze`` command: the files it writes (with ``fourier``'s), where it lands the same-MLP
report, and that the paper architecture's analyses never import TransformerLens."""

from __future__ import annotations

import json

import pytest

from compose_lens.model import tl
from compose_lens.registry.probes.summary import MEASURE_KEYS


def test_analyze_and_fourier_commands_write_their_files(tiny_config, tmp_path, monkeypatch):
    import pandas as pd
    import torch

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
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # beside its figure worker, analyze computes on one thread: every record says which
    try:
        assert main(["analyze", str(tmp_path / "model"), "--out", str(tmp_path / "analysis"), "--skip-causal"]) == 0
    finally:
        torch.set_num_threads(before)
    summary = json.loads((tmp_path / "analysis" / "summary.json").read_text())
    threads = {json.loads(p.read_text())["torch_threads"] for p in (tmp_path / "analysis").rglob("*.provenance.json")}
    assert threads == {summary["provenance"]["torch_threads"]}
    assert not set(summary) & set(summary["provenance"]), "the record is under 'provenance', once"
    for name, folder in (("frequency_shares", "fourier"), ("readout_fourier", "fourier"),
                         ("embedding_fourier", "fourier"), ("positional_qk", "qk"), ("logit_attribution", "dla")):
        assert (tmp_path / "analysis" / folder / "figures" / f"{name}.png").read_bytes().startswith(b"\x89PNG")
    assert set(MEASURE_KEYS) <= set(summary) and summary["same_mlp"] == {"stand_in": True}
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
