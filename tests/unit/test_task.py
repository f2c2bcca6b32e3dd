"""Configs, the vocabulary and the readable forms: round trips and clear refusals."""

from __future__ import annotations

import json

import pytest

from compose_lens.core.config import ModelConfig, RunConfig, TaskConfig, TrainConfig
from compose_lens.core.errors import ConfigError
from compose_lens.data.task import SequenceError, decode, label_of, parse_sequence, to_text, to_token_string


def test_paper_vocabulary():
    task = TaskConfig()
    assert (task.plus_token, task.equals_token, task.pad_token, task.first_var_token, task.d_vocab) == (
        59, 60, 61, 62, 74)
    assert task.variable_names[0] == "a" and task.variable_names[-1] == "l"
    assert len(task.allowed_two_var_pairs) == 92
    assert len(task.restricted_two_var_pairs(1)) == 36
    assert len(task.restricted_two_var_pairs(2)) == 4


@pytest.mark.parametrize("cls", [TaskConfig, ModelConfig, TrainConfig])
def test_configs_round_trip_through_json(cls):
    config = cls()
    assert cls.from_dict(json.loads(config.to_json())) == config


def test_run_config_overrides_resize_the_model():
    config = RunConfig().with_overrides(["modulus=11", "n_vars=6", "left_forbidden=[\"f\"]",
                                         "right_forbidden=[\"a\"]", "steps=5", "model.d_model=32"])
    assert config.task.modulus == 11 and config.train.steps == 5
    assert (config.model.d_vocab, config.model.d_vocab_out, config.model.d_model) == (11 + 3 + 6, 11, 32)
    assert RunConfig.from_dict(config.to_dict()) == config


@pytest.mark.parametrize("kwargs, words", [
    (dict(modulus=1), "modulus"),
    (dict(n_vars=40), "n_vars"),
    (dict(f=0.0), "f=0.0"),
    (dict(f=1.5), "f=1.5"),
    (dict(r=-0.1), "r=-0.1"),
    (dict(seq_len=7), "seq_len"),
    (dict(max_assignments=7), "max_assignments"),
    (dict(left_forbidden=("z",)), "unknown variable"),
    (dict(left_forbidden=("a",), right_forbidden=("a",)), "both sides"),
])
def test_bad_task_configs_are_refused_with_one_line(kwargs, words):
    with pytest.raises(ConfigError) as err:
        TaskConfig(**kwargs)
    message = str(err.value)
    assert words in message and "\n" not in message


def test_unknown_keys_and_bad_overrides_are_refused():
    with pytest.raises(ConfigError, match="unknown TaskConfig key"):
        TaskConfig.from_dict({"modulos": 5})
    with pytest.raises(ConfigError, match="no such setting"):
        RunConfig().with_overrides(["nonsense=3"])
    with pytest.raises(ConfigError, match="key=value"):
        RunConfig().with_overrides(["steps"])


EXAMPLES = [
    ("PAD PAD a 40 PAD j 18 PAD PAD PAD k 9 + a 27 =", "1var_left", 8),
    ("PAD b 7 PAD e 5 PAD d 5 PAD PAD PAD + b d =", "2var", 12),
    ("PAD b 7 PAD e 5 PAD d 2 PAD PAD PAD + b 23 =", "1var_left", 30),
    ("PAD PAD PAD PAD PAD PAD PAD PAD PAD PAD c 3 + 50 20 =", "0var", 11),
    ("PAD PAD PAD PAD PAD PAD PAD PAD PAD PAD c 3 + 50 c =", "1var_right", 53),
]


@pytest.mark.parametrize("text, kind, label", EXAMPLES)
def test_spec_examples_parse_with_their_labels(text, kind, label):
    task = TaskConfig()
    tokens = parse_sequence(task, text)
    d = decode(task, tokens)
    assert (d.type, d.label) == (kind, label)
    assert to_token_string(task, tokens) == text
    short = to_text(task, tokens)
    # the short form drops pad positions: it round-trips to the same assignments and query
    again = parse_sequence(task, short)
    assert to_text(task, again) == short
    assert decode(task, again).assignments == d.assignments


def test_short_form_example():
    task = TaskConfig()
    tokens = parse_sequence(task, "b=7, e=5, d=2, b+23=?")
    assert to_token_string(task, tokens) == "PAD PAD PAD PAD PAD PAD b 7 e 5 d 2 + b 23 ="


@pytest.mark.parametrize("text, words", [
    ("z=7, z+3=?", "unknown variable"),
    ("b=7, c+3=?", "never assigned"),
    ("b=70, b+3=?", "out of range"),
    ("b=7, b+70=?", "out of range"),
    ("b=7, b=8, b+1=?", "twice"),
    ("PAD b 7 + b 3 =", "exactly 16 tokens"),
    ("a=1, b=2, c=3, d=4, e=5, f=6, g=7, a+b=?", "do not fit"),
    ("b=7, b+b=?", "two different variables"),
    ("", "empty"),
    ("PAD PAD PAD PAD PAD PAD PAD PAD PAD PAD c 3 + 50 20 +", "query"),
    ("PAD PAD PAD PAD PAD PAD PAD PAD PAD PAD 4 3 + 50 20 =", "variable or PAD"),
])
def test_malformed_sequences_fail_clearly(text, words):
    with pytest.raises(SequenceError) as err:
        parse_sequence(TaskConfig(), text)
    assert words in str(err.value)


# -- the task's operation (the one place a label is computed: TaskConfig.answer) -------------------


@pytest.mark.parametrize("operation, x, y, expected", [("add", 50, 20, 11), ("subtract", 3, 5, 57),
                                                        ("multiply", 8, 8, 5)])
def test_each_operation_labels_sequences_and_batches(operation, x, y, expected):
    from compose_lens.data.sampler import make_pools
    from compose_lens.data.split import Split

    task = TaskConfig(operation=operation)
    sign = task.sign
    tokens = parse_sequence(task, f"b={x}, e=5, b{sign}{y}=?")
    assert label_of(task, tokens) == expected
    split = Split.from_task(task)
    for batch in make_pools(split, size=16).values():
        for row, label in zip(batch.tokens.tolist(), batch.labels.tolist()):
            assert label_of(task, row) == label  # the pools' labels are the task's operation, not addition


def test_an_operation_table_is_checked_and_used():
    p = 5
    table = [[(x * x + y) % p for y in range(p)] for x in range(p)]
    task = TaskConfig(modulus=p, n_vars=4, max_assignments=4, f=0.6, operation="table", operation_table=table)
    assert TaskConfig.from_dict(task.to_dict()) == task
    assert label_of(task, parse_sequence(task, "a=3, a+1=?")) == (9 + 1) % p
    with pytest.raises(ConfigError, match="5 rows of 5"):
        TaskConfig(modulus=p, n_vars=4, max_assignments=4, f=0.6, operation="table", operation_table=table[:4])
    with pytest.raises(ConfigError, match="number 0..4"):
        TaskConfig(modulus=p, n_vars=4, max_assignments=4, f=0.6, operation="table", operation_table=[[7] * p] * p)
    with pytest.raises(ConfigError, match="set operation=table"):
        TaskConfig(modulus=p, n_vars=4, max_assignments=4, f=0.6, operation_table=table)


def test_the_study_task_writes_no_operation_key():
    assert "operation" not in TaskConfig().to_dict()
    assert TaskConfig(operation="subtract").to_dict()["operation"] == "subtract"
