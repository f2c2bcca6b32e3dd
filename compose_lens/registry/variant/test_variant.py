"""The variant reading (compose_lens.registry.variant.reading) reports what the attention does.

Each test plants an attention pattern whose answer is known (from ``=`` all on the latest value, or
all on the stale one; from each value to its variable, or to the token before it) and checks that
the tables and facts say so; then the registry's ``applies`` keeps the analysis to variant tasks.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from compose_lens import registry
from compose_lens.registry.variant import reading as vr
from compose_lens.analysis.locate import Location, Role
from compose_lens.core.config import ModelConfig, RunConfig, TaskConfig
from compose_lens.data.sampler import make_pool
from compose_lens.data.split import Split
from compose_lens.data.variants import bindings
from compose_lens.training.subject import Subject


def task_of(**variants) -> TaskConfig:
    return TaskConfig(modulus=11, n_vars=6, left_forbidden=("f",), right_forbidden=("a",), f=0.7, **variants)


def config_of(task: TaskConfig) -> RunConfig:
    return RunConfig(task=task, model=ModelConfig.for_task(task, d_model=32, d_head=32, d_mlp=64))


def located(binder=True, router=True) -> Location:
    return Location(binder=Role("binder", "blocks.0 head 0" if binder else None, 0, 0, 1.0, 0.5),
                    router=Role("router", "blocks.1 head 0" if router else None, 1, 0, 1.0, 0.5),
                    adder=Role("adder", "blocks.1.mlp", 1, None, 1.0, 0.5), candidates=pd.DataFrame())


def planted(tokens: torch.Tensor, task: TaskConfig, router_to: str, binder_to: str) -> list[torch.Tensor]:
    """Patterns (2 layers, 1 head): layer 2's ``=`` all on the queried variables' latest values
    (``router_to="latest"``) or on their stale values (``"stale"``), split evenly; layer 1 at each
    context value all on its variable (``binder_to="variable"``) or on the token before it
    (``"previous"``); uniform elsewhere."""
    B, n = tokens.shape
    uniform = torch.tril(torch.ones(n, n)) / torch.arange(1, n + 1).unsqueeze(1)
    layer0, layer1 = uniform.repeat(B, 1, 1, 1), uniform.repeat(B, 1, 1, 1)
    found = bindings(task, tokens)
    targets = found.operand_value_positions(task, tokens)
    last = torch.zeros(B, n)
    for b in range(B):
        if router_to == "latest":
            places = [int(t) for t in targets[b] if t < task.context_len]  # a variable operand's value
        else:  # a queried variable's values other than its latest
            operands = tokens[b, task.context_len + 1: task.context_len + 3]
            places = [t for t in range(task.context_len) if found.variable_of[b, t] >= 0
                      and tokens[b, found.variable_of[b, t]] in operands and t not in targets[b].tolist()
                      and tokens[b, t] < task.modulus]
            places = places or [n - 1]
        for t in places:
            last[b, t] += 1 / len(places)
    layer1[:, 0, -1] = last
    context = tokens[:, : task.context_len]
    seq, pos = ((found.variable_of >= 0) & (context < task.modulus)).nonzero(as_tuple=True)
    aim = found.variable_of[seq, pos] if binder_to == "variable" else pos - 1
    layer0[seq, 0, pos] = 0.0
    layer0[seq, 0, pos, aim] = 1.0
    return [layer0, layer1]


@pytest.fixture(scope="module")
def reassigned():
    task = task_of(reassign_rate=0.5)
    return config_of(task), make_pool(Split.from_task(task), "reassign_latest", 200, seed=0).tokens


@pytest.mark.parametrize("router_to, share", [("latest", 1.0), ("stale", 0.0)])
def test_the_router_on_the_latest_or_the_stale_value_is_read_as_such(reassigned, router_to, share):
    config, tokens = reassigned
    patterns = planted(tokens, config.task, router_to, "variable")
    assert vr.latest_over_stale(config, tokens, patterns, located()) == share
    table = vr.attention_by_role(config, tokens, patterns, located())
    router = table[table["head"] == "router"].set_index("role")
    on, off = ("queried value", "stale value") if router_to == "latest" else ("stale value", "queried value")
    assert router.loc[on, "mean"] > 0.99 and router.loc[off, "mean"] < 0.01, router
    assert router.loc["stale value", "n"] == len(tokens)  # every reassign_latest sequence has a stale value


def test_no_router_located_means_no_reading(reassigned):
    config, tokens = reassigned
    patterns = planted(tokens, config.task, "latest", "variable")
    assert vr.latest_over_stale(config, tokens, patterns, located(router=False)) is None
    assert set(vr.attention_by_role(config, tokens, patterns, located(router=False))["head"]) == {"binder"}


@pytest.fixture(scope="module")
def noisy():
    task = task_of(noise_rate=0.6)
    return config_of(task), make_pool(Split.from_task(task), "1var_train", 300, seed=0).tokens


@pytest.mark.parametrize("binder_to", ["variable", "previous"])
def test_binding_through_fillers_tells_the_variable_from_the_token_before(noisy, binder_to):
    config, tokens = noisy
    table = vr.binding_through_fillers(config, tokens, planted(tokens, config.task, "latest", binder_to),
                                       located()).set_index("fillers")
    assert {0, 1} <= set(table.index) and table["n"].sum() > 0
    adjacent, through = table.loc[0], table.loc[1]
    assert adjacent["to_variable"] == pytest.approx(1.0) and adjacent["previous"] == pytest.approx(1.0)
    if binder_to == "variable":
        assert through["to_variable"] == pytest.approx(1.0) and through["previous"] < 0.01
    else:
        assert through["to_variable"] < 0.01 and through["previous"] == pytest.approx(1.0)


def test_binding_without_a_binder_is_empty(noisy):
    config, tokens = noisy
    assert vr.binding_through_fillers(config, tokens, planted(tokens, config.task, "latest", "variable"),
                                      located(binder=False)).empty


def test_the_variant_analysis_reads_variant_tasks_only():
    analysis = registry.by_name(registry.ANALYSES, "variant")
    assert not analysis.reads(config_of(task_of()))
    assert not analysis.reads(config_of(task_of(seq_len=24, max_assignments=6)))  # longer alone: nothing new
    assert analysis.reads(config_of(task_of(reassign_rate=0.1)))
    assert analysis.reads(config_of(task_of(noise_rate=0.1)))
    assert all(a.reads(config_of(task_of())) for a in registry.ANALYSES if a.name != "variant")


def test_the_facts_ask_only_what_the_task_asks(reassigned, monkeypatch):
    config, tokens = reassigned
    patterns = planted(tokens, config.task, "latest", "variable")
    monkeypatch.setattr(vr, "trace", lambda model, config, tokens: type("T", (), {"patterns": patterns}))
    monkeypatch.setattr(vr, "sequences", lambda split, n, seed: (type("B", (), {"tokens": tokens}), "planted"))
    tables, facts = vr.variant_reading(Subject(None, config, None, "test"), located())
    assert facts["router_latest_over_stale"] == 1.0 and not math.isnan(facts["router_on_stale_values"])
    assert "binder_through_one_filler" not in facts and "router_on_fillers" not in facts  # no fillers asked
    assert set(tables) == {"attention_by_role", "binding_through_fillers"}
