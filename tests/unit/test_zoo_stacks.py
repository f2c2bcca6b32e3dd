"""The zoo's trained models are grouped for stacked training only where one process can train them together."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments"))
import zoo  # noqa: E402

TRAINED = [e for e in zoo.ENTRIES if e.how == "train"]


def test_a_trained_entry_is_the_configuration_its_command_makes():
    recipe = zoo.config_of(next(e for e in TRAINED if e.name == "recipe-2021"))
    assert (recipe.task.seed, recipe.model.init_seed, recipe.train.seed) == (2021, 2021, 2021)
    assert (recipe.train.steps, recipe.train.stop_at, recipe.train.threads) == (20000, "generalised", 1)
    assert zoo.config_of(next(e for e in TRAINED if e.name == "heads2-2021")).model.n_heads == 2


def test_stacks_hold_one_shape_each_at_most_k():
    for k in (1, 3, 8):
        groups = zoo.stacks(TRAINED, k)
        assert sorted(e.name for g in groups for e in g) == sorted(e.name for e in TRAINED)  # each entry once
        assert all(len(g) <= k for g in groups)
        assert all(len({e.shape for e in g}) == 1 for g in groups)
    groups = zoo.stacks(TRAINED, 8)
    assert [len(g) for g in groups if g[0].name.startswith("recipe")] == [8]
    for name in ("heads2-2021", "mlp01-2021", "layers3-2021", "ln-2021"):  # other shapes (LayerNorm: no fast forward)
        assert [[e.name for e in g] for g in groups if any(e.name == name for e in g)] == [[name]]
