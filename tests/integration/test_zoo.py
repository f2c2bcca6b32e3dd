"""The verdict zoo's fast subset (experiments/zoo.py score --fast; issue 53): on models whose mechanism is
known, no negative gets "supported", "modular" or a located binder or router, and the planted decoys are
told from the heads they copy. The whole zoo and its scorecard: experiments/results/zoo, docs/zoo.md."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.planted import takes_the_papers_gate

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def zoo():
    sys.path.insert(0, str(ROOT / "experiments"))
    spec = importlib.util.spec_from_file_location("zoo", ROOT / "experiments" / "zoo.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["zoo"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def verdicts(zoo, tmp_path_factory):
    """The fast subset's verdicts. A planted model that gives the paper model's answers takes the paper's
    exhaustive accuracies (tests/planted.py): the scores read them as the full evaluation would."""
    load = zoo.load

    def planted_on_the_papers_gate(entry, paper):
        subject, known = load(entry, paper)
        if entry.how == "planted":
            takes_the_papers_gate(subject, paper)
        return subject, known

    out = tmp_path_factory.mktemp("zoo")
    fast = tuple(e for e in zoo.ENTRIES if e.fast)
    zoo.load = planted_on_the_papers_gate
    try:
        zoo.score(fast, with_modularity=False, write_null=False, out=out, with_heads=False)
    finally:
        zoo.load = load
    import pandas as pd
    return pd.read_csv(out / "verdicts.csv").set_index("model")


def test_the_fast_subset_holds_every_kind_of_negative(verdicts):
    assert {"stalled", "no-binding", "outside", "planted"} <= set(verdicts["class"])
    assert (verdicts["truth_same_mlp"] == "no").sum() >= 1 and (verdicts["truth_router"] == "none").sum() >= 5


def test_no_negative_is_supported_or_modular(verdicts):
    negatives = verdicts[verdicts["truth_same_mlp"].isin(["no", "untestable"])]
    assert (negatives["same_mlp"] != "supported").all(), negatives[["same_mlp", "same_mlp_reason"]]
    assert (negatives["modularity"] != "modular").all()
    # a model that cannot do what the test reads is inconclusive, not "not supported"
    assert (verdicts.loc[verdicts["truth_same_mlp"] == "untestable", "same_mlp"] == "inconclusive").all()


@pytest.mark.parametrize("role", ["binder", "router"])
def test_no_role_is_named_in_a_model_without_it(verdicts, role):
    absent = verdicts[verdicts[f"truth_{role}"] == "none"]
    assert (absent[f"located_{role}"] == "none").all(), absent[[f"located_{role}", f"why_{role}"]]


def test_the_planted_roles_are_found_where_they_were_put(verdicts):
    known = verdicts[verdicts["class"] == "planted"]
    for role in ("binder", "router"):
        has = known[known[f"truth_{role}"] != "none"]
        assert (has[f"located_{role}"] == has[f"truth_{role}"]).all(), has[[f"located_{role}", f"truth_{role}"]]
