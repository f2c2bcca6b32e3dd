"""The split and the sampler: no leaks, the SPEC's distributions, exact pool contents."""

from __future__ import annotations

import torch
import pytest

from compose_lens.core.config import TaskConfig
from compose_lens.core.errors import ConfigError
from compose_lens.data.sampler import (POOL_NAMES, TrainingSampler, exhaustive_rows, make_exhaustive,
                                  make_pool, render)
from compose_lens.data.split import Split, row_types, training_rows
from compose_lens.data.streams import derived_generator
from compose_lens.data.task import decode

PAPER = TaskConfig()


@pytest.fixture(scope="module")
def paper_split() -> Split:
    return Split.from_task(PAPER)


@pytest.fixture(scope="module")
def big_sample(paper_split):
    """40,000 training sequences, decoded independently of the sampler's own bookkeeping."""
    batch = TrainingSampler(paper_split, 512, seed=3).sample(40_000, derived_generator(3, 7))
    decoded = [decode(PAPER, t) for t in batch.tokens.tolist()]
    return batch, decoded


def test_split_sizes(paper_split):
    assert len(paper_split.train_pairs) == 2436
    assert len(paper_split.heldout_pairs) == 1045
    both = torch.cat([paper_split.train_pairs, paper_split.heldout_pairs])
    assert len({tuple(p) for p in both.tolist()}) == 59 * 59


def test_split_is_seeded(paper_split):
    again = Split.from_task(PAPER)
    other = Split.from_task(PAPER.replace(seed=1))
    assert torch.equal(again.heldout_pairs, paper_split.heldout_pairs)
    assert not torch.equal(other.heldout_pairs, paper_split.heldout_pairs)


def test_no_heldout_pair_reaches_training_in_any_type(paper_split, big_sample):
    batch, decoded = big_sample
    held = {tuple(p) for p in paper_split.heldout_pairs.tolist()}
    assert not any((d.x, d.y) in held for d in decoded)
    # and the training table itself holds no held-out pair
    rows = training_rows(paper_split)
    assert not any((x, y) in held for x, y in rows[:, :2].tolist())
    assert {d.type for d in decoded} == {"0var", "1var_left", "1var_right", "2var"}


def test_slot_restrictions_hold_in_training(big_sample):
    _, decoded = big_sample
    assert not any(d.rhs in ("a", "b") for d in decoded)
    assert not any(d.lhs in ("k", "l") for d in decoded)
    assert all(d.label == (d.x + d.y) % 59 for d in decoded)


def test_labels_match_the_rendered_tokens(big_sample):
    batch, decoded = big_sample
    assert batch.labels.tolist() == [d.label for d in decoded]


def test_type_mix_and_assignment_counts_match_the_spec(big_sample):
    batch, decoded = big_sample
    n = len(decoded)
    mix = torch.bincount(batch.types, minlength=4).float() / n
    expected = torch.tensor([12, 10, 10, 10]) / 42
    # binomial standard error at n = 40,000 is under 0.0025; allow 4 sigma
    assert torch.allclose(mix, expected, atol=0.01), mix
    counts = torch.tensor([len(d.assignments) for d in decoded])
    is_two = torch.tensor([d.type == "2var" for d in decoded])
    one_side = torch.bincount(counts[~is_two], minlength=7)[1:].float() / (~is_two).sum()
    assert torch.allclose(one_side, torch.full((6,), 1 / 6), atol=0.015), one_side
    two = torch.bincount(counts[is_two], minlength=7)[1:].float() / is_two.sum()
    assert two[0] == 0 and abs(two[1] - 2 / 6) < 0.02 and torch.allclose(two[2:], torch.full((4,), 1 / 6), atol=0.02)


def test_padding_is_scattered_and_order_shuffled(big_sample):
    batch, decoded = big_sample
    ctx = batch.tokens[:, :12]
    first_is_pad = (ctx[:, 0] == PAPER.pad_token).float().mean()
    last_is_pad = (ctx[:, 11] == PAPER.pad_token).float().mean()
    assert 0.2 < first_is_pad < 0.9 and 0.2 < last_is_pad < 0.9
    # the queried variable of a 1-var-left sequence is not always assigned first
    firsts = [d.assignments[0][0] == d.lhs for d in decoded if d.type == "1var_left" and len(d.assignments) > 1]
    assert 0.2 < sum(firsts) / len(firsts) < 0.8


def test_variables_assigned_once_and_queried_ones_present(big_sample):
    _, decoded = big_sample  # decode() raises on a repeated or missing variable
    assert all(len({a for a, _ in d.assignments}) == len(d.assignments) for d in decoded)


def test_same_seed_same_batches(paper_split):
    a = TrainingSampler(paper_split, 64, seed=5)
    b = TrainingSampler(paper_split, 64, seed=5)
    c = TrainingSampler(paper_split, 64, seed=6)
    assert torch.equal(a.batch(123).tokens, b.batch(123).tokens)
    assert not torch.equal(a.batch(123).tokens, c.batch(123).tokens)
    # a batch does not depend on which batches were drawn before it
    b.batch(7)
    assert torch.equal(a.batch(60).tokens, b.batch(60).tokens)


def test_r_controls_the_two_var_ratio(paper_split):
    for r in (0.0, 0.25, 1.0):
        split = Split.from_task(PAPER.replace(r=r))
        counts = torch.bincount(row_types(training_rows(split)), minlength=4)
        ratio = (counts[3] / counts[0]).item()
        assert abs(ratio - r * 10 / 12) < 0.02, (r, ratio)


@pytest.mark.parametrize("name", POOL_NAMES)
def test_pools_contain_what_their_names_promise(paper_split, name):
    pool = make_pool(paper_split, name, 500)
    is_train = paper_split.is_train
    held = {tuple(p) for p in paper_split.heldout_pairs.tolist()}
    for d in (decode(PAPER, t) for t in pool.tokens.tolist()):
        kind, pairs = name.split("_", 1)
        assert d.type.startswith(kind[0])
        assert ((d.x, d.y) in held) == (pairs == "add_restricted")
        assert is_train[d.x, d.y] == (pairs != "add_restricted")
        forbidden = (d.lhs in ("k", "l")) + (d.rhs in ("a", "b"))
        expected = {"var_restricted": 1, "var_restricted_1": 1, "var_restricted_2": 2}.get(pairs, 0)
        assert forbidden == expected


def test_exhaustive_sizes(paper_split):
    assert len(make_exhaustive(paper_split, "zero_var_heldout")) == 1045
    rows = exhaustive_rows(paper_split, "two_var_union")
    assert len(rows) == 193_580
    assert len({tuple(r) for r in rows.tolist()}) == 193_580


def test_reference_split_loads(reference_dir):
    split = Split.load(reference_dir / "split.json")
    assert len(split.heldout_pairs) == 1045 and len(split.train_pairs) == 2436
    assert split.task.left_forbidden == ("k", "l") and split.task.right_forbidden == ("a", "b")


def test_split_file_round_trip(tmp_path, paper_split):
    path = tmp_path / "split.json"
    paper_split.save(path)
    again = Split.load(path)
    assert torch.equal(again.heldout_pairs, paper_split.heldout_pairs)


def test_split_missing_a_number_is_refused():
    with pytest.raises(ConfigError, match="never use number"):
        Split.from_task(TaskConfig(modulus=59, f=0.01))


def test_bad_split_file_is_refused(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"modulus": 59}')
    with pytest.raises(ConfigError, match="not a split file"):
        Split.load(bad)
    bad.write_text("{nope")
    with pytest.raises(Exception, match="not valid JSON"):
        Split.load(bad)


def test_render_places_queried_values(tiny_split):
    rows = torch.tensor([[3, 4, 0, 1], [5, 6, -1, 2], [1, 1, -1, -1]])
    batch = render(tiny_split, rows, derived_generator(0, 0))
    for tokens, (x, y, v, w) in zip(batch.tokens.tolist(), rows.tolist()):
        d = decode(tiny_split.task, tokens)
        assert (d.x, d.y) == (x, y)
