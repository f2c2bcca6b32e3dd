"""A LayerNorm model trained outside compose-lens through ``analyze``, ``same-mlp`` and ``report``.

``same-mlp`` and all of ``analyze`` (even ``--skip-causal``) refused such a model, and the report skipped its
direct-logit-attribution and same-MLP sections. Now every analysis the docs promise reads it through the
TransformerLens hooks: direct logit attribution with the final norm's scale held (a term for the norm's bias),
the edge graph with each receiver's own norm, and the same-MLP tests say ``inconclusive`` with why (the
adder's input is not a sum of operand terms under LayerNorm) instead of refusing. The model is TransformerLens's
random initialisation (the test is about what runs and what it says, not about what a trained model does).
"""

from __future__ import annotations

import json

import pandas as pd

from compose_lens.cli import main
from tests import user_models


def test_a_layernorm_model_through_analyze_same_mlp_and_report(tmp_path, capsys):
    decl = user_models.declaration(query="infix", output="vocab", unused=1)
    folder = user_models.save(user_models.tl_model(decl, normalization_type="LN"), decl, tmp_path / "ln")

    assert main(["analyze", str(folder), "--out", str(tmp_path / "an"), "--quiet"]) == 0
    said = capsys.readouterr().out
    assert "same MLP for constants and variables: inconclusive (the adder's input is not a sum of operand " \
           "terms under LayerNorm" in said
    summary = json.loads((tmp_path / "an" / "summary.json").read_text())
    assert summary["same_mlp"]["verdict"] == "inconclusive"
    attribution = pd.read_csv(tmp_path / "an" / "dla" / "logit_attribution.csv")
    assert "final normalisation bias" in set(attribution["component"])
    for _, group in attribution.groupby("kind"):  # the direct terms add up to the model's own margin
        assert abs(group["contribution"].sum() - group["margin"].iloc[0]) < 1e-3
    assert len(pd.read_csv(tmp_path / "an" / "circuit" / "circuit.csv")) > 0  # the edge graph, with its norms

    assert main(["same-mlp", str(folder), "--out", str(tmp_path / "sm"), "--n", "40", "--quiet"]) == 0
    assert json.loads((tmp_path / "sm" / "same_mlp.json").read_text())["verdict"] == "inconclusive"

    assert main(["report", str(folder), "--out", str(tmp_path / "report.html")]) == 0
    said = capsys.readouterr().out
    page = (tmp_path / "report.html").read_text()
    assert "section skipped" not in said and "Direct logit attribution" in page
    assert "not a sum of operand terms under LayerNorm" in page
