"""The task tokenizer on the model: TransformerLens's string helpers and circuitsvis labels work,
both readable forms tokenize to the task's token rows, and nothing adds a BOS token."""

from __future__ import annotations

import pytest
import torch

from compose_lens.core.config import RunConfig
from compose_lens.core.errors import ComposeLensError
from compose_lens.data.sampler import make_pool
from compose_lens.data.task import parse_sequence, to_token_string
from compose_lens.model import tl
from compose_lens.training.runs import save_model
from compose_lens.training.subject import load_model

TOKEN_FORM = "PAD b 7 PAD e 5 PAD d 2 PAD PAD PAD + b 23 ="


@pytest.fixture(scope="module")
def paper_sized():
    config = RunConfig()
    return tl.boot(config.model), config.task


def test_token_form_round_trips_without_bos(paper_sized):
    model, task = paper_sized
    tokens = model.to_tokens(TOKEN_FORM)
    assert tokens.tolist() == [parse_sequence(task, TOKEN_FORM)]  # 16 tokens, no BOS
    assert model.to_str_tokens(tokens) == TOKEN_FORM.split()
    assert model.to_string(tokens[0]) == TOKEN_FORM
    assert model.to_string(tokens) == [TOKEN_FORM]
    assert model.to_single_token("=") == task.equals_token


def test_readable_form_goes_through_parse_sequence(paper_sized):
    model, task = paper_sized
    text = "b=7, e=5, d=2, b+23=?"
    assert model.to_tokens(text).tolist() == [parse_sequence(task, text)]
    assert model.to_str_tokens(text)[:6] == ["PAD"] * 6  # the short form pads on the left
    batch = model.to_tokens([text, TOKEN_FORM])
    assert batch.shape == (2, task.seq_len)


def test_fragments_tokenize_and_bad_words_are_named(paper_sized):
    model, _ = paper_sized
    assert model.to_str_tokens("b 7") == ["b", "7"]
    with pytest.raises(ComposeLensError, match="unknown word 'x'"):
        model.to_tokens("b 7 x")
    with pytest.raises(ComposeLensError, match="never assigned"):
        model.to_tokens("b=7, c+1=?")


def test_every_loaded_model_has_its_task_tokenizer(tmp_path, tiny_config, tiny_split):
    save_model(tl.boot(tiny_config.model), tiny_config, tmp_path)
    model = load_model(tmp_path).model
    pool = make_pool(tiny_split, "2var_train", 4, seed=0).tokens
    words = [to_token_string(tiny_config.task, row) for row in pool.tolist()]
    assert torch.equal(model.to_tokens(words), pool)
    assert model.to_string(pool) == words
