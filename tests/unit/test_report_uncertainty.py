"""The report prints what it found with its uncertainty. The circuit section: the ROC-AUC with
its interval, the circuit's size with its interval (or, where every resample agrees, that it does rather than a
zero-width one), and each pool's number of prompt pairs beside the share it recovers. The pool accuracies: each
with its interval and count. The modularity rows: no zero-width interval."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from compose_lens.registry.analysis import Result
from compose_lens.registry.circuit import CIRCUIT, _circuit_section
from compose_lens.report.page import Report

FOUND = Path(__file__).resolve().parents[2] / "experiments" / "results" / "circuit" / "eap_ig_paper"


def _section(summary: dict) -> str:
    """The section of a result read back from the committed files, its figure drawn by its declaration (as the
    one door reads one: :func:`compose_lens.report.context.read`)."""
    settings = {"pairs": 300, "target": 0.95}
    result = Result(tables={"circuit": pd.read_csv(FOUND / "circuit.csv"),
                            "circuit_pools": pd.read_csv(FOUND / "circuit_pools.csv")},
                    documents={"circuit": summary})
    result.figures += CIRCUIT.draw(None, result, settings)
    return _circuit_section(SimpleNamespace(report=Report(None)), result, settings)


def test_the_section_prints_the_roc_auc_and_the_size_with_their_intervals_and_each_pools_pairs():
    summary = json.loads((FOUND / "circuit.json").read_text())
    text = _section(summary)
    assert "ROC-AUC against the paper&#x27;s labelled circuit 0.96 [0.85, 1.00] (95 % bootstrap over the 16 edges)" in text
    assert "12 (every bootstrap resample of the pairs needs the same 12" in text  # committed: [12, 12]
    assert "[12, 12]" not in text
    assert "<th>prompt pairs</th>" in text and '<td>0var_train</td><td class="num">492</td>' in text

    wider = _section({**summary, "circuit_edges_ci95": [11, 13]})
    assert "12 [11, 13] (95 % bootstrap over the pairs" in wider


def test_the_reports_pool_table_gives_each_pools_interval_and_count():
    """The report's pool accuracies read as ``evaluate`` prints them: the accuracy, its Wilson interval and
    correct / sequences (they were bare accuracies, no n, no interval)."""
    from compose_lens import report
    from compose_lens.training.subject import load_subject

    subject = load_subject("paper", bridge=False)
    page = report.pool_accuracy_table(subject)
    assert "<th>accuracy [95 % Wilson interval]</th><th>correct / sequences</th>" in page
    rows = re.findall(r"<tr><td>(\w+)</td><td>([0-9.]+) \[([0-9.]+), ([0-9.]+)\]</td><td>(\d+) / (\d+)</td></tr>", page)
    assert len(rows) == 9
    for _, accuracy, low, high, correct, n in rows:
        assert float(low) <= float(accuracy) <= float(high) and int(n) == subject.config.train.pool_size
        assert abs(float(accuracy) - int(correct) / int(n)) < 1e-4


def test_the_modularity_rows_say_when_every_resample_agrees_instead_of_a_zero_width_interval():
    """The report showed the circuit fraction as 0.750 [0.750, 0.750]: where every resample gives the value,
    the row says so; a real interval is printed as it is."""
    from compose_lens.registry.modularity import _shown

    row = {"modularity_circuit_fraction": 0.75, "modularity_circuit_fraction_low": 0.75,
           "modularity_circuit_fraction_high": 0.75, "modularity_separation": 0.93,
           "modularity_separation_low": 0.927, "modularity_separation_high": 0.932}
    assert _shown(row, "modularity_circuit_fraction", True) == "0.750 (every bootstrap resample gives it)"
    assert _shown(row, "modularity_separation", True) == "0.930 [0.927, 0.932]"
