"""compose_lens.test_prompt and compose_lens.detect_head: TransformerLens's two quick looks, on the study's model.

TransformerLens's own functions refuse the paper model (checked first, so this file says when
they stop doing so); ours are checked against the bridge's own forward and cache.
"""

from __future__ import annotations

import pytest
import torch

import compose_lens as cl
from compose_lens.analysis import exploratory
from compose_lens.core.errors import ComposeLensError

PROMPTS = ["b=7, e=5, b+23=?", "c=3, a=40, 4+c=?", "a=1, b=2, c=3, a+b=?"]


@pytest.fixture(scope="module")
def paper():
    return cl.load_model("paper")


def test_transformerlens_own_test_prompt_and_detect_head_refuse_the_study_model(paper):
    from transformer_lens.head_detector import detect_head
    from transformer_lens.utilities import test_prompt as tl_test_prompt

    with pytest.raises(ValueError, match="exceeds n_ctx"):  # the answer appended: 17 tokens
        tl_test_prompt(PROMPTS[0], "30", paper.model, prepend_space_to_answer=False, print_details=False)
    with pytest.raises(AssertionError, match="context window"):  # asks for fewer than n_ctx tokens
        detect_head(paper.model, PROMPTS[0], "previous_token_head")


def test_prompt_ranks_the_answer_by_the_models_own_forward(paper, capsys):
    found = cl.test_prompt(paper, "b=7, b+23=?", top_k=5)
    tokens = torch.tensor([cl.parse_sequence(paper.config.task, "b=7, b+23=?")])
    with torch.no_grad():
        logits = paper.model(tokens)[0, -1]  # the TransformerLens forward, at "="
    assert found.answer == 30 and found.rank == 0
    assert found.logit == pytest.approx(float(logits[30]), abs=1e-3)
    assert found.prob == pytest.approx(float(logits.softmax(-1)[30]), abs=1e-5)
    assert found.top["answer"].tolist() == logits.argsort(descending=True)[:5].tolist()
    assert found.top["prob"].is_monotonic_decreasing and len(found.top) == 5
    printed = capsys.readouterr().out
    assert "Rank: 0 " in printed and "Token: |30|" in printed and "Ranks of the answer tokens: [('30', 0)]" in printed

    wrong = cl.test_prompt(paper, "b=7, b+23=?", answer="31", print_details=False)
    assert wrong.rank == int((logits > logits[31]).sum()) > 0  # its place among the 59 answers
    assert capsys.readouterr().out == ""


def test_detect_head_scores_as_transformerlens_does_on_the_prompts_positions(paper):
    scores = cl.detect_head(paper, PROMPTS, "previous_token")
    task = paper.config.task
    tokens = torch.tensor([cl.parse_sequence(task, p) for p in PROMPTS])
    with torch.no_grad():
        _, cache = paper.model.run_with_cache(tokens)
    expected = torch.zeros(2)
    for layer in range(2):
        for row, pattern in zip(tokens, cache[f"blocks.{layer}.attn.hook_pattern"][:, 0]):
            start = int((row != task.pad_token).nonzero()[0])
            own = pattern[start:, start:]  # the prompt's positions, padding left out
            expected[layer] += own.diagonal(-1).sum() / own.sum() / len(PROMPTS)  # attention on the previous token
    assert scores.shape == (2, 1)
    assert torch.allclose(scores[:, 0], expected, atol=1e-5)
    assert scores[0, 0] > 0.5 > scores[1, 0]  # layer 1's head is the one that reads the previous token

    # the same pattern as a tensor over the sequence's positions gives the same scores
    n = tokens.shape[1]
    previous = torch.zeros(n, n)
    previous[torch.arange(1, n), torch.arange(n - 1)] = 1
    assert torch.allclose(cl.detect_head(paper, PROMPTS, previous), scores, atol=1e-6)
    only = cl.detect_head(paper, PROMPTS, "previous_token_head", heads=[(1, 0)])
    assert only[0, 0] == -1 and only[1, 0] == pytest.approx(float(scores[1, 0]), abs=1e-6)


def test_detect_head_leaves_the_padding_out_unless_asked(paper):
    # every padded sequence starts with identical PAD tokens, which TransformerLens's
    # duplicate-token pattern counts as duplicates
    without = cl.detect_head(paper, PROMPTS, "duplicate_token")
    padded = cl.detect_head(paper, PROMPTS, "duplicate_token", exclude_padding=False)
    assert (without < 0.05).all() and (padded > without + 0.1).all()


@pytest.mark.parametrize("call, says", [
    (lambda m: cl.detect_head(m, PROMPTS, "copying"), "give one of previous_token, duplicate_token, induction"),
    (lambda m: cl.detect_head(m, PROMPTS, torch.ones(16, 16)), "lower-triangular (16, 16)"),
    (lambda m: cl.detect_head(m, PROMPTS, torch.eye(5)), "lower-triangular (16, 16)"),
    (lambda m: cl.detect_head(m, PROMPTS, "induction", error_measure="l2"), "give one of mul, abs"),
    (lambda m: cl.detect_head(m, PROMPTS, "induction", heads=[(2, 0)]), "the model has 2 layers of 1 heads"),
    (lambda m: cl.detect_head(m, [], "induction"), "no prompts"),
    (lambda m: cl.detect_head(m, ["b+23=?"], "induction"), "no assignment"),
    (lambda m: cl.test_prompt(m, "b=7, b+23=?", answer=59), "give a number from 0 to 58"),
    (lambda m: cl.test_prompt(m, "b=7, b+23=?", top_k=0), "top_k=0"),
])
def test_bad_input_is_refused_in_one_line(paper, call, says):
    with pytest.raises(ComposeLensError, match=None) as refused:
        call(paper)
    assert says in str(refused.value) and "\n" not in str(refused.value)


def test_test_prompt_is_not_collected_as_a_test():
    assert exploratory.test_prompt.__test__ is False
