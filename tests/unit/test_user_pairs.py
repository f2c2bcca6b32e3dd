"""Your own prompt pairs and metric: files and Python objects read into the pairs the engines
already take, the same numbers as the generated pairs through the same engine, and each metric
computed as it says (data/pairs.py, analysis/metrics.py)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from compose_lens.registry.circuit import discovery as C
from compose_lens.analysis import metrics
from compose_lens.data import pairs as prompt_pairs
from compose_lens.core.errors import ComposeLensError
from compose_lens.data.pairs import as_prompt_pairs, read_pairs
from compose_lens.data.task import parse_sequence, to_token_string
from compose_lens.model import tl
from compose_lens.registry.patching import tables
from compose_lens.training.subject import Subject


@pytest.fixture
def tiny_model(tiny_config):
    torch.manual_seed(0)
    return tl.boot(tiny_config.model)


@pytest.fixture(scope="module")
def paper():
    from compose_lens.training.subject import load_model

    return load_model("paper")


def _ids(tokens) -> str:
    return " ".join(str(t) for t in tokens)


# -- reading pairs ---------------------------------------------------------------------------------


def test_every_form_of_a_sequence_reads_to_the_same_tokens(tiny_task, tmp_path):
    short, short_other = "b=3, e=1, b+2=?", "b=4, e=1, b+2=?"
    tokens, other = parse_sequence(tiny_task, short), parse_sequence(tiny_task, short_other)
    csv_file = tmp_path / "pairs.csv"
    csv_file.write_text("clean,corrupted,clean_answer\n"
                        f'"{short}","{short_other}",5\n'
                        f"{to_token_string(tiny_task, tokens)},{_ids(other)},5\n")
    jsonl_file = tmp_path / "pairs.jsonl"
    jsonl_file.write_text(json.dumps({"clean": tokens, "corrupted": short_other, "corrupted_answer": 6}) + "\n\n"
                          + json.dumps({"clean": _ids(tokens), "corrupted": other}) + "\n")
    for path in (csv_file, jsonl_file):
        pairs = read_pairs(tiny_task, path)
        assert pairs.clean.tolist() == [tokens, tokens] and pairs.corrupted.tolist() == [other, other]
        assert pairs.answers.tolist() == [[5, 6], [5, 6]] and pairs.corruption == "user"
    from_python = as_prompt_pairs(tiny_task, [(torch.tensor(tokens), torch.tensor(other)), (short, other)])
    assert from_python.clean.tolist() == [tokens, tokens] and from_python.answers.tolist() == [[5, 6], [5, 6]]
    # a DataFrame as pandas reads a CSV: numpy integers, an answer column with a gap (floats and NaN)
    frame = pd.DataFrame({"clean": [short, short], "corrupted": [short_other, short_other],
                          "clean_answer": [5, None], "corrupted_answer": pd.array([6, 6], dtype="int64")})
    assert as_prompt_pairs(tiny_task, frame).answers.tolist() == [[5, 6], [5, 6]]
    frame.loc[1, "clean_answer"] = 4.0
    with pytest.raises(ComposeLensError, match="pairs row 1: clean_answer is 4, but the task's answer"):
        as_prompt_pairs(tiny_task, frame)


def test_the_shipped_example_file_reads():
    """experiments/pairs_example.csv, the file docs/circuit-discovery.md runs: its answers agree."""
    from pathlib import Path

    from compose_lens.core.config import TaskConfig

    example = Path(__file__).resolve().parents[2] / "experiments" / "pairs_example.csv"
    pairs = read_pairs(TaskConfig(), example)
    assert len(pairs) == 8 and pairs.clean_labels.tolist() == pd.read_csv(example)["clean_answer"].tolist()


@pytest.mark.parametrize("text,says", [
    ("clean,other\n", "line 1: no column 'corrupted'"),
    ('clean,corrupted\n"b=3, b+2=?","b=4, b+2=?"\n"b=3, b+q=?","b=4, b+2=?"\n', "line 3: the clean sequence"),
    ('clean,corrupted\n"b=3, b+2=?","9 9 9 9 9 9 9 9 10 3 9 9 7 10 2 99"\n', "token 99 is outside the vocabulary"),
    ('clean,corrupted\n"b=3, b+2=?","9 9 9 10 3 9 9 7 10 2 8"\n', "exactly 16 tokens, got 11"),
    ('clean,corrupted,corrupted_answer\n"b=3, b+2=?","b=4, b+2=?",0\n', "corrupted_answer is 0, but the task's answer"),
    ('clean,corrupted\n"b=3, b+2=?","b=2, b+3=?"\n', "line 2: clean and corrupted have the same answer (5)"),
    ('clean,corrupted\n"b=3, b+2=?","b=4, b+2=?"\n', "1 prompt pair, patching needs at least 2"),
])
def test_a_bad_pairs_file_names_its_line_and_the_fix(tiny_task, tmp_path, text, says):
    path = tmp_path / "pairs.csv"
    path.write_text(text)
    with pytest.raises(ComposeLensError, match=says.replace("(", r"\(").replace(")", r"\)")) as caught:
        read_pairs(tiny_task, path)
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)


# -- the same engine ---------------------------------------------------------------------------------


def test_user_pairs_give_the_generated_pairs_numbers(tiny_model, tiny_config, tiny_split):
    """The pairs make_prompt_pairs would make, handed in as a DataFrame of token ids and as a list of
    tensors, give the same table: user pairs run through the same engine, bootstrap included."""
    made = prompt_pairs.make_prompt_pairs(tiny_split, 24, "value", seed=0)
    frame = pd.DataFrame({"clean": [_ids(r) for r in made.clean.tolist()],
                          "corrupted": [_ids(r) for r in made.corrupted.tolist()]})
    kwargs = dict(n_boot=200, by="role")
    generated = tables.patching_table(Subject(tiny_model, tiny_config, tiny_split, "test"), n_pairs=24, corruption="value", **kwargs)
    for given in (frame, list(zip(made.clean, made.corrupted))):
        table = tables.patching_table(Subject(tiny_model, tiny_config, tiny_split, "test"), pairs=given, **kwargs)
        assert (table["corruption"] == "user").all()
        assert table.drop(columns="corruption").equals(generated.drop(columns="corruption"))


def test_each_metric_is_what_it_says_on_every_engine(tiny_model, tiny_config, tiny_split):
    """prob and a function metric: the batched engine equals the hook path, and patching the whole
    last residual stream gives the clean run's value."""
    pairs = prompt_pairs.make_prompt_pairs(tiny_split, 16, "constant", seed=2)
    sites = tables.all_sites(tiny_config.model)
    final = sites.index(tables.patch_site("resid_post", 1, tiny_config.model.n_ctx - 1))

    def top_margin(logits, answers):  # a metric of the user's own: clean logit over the best other
        rows = torch.arange(len(logits))
        return logits[rows, answers[:, 0]] - logits.scatter(1, answers[:, :1], float("-inf")).amax(1)

    for metric in ("prob", top_margin):
        fast = tables.patched_values(tiny_model, tiny_config.model, pairs, sites, metric=metric)
        hooks = tables.patched_values(tiny_model, tiny_config.model, pairs, sites, metric=metric, fast=False)
        assert torch.allclose(fast, hooks, atol=1e-5)
        clean, corrupted = tables.baseline_logit_diffs(tiny_model, pairs, metric=metric)
        assert torch.allclose(fast[final], clean, atol=1e-5) and not torch.allclose(clean, corrupted, atol=1e-4)
    logits = torch.randn(5, 7)
    answers = torch.tensor([[int(logits[i].argmax()), 0] for i in range(5)])
    assert torch.allclose(metrics.prob(logits, answers), logits.softmax(-1).amax(-1))
    assert metrics.accuracy(logits, answers).tolist() == [1.0] * 5


def test_a_metric_function_names_the_columns_and_a_mean_is_refused(tiny_model, tiny_config, tiny_split):
    def my_logit_diff(logits, answers):
        return logits.gather(1, answers[:, :1]).squeeze(1) - logits.gather(1, answers[:, 1:]).squeeze(1)

    kwargs = dict(n_pairs=20, corruption="value", n_boot=100, by="position")
    default = tables.patching_table(Subject(tiny_model, tiny_config, tiny_split, "test"), **kwargs)
    mine = tables.patching_table(Subject(tiny_model, tiny_config, tiny_split, "test"), metric=my_logit_diff, **kwargs)
    assert {"my_logit_diff", "clean_my_logit_diff", "corrupted_my_logit_diff"} <= set(mine.columns)
    assert torch.allclose(torch.tensor(mine["mean"].values), torch.tensor(default["mean"].values), atol=1e-6)
    with pytest.raises(ComposeLensError, match="one value per pair"):
        tables.patching_table(Subject(tiny_model, tiny_config, tiny_split, "test"), metric=lambda lg, a: lg[:, 0].mean(), **kwargs)
    with pytest.raises(ComposeLensError, match="use one of logit_diff, prob, accuracy"):
        tables.patching_table(Subject(tiny_model, tiny_config, tiny_split, "test"), metric="kl", **kwargs)


def test_prob_and_accuracy_on_the_paper_model(paper):
    """The paper model is right on the clean prompts and wrong (for the clean answer) on the corrupted
    ones, so both metrics have their full range; the value's stream restores it all."""
    by_metric = {metric: tables.patching_table(paper, n_pairs=60, n_boot=100,
                                               corruption="value", metric=metric) for metric in ("prob", "accuracy")}
    for metric, table in by_metric.items():
        assert table[f"clean_{metric}"].iloc[0] > 0.95 and table[f"corrupted_{metric}"].iloc[0] < 0.05
        value_stream = table[(table.component == "resid_pre") & (table.block == 0) & (table.role == "queried value")]
        assert value_stream["mean"].iloc[0] == pytest.approx(1.0, abs=1e-6)
        padding = table[(table.component == "resid_pre") & (table.block == 0) & (table.role == "PAD")]
        assert abs(padding["mean"].iloc[0]) < 0.05


# -- circuit discovery -------------------------------------------------------------------------------


PAPER_PAIRS = [("b=7, e=5, b+23=?", "b=9, e=5, b+23=?"), ("c=3, a=40, 4+c=?", "c=8, a=40, 4+c=?"),
               ("d=11, 30+d=?", "d=11, 31+d=?"), ("b=2, c=50, b+c=?", "b=2, c=51, b+c=?"),
               ("e=1, 12+40=?", "e=1, 13+40=?"), ("f=9, g=8, g+f=?", "f=9, g=7, g+f=?")]


def test_discover_on_user_pairs_with_each_metric(paper):
    """Exact scores on user pairs: a metric function equal to the logit difference gives the default's
    scores; prob scores differ and name their pool columns; accuracy refuses the gradient methods."""
    kwargs = dict(method="exact", pairs=PAPER_PAIRS)
    default = C.discover(paper, **kwargs)
    same = C.discover(paper, metric=lambda lg, a: metrics.logit_diff(lg, a),
                      **kwargs)
    assert "user pairs" in default.title and default.summary["metric"] == "logit_diff"
    assert torch.allclose(torch.tensor(same.edges["score"].values), torch.tensor(default.edges["score"].values),
                          atol=1e-6)
    prob = C.discover(paper, metric="prob", **kwargs)
    assert {"prob_clean", "prob_corrupted"} <= set(prob.pools.columns) and "ld_clean" not in prob.pools
    assert not torch.allclose(torch.tensor(prob.edges["score"].values), torch.tensor(default.edges["score"].values),
                              atol=1e-3)
    assert prob.summary["metric"] == "prob" and "metric prob" in prob.title
    with pytest.raises(ComposeLensError, match="no gradient"):
        C.discover(paper, method="eap", pairs=PAPER_PAIRS, metric="accuracy")
