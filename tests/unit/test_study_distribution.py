"""The study's exact training distribution: initialisation, split procedure, 2-var rows, pools."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch

from compose_lens.cli import main
from compose_lens.core.config import ModelConfig, TaskConfig
from compose_lens.core.errors import ConfigError
from compose_lens.data.sampler import TrainingSampler, make_exhaustive, make_pool
from compose_lens.data.split import ANY_PAIR, Split, row_types, training_rows
from compose_lens.model import tl

SMALL = dict(modulus=11, n_vars=6, left_forbidden=("f",), right_forbidden=("a",))


def assignments(task: TaskConfig, tokens: torch.Tensor) -> torch.Tensor:
    """How many VAR VALUE assignments each sequence's context holds."""
    return (tokens[:, : task.context_len] >= task.first_var_token).sum(1)


# -- initialisation -------------------------------------------------------------------------------


@pytest.mark.parametrize("n_layers", [2, 3])
def test_study_init_draws_every_matrix_with_the_same_sigma(n_layers):
    cfg = ModelConfig(d_model=128, d_head=128, n_layers=n_layers, mlp_blocks=tuple(range(n_layers)))
    sigma = 0.8 / math.sqrt(cfg.d_model)
    study = {k: v.std().item() for k, v in tl.boot(cfg).state_dict().items() if v.dim() == 2}
    tl4 = {k: v.std().item() for k, v in tl.boot(cfg.replace(init="tl4")).state_dict().items() if v.dim() == 2}
    for name, std in study.items():
        assert abs(std - sigma) < 0.06 * sigma, (name, std)
        scaled = name.endswith(("attn.o.weight", "mlp.out.weight"))
        expected = sigma / math.sqrt(2 * n_layers) if scaled else sigma
        assert abs(tl4[name] - expected) < 0.06 * expected, (name, tl4[name])


def test_init_is_checked():
    with pytest.raises(ConfigError, match="init="):
        ModelConfig(init="xavier")


# -- the split procedure ---------------------------------------------------------------------------


def test_training_pairs_follow_pythons_random_sample_in_table_order():
    task = TaskConfig(**SMALL, f=0.6, seed=7)
    pool = [(x, y) for x in range(11) for y in range(11)]
    expected = sorted(random.Random(7).sample(pool, math.floor(0.6 * 121)))
    assert sorted(map(tuple, Split.from_task(task).train_pairs.tolist())) == expected


def test_kept_two_var_rows_follow_the_row_table_rule():
    task = TaskConfig(**SMALL, r=0.4, seed=3)
    split = Split.from_task(task)
    p, kinds = task.modulus, 4
    expected = torch.zeros(p, p, dtype=torch.long)
    for x, y in split.train_pairs.tolist():
        for v in task.allowed_left:  # the table index of (variable v, type 2-var, x, y)
            idx = ((v * kinds + 3) * p + x) * p + y
            expected[x, y] += random.Random(task.seed + idx).random() < task.r
    assert torch.equal(split.two_var_counts, expected)
    share = expected.sum().item() / (len(split.train_pairs) * len(task.allowed_left))
    assert abs(share - 0.4) < 0.08


def test_two_var_rows_are_number_pairs_and_draw_their_variables_at_every_render():
    split = Split.from_task(TaskConfig(**SMALL))
    rows = training_rows(split)
    two_var = rows[row_types(rows) == 3]
    assert (two_var[:, 2:] == ANY_PAIR).all() and len(two_var) == len(split.train_pairs) * 5
    batch = TrainingSampler(split, 4096, 0).batch(0)
    drawn = batch.rows[batch.types == 3][:, 2:]
    allowed = set(split.task.allowed_two_var_pairs)
    assert set(map(tuple, drawn.tolist())) == allowed  # every allowed pair, no other
    # one number pair rendered many times meets many variable pairs
    one = torch.tensor([[1, 2, ANY_PAIR, ANY_PAIR]]).repeat(200, 1)
    from compose_lens.data.sampler import render
    seen = set(map(tuple, render(split, one, torch.Generator().manual_seed(0)).rows[:, 2:].tolist()))
    assert len(seen) > 0.8 * len(allowed)


def test_two_var_evaluation_draws_n_uniform_on_2_to_6_and_training_clamps():
    split = Split.from_task(TaskConfig())
    uniform = assignments(split.task, make_pool(split, "2var_var_restricted_1", 4000).tokens)
    union = assignments(split.task, make_exhaustive(split, "two_var_union").tokens[:20000])
    clamped = assignments(split.task, make_pool(split, "2var_train", 4000).tokens)
    for n in (uniform, union):
        assert n.min() == 2 and abs((n == 2).float().mean().item() - 1 / 5) < 0.03
    assert abs((clamped == 2).float().mean().item() - 1 / 3) < 0.04  # max(2, U{1..6})


def test_row_table_pools_hold_distinct_rows():
    split = Split.from_task(TaskConfig())
    for name in ("1var_train", "2var_add_restricted"):
        rows = make_pool(split, name, 2000).rows
        if name == "1var_train":
            assert len(set(map(tuple, rows.tolist()))) == 2000


# -- split files -----------------------------------------------------------------------------------


def test_data_split_with_seed_42_writes_the_studys_heldout_pairs(reference_dir, tmp_path):
    assert main(["data", "split", "--seed", "42", "--out", str(tmp_path / "S.json")]) == 0
    ours = json.loads((tmp_path / "S.json").read_text())["heldout_pairs"]
    assert ours == json.loads((reference_dir / "split.json").read_text())["heldout_pairs"]


def test_split_file_round_trips_its_kept_rows(tmp_path):
    split = Split.from_task(TaskConfig(**SMALL, r=0.3, seed=5))
    split.save(tmp_path / "s.json")
    again = Split.load(tmp_path / "s.json")
    assert again.task.seed == 5 and again.task.r == 0.3
    assert torch.equal(again.two_var_counts, split.two_var_counts)
    assert torch.equal(again.heldout_pairs, split.heldout_pairs)


def test_own_heldout_pairs_load_though_not_the_procedures(tmp_path):
    data = Split.from_task(TaskConfig(**SMALL)).to_dict()
    data.pop("two_var_rows_per_pair")
    data["heldout_pairs"] = [[0, 1], [3, 4], [10, 10]]
    (tmp_path / "own.json").write_text(json.dumps(data))
    split = Split.load(tmp_path / "own.json")
    assert split.heldout_pairs.tolist() == [[0, 1], [3, 4], [10, 10]]


@pytest.mark.parametrize("change, message", [
    ({"heldout_pairs": [[0.5, 1]]}, "not two integers"),
    ({"heldout_pairs": [[0, 1, 2]]}, "not two integers"),
    ({"heldout_pairs": [[0, 1], [0, 1]]}, "twice"),
    ({"heldout_pairs": [[0, 11]]}, "outside 0..10"),
    ({"modulus": 10 ** 9}, "modulus"),
    ({"modulus": "59"}, "modulus"),
    ({"variables": ["a", "b", "c", "d", "e", "x"]}, "variables"),
])
def test_split_files_that_contradict_the_task_are_refused(tmp_path, change, message):
    data = {**Split.from_task(TaskConfig(**SMALL)).to_dict(), **change}
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=message):
        Split.load(tmp_path / "bad.json")


def test_a_split_for_another_modulus_is_refused_for_this_task(tmp_path):
    Split.from_task(TaskConfig(**SMALL)).save(tmp_path / "s.json")
    with pytest.raises(ConfigError, match="modulus 11"):
        Split.load(tmp_path / "s.json", TaskConfig())
