"""The report's circuit section prints what the circuit command found with its uncertainty: the ROC-AUC with
its interval, the circuit's size with its interval (or, where every resample agrees, that it does rather than a
zero-width one), and each pool's number of prompt pairs beside the share it recovers."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from compose_lens.registry.analysis import Result
from compose_lens.registry.circuit import _circuit_section
from compose_lens.report.page import Report

FOUND = Path(__file__).resolve().parents[2] / "experiments" / "results" / "circuit" / "eap_ig_paper"


def _section(summary: dict) -> str:
    result = Result(tables={"circuit": pd.read_csv(FOUND / "circuit.csv"),
                            "circuit_pools": pd.read_csv(FOUND / "circuit_pools.csv")},
                    documents={"circuit": summary})
    return _circuit_section(SimpleNamespace(report=Report(None)), result, {"pairs": 300, "target": 0.95})


def test_the_section_prints_the_roc_auc_and_the_size_with_their_intervals_and_each_pools_pairs():
    summary = json.loads((FOUND / "circuit.json").read_text())
    text = _section(summary)
    assert "ROC-AUC against the paper&#x27;s labelled circuit 0.96 [0.85, 1.00] (95 % bootstrap over the 16 edges)" in text
    assert "12 (every bootstrap resample of the pairs needs the same 12" in text  # committed: [12, 12]
    assert "[12, 12]" not in text
    assert "<th>prompt pairs</th>" in text and '<td>0var_train</td><td class="num">492</td>' in text

    wider = _section({**summary, "circuit_edges_ci95": [11, 13]})
    assert "12 [11, 13] (95 % bootstrap over the pairs" in wider
