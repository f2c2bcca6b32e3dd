"""The task variants: their rules hold for every setting, their pools hold what they promise.

The rules are checked on tiny tasks (p = 7 or 11) drawn by Hypothesis, against a reader
written here from the rules alone (:func:`read_by_the_rules`), not the package's decoder:

* the label is the latest value of each operand's variable (through a chain) plus the
  other operand, mod p;
* filler words never stand in the query, never carry a value, never are the answer;
* no held-out pair reaches training: every value an operand's variable takes in a
  training sequence (the stale one of a reassignment included) forms a training pair;
* chains resolve in two hops, through a variable allowed in the operand's slot;
* the readable forms print and parse every variant back to the same sequence.
"""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from compose_lens.core.config import RunConfig, TaskConfig
from compose_lens.core.errors import ConfigError
from compose_lens.data.sampler import TrainingSampler, make_pool, make_pools, pool_names
from compose_lens.data.split import Split
from compose_lens.data.streams import derived_generator
from compose_lens.data.task import (SequenceError, decode, first_label_of, parse_sequence, to_text,
                                    to_token_string)
from compose_lens.data.variants import variant_pool_names


def small_task(p: int = 11, **variants) -> TaskConfig:
    return TaskConfig(modulus=p, n_vars=6, left_forbidden=("f",), right_forbidden=("a",), **{"f": 0.7, **variants})


def read_by_the_rules(task: TaskConfig, tokens: list[int]):
    """Every value each operand takes, in context order (its latest last), and the chain's
    middle variable of each side (None without a chain), from the rules alone."""
    p, C = task.modulus, task.context_len
    noise = range(task.first_noise_token, task.first_var_token)
    context = [t for t in tokens[:C] if t != task.pad_token and t not in noise]
    history: dict[int, list[int]] = {}
    for var, value in zip(context[0::2], context[1::2]):
        history.setdefault(var, []).append(value)

    def operand(token):
        if token < p:
            return [token], None
        latest = history[token][-1]
        if latest < p:
            return history[token], None
        return history[latest], latest  # a chain: the middle variable holds the number

    (xs, mid_x), (ys, mid_y) = operand(tokens[C + 1]), operand(tokens[C + 2])
    return xs, ys, (mid_x, mid_y), history


def context_without_pad(task: TaskConfig, tokens: list[int]) -> list[int]:
    return [t for t in tokens[: task.context_len] if t != task.pad_token] + list(tokens[task.context_len:])


variant_tasks = st.builds(
    lambda p, reassign, noise, chain, longer, f, seed: small_task(
        p, reassign_rate=reassign, noise_rate=noise, chain_rate=chain, f=f, seed=seed,
        **(dict(seq_len=24, max_assignments=6) if longer else {})),
    p=st.sampled_from([7, 11]), reassign=st.sampled_from([0.0, 0.3, 1.0]), noise=st.sampled_from([0.0, 0.4, 1.0]),
    chain=st.sampled_from([0.0, 0.5, 1.0]), longer=st.booleans(), f=st.sampled_from([0.5, 0.8]),
    seed=st.integers(0, 50),
).filter(lambda t: t.is_variant)


def training_sample(task: TaskConfig, n: int = 400, seed: int = 0):
    try:
        split = Split.from_task(task)
    except ConfigError:  # a drawn f too small to use every number: not a task
        assume(False)
    return split, TrainingSampler(split, 64, seed).sample(n, derived_generator(seed, 9))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task=variant_tasks, seed=st.integers(0, 1000))
def test_training_rows_keep_every_rule(task, seed):
    split, batch = training_sample(task, 300, seed)
    p, C = task.modulus, task.context_len
    is_train = split.is_train
    allowed_left = {task.first_var_token + i for i in task.allowed_left}
    allowed_right = {task.first_var_token + i for i in task.allowed_right}
    noise = set(range(task.first_noise_token, task.first_var_token))
    for tokens, label in zip(batch.tokens.tolist(), batch.labels.tolist()):
        xs, ys, (mid_x, mid_y), history = read_by_the_rules(task, tokens)
        # the label: the latest values (through a chain) plus, mod p
        assert label == (xs[-1] + ys[-1]) % p < p
        # fillers: not in the query, not a value, not the answer
        assert not noise & set(tokens[C:]) and label not in noise
        assert not any(v in noise for values in history.values() for v in values)
        # no held-out pair: every value of each operand forms a training pair with every other
        assert all(is_train[x, y] for x in xs for y in ys)
        # slots: neither the query nor a chain's middle variable uses a forbidden slot
        assert tokens[C + 1] < p or tokens[C + 1] in allowed_left
        assert tokens[C + 2] < p or tokens[C + 2] in allowed_right
        assert (mid_x is None or mid_x in allowed_left) and (mid_y is None or mid_y in allowed_right)
        # a chain is two hops: alias -> middle variable -> number, and only where chains are on
        for mid in (mid_x, mid_y):
            assert mid is None or (task.chain_rate > 0 and all(v < p for v in history[mid]))
        # the package's decoder agrees with the rules
        d = decode(task, tokens)
        assert (d.x, d.y, d.label, d.first_x, d.first_y) == (xs[-1], ys[-1], label, xs[0], ys[0])
        # reassignment and many assignments only where asked for
        assert task.reassign_rate > 0 or all(len(v) == 1 for v in history.values())
        assert sum(len(v) for v in history.values()) <= task.max_assignments


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task=variant_tasks, seed=st.integers(0, 1000))
def test_readable_forms_round_trip_every_variant(task, seed):
    _, batch = training_sample(task, 60, seed)
    for tokens in batch.tokens.tolist():
        assert parse_sequence(task, to_token_string(task, tokens)) == tokens
        text = to_text(task, tokens)
        again = parse_sequence(task, text)
        # the short form drops where PAD lay, nothing else
        assert context_without_pad(task, again) == context_without_pad(task, tokens)
        assert to_text(task, again) == text


@pytest.mark.parametrize("variants, share", [
    (dict(reassign_rate=0.5), lambda d: bool(d.reassigned)),
    (dict(chain_rate=0.5), lambda d: 2 in d.hops),
    (dict(noise_rate=0.5), lambda d: d.n_fillers > 0),
])
def test_each_variant_happens_at_about_its_rate(variants, share):
    task = small_task(**variants)
    _, batch = training_sample(task, 3000)
    decoded = [decode(task, t) for t in batch.tokens.tolist()]
    seen = sum(map(share, decoded)) / len(decoded)
    if "chain_rate" in variants:  # only sequences with a variable operand can chain
        with_variable = sum(d.type != "0var" for d in decoded) / len(decoded)
        assert abs(seen - 0.5 * with_variable) < 0.04, seen
    elif "reassign_rate" in variants:
        assert abs(seen - 0.5) < 0.04, seen
    else:  # fillers: a free position holds one with probability 0.5, so most contexts have some
        free = sum(task.context_len - 2 * len(d.assignments) for d in decoded)
        assert abs(sum(d.n_fillers for d in decoded) / free - 0.5) < 0.03


def test_fillers_fall_between_and_inside_assignments():
    task = small_task(noise_rate=0.6, seq_len=24, max_assignments=6)
    _, batch = training_sample(task, 500)
    inside = between = 0
    for tokens in batch.tokens.tolist():
        awaiting_value = False  # after an assignment's variable, before its value
        for t in tokens[: task.context_len]:
            if task.first_noise_token <= t < task.first_var_token:
                inside += awaiting_value
                between += not awaiting_value
            elif t != task.pad_token:
                awaiting_value = not awaiting_value
    assert inside > 100 and between > 100


def test_pad_never_splits_an_assignment():
    task = small_task(noise_rate=0.5, reassign_rate=0.5, chain_rate=0.5)
    _, batch = training_sample(task, 500)
    for tokens in batch.tokens.tolist():
        ctx = [t for t in tokens[: task.context_len] if not task.first_noise_token <= t < task.first_var_token]
        pairs, i = 0, 0
        while i < len(ctx):
            if ctx[i] == task.pad_token:
                i += 1
                continue
            assert ctx[i + 1] != task.pad_token
            pairs, i = pairs + 1, i + 2


def test_reassignment_puts_the_stale_value_first():
    task = small_task(reassign_rate=1.0)
    pool = make_pool(Split.from_task(task), "reassign_latest", 300)
    for tokens, label in zip(pool.tokens.tolist(), pool.labels.tolist()):
        xs, ys, _, _ = read_by_the_rules(task, tokens)
        assert len(xs) + len(ys) >= 3 and (xs[-1] + ys[-1]) % task.modulus == label
        assert xs[0] != xs[-1] or ys[0] != ys[-1]


@pytest.fixture(scope="module")
def all_variants():
    task = small_task(reassign_rate=0.3, noise_rate=0.3, chain_rate=0.3, seq_len=24, max_assignments=6)
    split = Split.from_task(task)
    return split, make_pools(split, size=300, seed=1)


def test_a_variant_task_has_the_nine_pools_and_its_own(all_variants):
    split, pools = all_variants
    assert list(pools) == list(pool_names(split.task))
    assert len(pools) == 9 + len(variant_pool_names(split.task)) == 9 + 4 + 2 + 2
    assert pool_names(TaskConfig()) == tuple(list(pools)[:9])


def test_variant_pools_hold_what_their_names_promise(all_variants):
    split, pools = all_variants
    task = split.task
    held = {tuple(p) for p in split.heldout_pairs.tolist()}

    def read(name):
        return [decode(task, t) for t in pools[name].tokens.tolist()]

    for name in ("reassign_latest", "reassign_add_restricted"):
        for d in read(name):
            assert (d.first_x, d.first_y) != (d.x, d.y)  # an operand's variable was reassigned
            assert ((d.x, d.y) in held) == name.endswith("add_restricted")
    assert torch.equal(pools["reassign_first"].tokens, pools["reassign_latest"].tokens)
    assert pools["reassign_first"].labels.tolist() == [first_label_of(task, t) for t in
                                                       pools["reassign_first"].tokens.tolist()]
    assert (pools["reassign_first"].labels != pools["reassign_latest"].labels).all()
    assert all(d.reassigned for d in read("reassign_any"))
    assert sum(d.type == "0var" for d in read("reassign_any")) > 0
    for name in ("chain_train", "chain_add_restricted"):
        for d in read(name):
            assert 2 in d.hops and ((d.x, d.y) in held) == name.endswith("add_restricted")
    assert all(d.n_fillers == 0 for d in read("noise_none"))
    for tokens, d in zip(pools["noise_all"].tokens.tolist(), read("noise_all")):
        assert task.pad_token not in tokens and d.n_fillers == task.context_len - 2 * len(d.assignments)
    for d in read("2var_add_restricted"):
        assert (d.x, d.y) in held


def test_variant_pools_are_seeded(all_variants):
    split, pools = all_variants
    again = make_pool(split, "chain_train", 300, seed=1)
    other = make_pool(split, "chain_train", 300, seed=2)
    assert torch.equal(again.tokens, pools["chain_train"].tokens)
    assert not torch.equal(other.tokens, again.tokens)


def test_longer_contexts_fill_up_to_max_assignments():
    task = small_task(seq_len=32, max_assignments=6, reassign_rate=0.5)
    _, batch = training_sample(task, 2000)
    counts = {len(decode(task, t).assignments) for t in batch.tokens.tolist()}
    assert counts == set(range(1, 7)) and batch.tokens.shape == (2000, 32)


def test_variants_follow_the_study_task_for_the_vocabulary():
    plain, noisy = TaskConfig(), TaskConfig(noise_rate=0.2)
    assert (plain.d_vocab, plain.first_var_token) == (74, 62)
    assert (noisy.d_vocab, noisy.first_noise_token, noisy.first_var_token) == (78, 62, 66)
    assert TaskConfig(reassign_rate=0.2, chain_rate=0.2).d_vocab == 74  # no new words without noise


# -- the readable form ----------------------------------------------------------------------------


@pytest.mark.parametrize("variants, text, label, tokens", [
    (dict(reassign_rate=0.5), "b=3, e=5, b=9, b+1=?", 10, "PAD PAD PAD PAD PAD PAD b 3 e 5 b 9 + b 1 ="),
    (dict(chain_rate=0.5), "c=b, b=7, c+1=?", 8, "PAD PAD PAD PAD PAD PAD PAD PAD c b b 7 + c 1 ="),
    (dict(chain_rate=0.5, reassign_rate=0.5), "c=b, b=3, b=7, c+b=?", 14,
     "PAD PAD PAD PAD PAD PAD c b b 3 b 7 + c b ="),
    (dict(noise_rate=0.5), "let b is 7, e=5, then, b+e=?", 12, "PAD PAD PAD PAD PAD let b is 7 e 5 then + b e ="),
    (dict(noise_rate=0.5), "let e be 5, e+1=?", 6, "PAD PAD PAD PAD PAD PAD PAD PAD let e be 5 + e 1 ="),
])
def test_readable_examples_of_each_variant(variants, text, label, tokens):
    task = TaskConfig(**variants)
    row = parse_sequence(task, text)
    assert to_token_string(task, row) == tokens and decode(task, row).label == label
    assert to_text(task, row) == text
    with pytest.raises(SequenceError):  # the study's task refuses the variant's sequence
        parse_sequence(TaskConfig(), text)


@pytest.mark.parametrize("variants, text, words", [
    (dict(chain_rate=0.5), "c=d, d=e, e=3, c+1=?", "two hops at most"),
    (dict(chain_rate=0.5), "c=c, c+1=?", "assigned itself"),
    (dict(chain_rate=0.5), "c=d, c+1=?", "never assigned"),
    (dict(noise_rate=0.5), "b is, b+1=?", "must read like"),
    (dict(noise_rate=0.5), "b=7, is+1=?", "must be a number or a variable"),
    (dict(noise_rate=0.5), "PAD PAD PAD PAD PAD PAD PAD PAD PAD b PAD 7 + b 1 =", "not followed by a number"),
    (dict(), "b=7, is+1=?", "unknown word"),
])
def test_malformed_variant_sequences_fail_clearly(variants, text, words):
    with pytest.raises(SequenceError) as err:
        parse_sequence(TaskConfig(**variants), text)
    assert words in str(err.value) and "\n" not in str(err.value)


# -- the settings ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, words", [
    (dict(reassign_rate=1.5), "reassign_rate=1.5: the chance that a context reassigns a variable must be in [0, 1]"),
    (dict(noise_rate=-0.1), "noise_rate=-0.1"),
    (dict(chain_rate=2.0), "chain_rate=2.0"),
    (dict(seq_len=8, max_assignments=2, reassign_rate=0.2), "seq_len=8 is too short for reassign_rate=0.2"),
    (dict(max_assignments=3, reassign_rate=0.2, chain_rate=0.1), "use max_assignments >= 4"),
    (dict(n_vars=4, max_assignments=4, chain_rate=0.5, left_forbidden=("c", "d"), right_forbidden=("a",)),
     "chain_rate=0.5 needs at least 3 variables allowed on each side"),
])
def test_bad_variant_settings_get_one_clear_line(kwargs, words):
    with pytest.raises(ConfigError) as err:
        TaskConfig(**kwargs)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_variant_settings_round_trip_and_stay_out_of_the_study_config():
    task = TaskConfig(reassign_rate=0.25, noise_rate=0.5, chain_rate=0.1, seq_len=32, max_assignments=12)
    assert TaskConfig.from_dict(json.loads(task.to_json())) == task
    assert "reassign_rate" in task.to_dict() and "reassign_rate" not in TaskConfig().to_dict()
    assert TaskConfig().to_dict(full=True)["chain_rate"] == 0.0


def test_overrides_set_the_variants_and_size_the_model():
    config = RunConfig().with_overrides(["noise_rate=0.3", "task.reassign_rate=0.2", "seq_len=32",
                                         "max_assignments=12", "chain_rate=0.1", "n_layers=3"])
    t = config.task
    assert (t.noise_rate, t.reassign_rate, t.chain_rate, t.seq_len) == (0.3, 0.2, 0.1, 32)
    assert (config.model.d_vocab, config.model.n_ctx, config.model.mlp_blocks) == (78, 32, (2,))
    assert RunConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ConfigError, match="reassign_rate=2"):
        RunConfig().with_overrides(["reassign_rate=2"])


def test_the_tokenizer_reads_every_variant():
    from compose_lens.model.tokenizer import task_tokenizer

    task = TaskConfig(noise_rate=0.3, chain_rate=0.2, reassign_rate=0.1)
    text = "let b is 7, c=b, b=9, c+1=?"
    ids = task_tokenizer(task)(text)["input_ids"]
    assert ids == parse_sequence(task, text) and decode(task, ids).label == 10


# -- the analyses read a variant context where its values are (bindings) ---------------------------


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task=variant_tasks, seed=st.integers(0, 1000))
def test_the_analyses_find_the_latest_value_and_each_values_variable(task, seed):
    from compose_lens.analysis import probes
    from compose_lens.data import pairs as prompt_pairs

    _, batch = training_sample(task, 120, seed)
    C = task.context_len
    targets = probes.value_targets(task, batch.tokens).tolist()
    seq, pos, var = (t.tolist() for t in probes.value_positions(task, batch.tokens))
    roles = prompt_pairs.position_roles(task, batch.tokens).tolist()
    names = prompt_pairs.role_names(task)
    noise = set(range(task.first_noise_token, task.first_var_token))
    for i, tokens in enumerate(batch.tokens.tolist()):
        xs, ys, _, history = read_by_the_rules(task, tokens)
        # the router's targets hold the values the label is made of: the latest, through a chain
        assert [tokens[t] for t in targets[i]] == [xs[-1], ys[-1]]
        for side, values in ((0, xs), (1, ys)):
            if targets[i][side] < C:
                assert names[roles[i][targets[i][side]]] == "queried value"
        for t, token in enumerate(tokens[:C]):
            if token in noise:
                assert names[roles[i][t]] == "filler"
            if names[roles[i][t]] == "queried value":
                assert t in targets[i]
    for s, p_, v in zip(seq, pos, var):  # every context number is bound to the variable it was assigned to
        tokens = batch.tokens[s].tolist()
        assert tokens[v] >= task.first_var_token and tokens[p_] in history_of(task, tokens)[tokens[v]]
        assert all(t in noise for t in tokens[v + 1: p_])  # only fillers between a variable and its value


def history_of(task: TaskConfig, tokens: list[int]) -> dict[int, list[int]]:
    return read_by_the_rules(task, tokens)[3]


def test_the_parse_agrees_with_the_studys_reading_on_the_studys_task():
    from compose_lens.analysis import probes
    from compose_lens.data.variants import bindings

    task = small_task()
    _, batch = training_sample(task, 500)
    assert not task.is_variant
    found = bindings(task, batch.tokens)
    assert torch.equal(found.operand_value_positions(task, batch.tokens), probes.value_targets(task, batch.tokens))
    seq, pos, var = probes.value_positions(task, batch.tokens)
    assert torch.equal(found.variable_of[seq, pos], var)
