"""``patch`` and ``circuit`` with ``--pairs FILE`` and ``--metric`` on the paper model: the files
they write read the user's pairs in the chosen metric (the faults of a pairs file are in
test_bad_input.py)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from compose_lens.cli import main

PAIRS = [("b=7, e=5, b+23=?", "b=9, e=5, b+23=?"), ("c=3, a=40, 4+c=?", "c=8, a=40, 4+c=?"),
         ("d=11, 30+d=?", "d=11, 31+d=?"), ("b=2, c=50, b+c=?", "b=2, c=51, b+c=?")]


@pytest.fixture
def pairs_file(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps({"clean": c, "corrupted": x}) + "\n" for c, x in PAIRS))
    return path


SCALE_WORDS = {"logit_diff": "logit difference", "prob": "probability of the clean answer", "accuracy": "accuracy"}


@pytest.fixture
def colour_bar_labels(monkeypatch) -> list[str]:
    """The colour-bar labels of every figure the command saves (the PNG holds no text to read)."""
    from compose_lens.views import drawing

    labels, save = [], drawing.save

    def keep_labels(fig, *args, **kwargs):
        labels.extend(ax.get_ylabel() for ax in fig.axes[1:] if ax.get_ylabel())
        return save(fig, *args, **kwargs)

    monkeypatch.setattr(drawing, "save", keep_labels)
    return labels


@pytest.mark.parametrize("metric", ["logit_diff", "prob", "accuracy"])
def test_patch_reads_the_users_pairs_in_each_metric(pairs_file, tmp_path, metric, capsys, colour_bar_labels):
    out = tmp_path / metric
    assert main(["patch", "paper", "--pairs", str(pairs_file), "--metric", metric, "--out", str(out), "--quiet"]) == 0
    # the figure's scale names the metric it shows (it said "logit difference" under every metric)
    assert colour_bar_labels == [f"normalised {SCALE_WORDS[metric]} (0: corrupted, 1: clean)"]
    said = capsys.readouterr().out
    assert "4 pairs from your pairs file" in said
    table = pd.read_csv(out / "patching.csv")
    settings = json.loads((out / "patching.provenance.json").read_text())["settings"]
    assert settings["metric"] == metric and settings["pairs"] == str(pairs_file)
    assert (table["n_pairs"] == 4).all() and (table["corruption"] == "user").all()
    assert {metric, f"clean_{metric}", f"corrupted_{metric}"} <= set(table.columns)
    # every clean prompt is answered right, no corrupted one gives the clean answer
    if metric != "logit_diff":
        assert table[f"clean_{metric}"].iloc[0] > 0.95 and table[f"corrupted_{metric}"].iloc[0] < 0.05
    answer = table[(table.component == "resid_post") & (table.block == 1) & (table.role == "=")]
    assert answer["mean"].iloc[0] == pytest.approx(1.0, abs=1e-5)  # the whole last stream: the clean run


def test_circuit_scores_edges_on_the_users_pairs(pairs_file, tmp_path, capsys, colour_bar_labels):
    out = tmp_path / "circuit"
    assert main(["circuit", "paper", "--pairs", str(pairs_file), "--method", "exact", "--metric", "prob",
                 "--out", str(out), "--quiet"]) == 0
    assert [label.replace("\n", " ") for label in colour_bar_labels] == [
        "|edge score| (share of the probability of the clean answer; sqrt scale)"]
    settings = json.loads((out / "circuit.provenance.json").read_text())["settings"]
    assert settings["pairs"] == str(pairs_file) and settings["metric"] == "prob" and settings["method"] == "exact"
    assert json.loads((out / "circuit.json").read_text())["n_pairs"] == 4
    pools = pd.read_csv(out / "circuit_pools.csv")
    assert {"prob_clean", "prob_corrupted"} <= set(pools.columns) and len(pools) == 9
    edges = pd.read_csv(out / "circuit.csv")
    assert len(edges) == 16 and edges["score"].abs().max() > 0.5
