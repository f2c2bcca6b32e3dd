"""The DAS analysis's tests: counterfactual binding pairs, the subspace found at the value token and not at the
placebo site, the committed table's settings on docs/methods.md, the command's refusals and files."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from compose_lens.cli import main
from compose_lens.data.task import decode
from compose_lens.registry.das import search as das

ROOT = Path(__file__).resolve().parents[3]


def test_binding_pairs_are_counterfactual(tiny_split):
    """Base and source query the same variable on the same side with another value and another
    constant; the target is the source's value plus the base's constant; the positions point at
    the queried variable's value and at the query's variable token."""
    task = tiny_split.task
    pairs = das.binding_pairs(tiny_split, 60, seed=3)
    assert len(pairs) == 60
    for i in range(len(pairs)):
        base, source = decode(task, pairs.base[i].tolist()), decode(task, pairs.source[i].tolist())
        left = isinstance(base.lhs, str)
        assert base.type == source.type and base.type in ("1var_left", "1var_right")
        variable = base.lhs if left else base.rhs
        assert variable == (source.lhs if left else source.rhs)
        b_value, b_const = (base.x, base.y) if left else (base.y, base.x)
        s_value, s_const = (source.x, source.y) if left else (source.y, source.x)
        assert s_value != b_value and s_const != b_const
        assert int(pairs.target[i]) == (s_value + b_const) % task.modulus
        for tokens, pos, value in ((pairs.base[i], pairs.base_value_pos[i], b_value),
                                   (pairs.source[i], pairs.source_value_pos[i], s_value)):
            assert int(tokens[pos]) == value
            assert int(tokens[pos - 1]) == task.first_var_token + task.var_index(variable)
        assert int(pairs.base[i, pairs.base_query_pos[i]]) == task.first_var_token + task.var_index(variable)


@pytest.fixture(scope="module")
def paper():
    from compose_lens.training.subject import load_model

    return load_model("paper")


def test_das_finds_the_bound_value_and_not_at_the_placebo_site(paper):
    """On the paper model, the subspace DAS learns at the value token carries the bound value
    (interchanging it makes the model answer source value + base constant) far more often than a
    random subspace of the same rank; at the query's variable token (the placebo site) it does not."""
    pairs = das.correct_pairs(paper.model, das.binding_pairs(paper.split, 240, seed=0))
    train, test = pairs.subset(torch.arange(160)), pairs.subset(torch.arange(160, len(pairs)))
    value_site, placebo = (next(s for s in das.SITES if s.name == name)
                           for name in ("value_after_layer1", "query_variable_after_layer1"))
    learned, losses = das.fit_binding_subspace(paper.model, value_site, train, rank=32, epochs=8)
    assert losses[-1] < losses[0]
    found = das.interchange_accuracy(paper.model, value_site, learned, test)["iia"]
    random = das.interchange_accuracy(paper.model, value_site, torch.linalg.qr(torch.randn(128, 32))[0], test)["iia"]
    assert found > 0.6 and found > random + 0.5, (found, random)
    fitted, _ = das.fit_binding_subspace(paper.model, placebo, train, rank=32, epochs=3)
    assert das.interchange_accuracy(paper.model, placebo, fitted, test)["iia"] < 0.05


def test_methods_page_gives_the_das_settings_of_the_committed_table():
    """docs/methods.md's commands and table name the ranks, pairs and epochs the committed data was made with."""
    import re

    page = (ROOT / "docs" / "methods.md").read_text()
    made = {json.dumps(json.loads(p.read_text())["settings"], sort_keys=True)
            for p in (ROOT / "experiments" / "results" / "methods").glob("das_*.json")}
    assert len(made) == 1, "the committed DAS results were made with different settings"
    settings = json.loads(made.pop())
    commands = re.findall(r"^compose-lens das .*$", page, re.M)
    assert commands
    for command in commands:
        ranks = re.search(r"--ranks ((?:\d+ ?)+)", command)
        assert ranks and [int(r) for r in ranks.group(1).split()] == settings["ranks"], command
        assert f"--n-pairs {settings['n_pairs']}" in command and f"--epochs {settings['epochs']}" in command, command
    ranks = ", ".join(map(str, settings["ranks"]))
    assert f"{settings['n_pairs']} pairs drawn, {settings['epochs']} epochs, ranks {ranks};" in page
    assert "rank " + " / ".join(map(str, settings["ranks"])) in page


def test_das_refuses_a_model_in_train_mode(paper):
    """TransformerLens's fit_das needs eval mode; the loaded model has it (a model put in train
    mode is refused by TransformerLens, not silently run with training behaviour)."""
    pairs = das.binding_pairs(paper.split, 40, seed=0)
    paper.model.train()
    try:
        with pytest.raises(ValueError, match="eval"):
            das.fit_binding_subspace(paper.model, das.SITES[0], pairs, rank=2, epochs=1)
    finally:
        paper.model.eval()


def test_das_cli_refuses_bad_input_in_one_line(tmp_path, capsys):
    out = tmp_path / "das"
    assert main(["das", "paper", "--out", str(out), "--ranks", "0"]) == 2
    assert main(["das", "paper", "--out", str(out), "--n-pairs", "5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "--ranks 0" in err[0] and "--n-pairs 5" in err[1]
    assert not out.exists()


def test_the_das_command_writes_its_files_quietly(tmp_path, capsys):
    das_out = tmp_path / "das"
    assert main(["das", "paper", "--out", str(das_out), "--ranks", "2", "--n-pairs", "60", "--epochs", "1",
                 "--sites", "value_after_layer1", "query_variable_after_layer1", "--quiet"]) == 0
    assert "das 0/2" not in capsys.readouterr().err  # --quiet: no bar
    table = pd.read_csv(das_out / "das.csv")
    assert set(table["site"]) == {"value_after_layer1", "query_variable_after_layer1"}
    assert set(table["control"]) == {"learned", "random subspace", "arbitrary labels"}
    assert json.loads((das_out / "das.json").read_text())["pairs_drawn"] == 60
    assert (das_out / "figures" / "das.png").stat().st_size > 0


def test_the_das_sites_the_command_offers_are_the_ones_das_searches():
    """config.DAS_SITES names the sites for the command line without torch; search.py defines them."""
    from compose_lens.core.config import DAS_SITES

    assert das.SITE_NAMES == DAS_SITES
