"""compose_lens.registry.modularity on planted models: a model whose skills sit in distinct components scores
modular, one whose binding and addition share a component (or whose function is spread over every head,
or whose variables reach the adder another way) does not (issue #27).

Every plant computes the paper model's function exactly (checked), so accuracy cannot tell them apart:
only where the computation runs differs."""

from __future__ import annotations

import dataclasses
import pytest
import torch

from compose_lens.registry.modularity import measures as modularity
from compose_lens.data.sampler import make_pools
from compose_lens.training.evaluate import answer_logits
from compose_lens.model import tl

from test_locate import plant  # the paper's roles rebuilt at given heads of another architecture
from compose_lens.training.subject import Subject, for_analyses, model_of


def loaded(paper, cfg, state, name):
    config = dataclasses.replace(paper.config, model=cfg)
    model = model_of(config, state, name, bridge=False)
    return for_analyses(Subject(model, config, paper.split, name))


def relay(paper):
    """Entangled: the paper model with one MLP on both skills' paths. The residual doubles (A: the
    paper's, S: a scratch half). Number tokens embed into S, and layer 1's head reads A + S but writes
    into S; an MLP in blocks.0 (ReLU pairs, relu(x) - relu(-x) = x) copies S into A, so after block 0
    A holds the paper's stream exactly, and layer 2, MLP2 and the unembedding read A only. So blocks.0's
    MLP carries the binding at the context positions and the constant addends at the query positions."""
    src = {k: v.detach().float() for k, v in tl.parameters(paper.model).items()}
    cfg0, p = paper.config.model, paper.config.task.modulus
    d = cfg0.d_model
    A, S = slice(0, d), slice(d, 2 * d)
    cfg = cfg0.replace(d_model=2 * d, mlp_blocks=(0, 1))
    W = {name: torch.zeros(shape) for name, shape in tl.state_shapes(cfg).items()}
    W["embed.weight"][p:, A] = src["embed.weight"][p:]
    W["embed.weight"][:p, S] = src["embed.weight"][:p]
    W["pos_embed.weight"][:, A] = src["pos_embed.weight"]
    for kind in "qkv":
        for half in (A, S):
            W[f"blocks.0.attn.{kind}.weight"][:, half] = src[f"blocks.0.attn.{kind}.weight"]
        W[f"blocks.1.attn.{kind}.weight"][:, A] = src[f"blocks.1.attn.{kind}.weight"]
    W["blocks.0.attn.o.weight"][S] = src["blocks.0.attn.o.weight"]
    W["blocks.1.attn.o.weight"][A] = src["blocks.1.attn.o.weight"]
    eye = torch.eye(d)
    W["blocks.0.mlp.in.weight"][:d, S], W["blocks.0.mlp.in.weight"][d: 2 * d, S] = eye, -eye
    W["blocks.0.mlp.out.weight"][A, :d], W["blocks.0.mlp.out.weight"][A, d: 2 * d] = eye, -eye
    W["blocks.1.mlp.in.weight"][:, A] = src["blocks.1.mlp.in.weight"]
    W["blocks.1.mlp.out.weight"][A] = src["blocks.1.mlp.out.weight"]
    W["unembed.weight"][:, A] = src["unembed.weight"]
    return loaded(paper, cfg, W, "relay: blocks.0.mlp binds and carries the addends")


def spread(paper, heads: int = 4):
    """Distributed: every paper head copied into ``heads`` heads of its layer with the same queries, keys
    and values and a quarter of its output each: the same function, each head doing a share of it."""
    src = {k: v.detach().float() for k, v in tl.parameters(paper.model).items()}
    cfg = paper.config.model.replace(n_heads=heads)
    W = {name: torch.zeros(shape) for name, shape in tl.state_shapes(cfg).items()}
    for name in W:
        if name in src and ".attn." not in name:
            W[name] = src[name].clone()
    for layer in (0, 1):
        for kind in "qkv":
            W[f"blocks.{layer}.attn.{kind}.weight"] = src[f"blocks.{layer}.attn.{kind}.weight"].repeat(heads, 1)
        W[f"blocks.{layer}.attn.o.weight"] = src[f"blocks.{layer}.attn.o.weight"].repeat(1, heads) / heads
    return loaded(paper, cfg, W, f"the paper's heads spread over {heads}")


def same_function(paper, other) -> float:
    pool = make_pools(paper.split, 300, 0)["2var_train"].tokens
    answers = [answer_logits(x.model, x.config.model, pool).argmax(-1) for x in (paper, other)]
    return float((answers[0] == answers[1]).float().mean())


@pytest.fixture(scope="module")
def modular(paper):
    return plant(paper, n_layers=2, n_heads=4, mlp_blocks=(1,), binder=(0, 2), router=(1, 3), adder=1)


@pytest.fixture(scope="module")
def entangled(paper):
    return relay(paper)


def test_plants_compute_the_paper_models_function(paper, modular, entangled):
    for other in (modular, entangled, spread(paper)):
        assert same_function(paper, other) > 0.99, other.source


def test_binding_pairs_swap_only_the_binding(paper):
    pairs = modularity.binding_pairs(paper.split, 40)
    assert len(pairs) == 40
    assert (pairs.clean_labels != pairs.corrupted_labels).all()
    # the same tokens, two variable names swapped in the context, the query untouched
    assert (pairs.clean.sort(1).values == pairs.corrupted.sort(1).values).all()
    assert ((pairs.clean != pairs.corrupted).sum(1) == 2).all()
    C = paper.split.task.context_len
    assert (pairs.clean[:, C:] == pairs.corrupted[:, C:]).all()


def test_modular_plant_separates_binding_from_addition(modular):
    a = modularity.separation(modular, n_pairs=30, steps=4)
    assert a["separation"] >= modularity.SEPARATION_MIN, (a["binding"], a["adding"])
    assert a["binding"].index[0] == "a0.h2"  # the planted binder, found by attribution
    assert modularity.attribution_adder(a["adding"]) == "blocks.1.mlp"


def test_relay_plant_shares_a_component_and_is_not_separated(entangled):
    a = modularity.separation(entangled, n_pairs=30, steps=4)
    assert a["separation"] < modularity.SEPARATION_MIN, (a["binding"], a["adding"])
    assert a["binding"]["m0"] > 0.2 and a["adding"]["m0"] > 0.2  # the relay MLP on both paths


def test_spread_plant_needs_a_larger_share_of_its_graph(paper, modular):
    spread_model = spread(paper)
    sizes = dict(n_pairs=30, pool_size=60, steps=4)
    concentrated = modularity.circuit_fraction(modular, **sizes)
    distributed = modularity.circuit_fraction(spread_model, **sizes)
    assert distributed["fraction"] > 1.5 * concentrated["fraction"], (concentrated, distributed)
    for found in (concentrated, distributed):  # each size inside its bootstrap interval over the pools' pairs
        low, high = found["fraction_ci95"]
        assert low <= found["fraction"] <= high, found


def test_the_coarse_search_finds_the_size_every_size_finds(paper):
    from compose_lens.registry.circuit import discovery as circuit

    gm = circuit.GraphModel.from_model(paper.model, paper.config.model)
    pairs = circuit.resample_pairs(paper.split, 30)
    scores = circuit.eap_ig_scores(gm, pairs, circuit.baseline(gm, pairs), 4)
    every, _ = circuit.size_on_pools(gm, paper.split, scores, 0.95, 60)
    coarse, whole = modularity.smallest_circuit(gm, paper.split, scores, 0.95, 60, coarse=5)  # sizes 0, 3, 6, 10, 13, 16: the answer lies between two
    assert coarse == every and whole >= 0.95


def test_same_adder_is_one_for_the_modular_plant_and_zero_for_variables_elsewhere(modular, orthogonal_plant):
    """``orthogonal_plant`` (conftest.py): the verdict zoo's planted model whose variables reach MLP2 in
    another subspace than constants."""
    assert modularity.same_adder(modular, n=40)["same_adder"] == 1.0
    found = modularity.same_adder(orthogonal_plant, n=40)
    assert found["same_adder"] == 0.0, found
    assert modularity.verdict(0.95, found["same_adder"]) == "entangled"


def test_a_model_that_has_not_learned_is_inconclusive_not_a_number(tiny_config, tiny_split):
    model = for_analyses(Subject(tl.boot(tiny_config.model), tiny_config, tiny_split, "untrained")).model
    row = modularity.measure(Subject(model, tiny_config, tiny_split, "test"))
    for column in modularity.COLUMNS:
        if column != "modularity_reason":
            assert row[column] == modularity.INCONCLUSIVE, column
    assert row["modularity_reason"].startswith("the model has not learned the task")


def test_verdict_rules():
    assert modularity.verdict(0.9, 1.0) == "modular"
    assert modularity.verdict(0.5, 1.0) == "entangled"
    assert modularity.verdict(0.9, modularity.INCONCLUSIVE) == modularity.INCONCLUSIVE
    assert modularity.verdict(modularity.INCONCLUSIVE, 1.0) == modularity.INCONCLUSIVE


def test_the_separation_interval_holds_the_score_and_narrows_with_more_pairs(paper):
    widths = []
    for n_pairs in (20, 80):
        a = modularity.separation(paper, n_pairs=n_pairs, steps=4)
        low, high = a["separation_ci95"]
        assert low <= a["separation"] <= high, a["separation_ci95"]
        widths.append(high - low)
    assert 0 < widths[1] < widths[0], widths


def _pool_runs(read: dict[int, torch.Tensor], n: int) -> "modularity.PoolRuns":
    """A PoolRuns of one pool of ``n`` pairs (clean 1, corrupted 0) whose circuits of each size in
    ``read`` gave those metrics per pair, without a model."""
    runs = object.__new__(modularity.PoolRuns)
    runs.pools = {"pool": [None] * n}
    runs.ends = {"pool": (torch.ones(n), torch.zeros(n))}
    runs.read = {size: {"pool": row} for size, row in read.items()}
    return runs


def test_the_circuit_size_interval_is_one_size_where_the_pairs_agree_and_a_range_where_they_differ():
    alike = {k: torch.full((40,), share) for k, share in ((0, 0.0), (4, 0.5), (8, 0.97), (12, 1.0))}
    assert _pool_runs(alike, 40).size_interval(0.95, 12) == [8, 8]
    quick = torch.tensor([0.0, 1.0, 1.0, 1.0])  # shares recovered at sizes 0, 4, 8, 12 by two kinds of pair
    slow = torch.tensor([0.0, 0.0, 0.2, 1.0])
    mixed = {k: torch.cat([quick[i].repeat(20), slow[i].repeat(20)]) for i, k in enumerate((0, 4, 8, 12))}
    low, high = _pool_runs(mixed, 40).size_interval(0.55, 12)
    assert low < high and {low, high} <= {4, 8, 12}
