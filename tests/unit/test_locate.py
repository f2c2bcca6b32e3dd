"""analysis.locate: the circuit's roles found in any architecture, and the Fourier analyses reading the
located adder, never a hard-coded blocks.1 (issue #28)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from compose_lens import runs
from compose_lens.analysis import locate, probes
from compose_lens.analysis.summary import FOURIER_KEYS, MEASURE_KEYS, circuit_measures, circuit_summary, fourier_block
from compose_lens.config import ComposeLensError, ModelConfig, RunConfig
from compose_lens.model import tl
from compose_lens.report.outputs import fourier_plan, write_fourier


PROBE_KEYS = [k for k in MEASURE_KEYS if k not in FOURIER_KEYS]


@pytest.fixture(scope="module")
def paper():
    try:
        return runs.load_model("paper", bridge=False)
    except ComposeLensError:
        pytest.skip("the paper model is not installed")


@pytest.fixture(scope="module")
def planted(paper):
    """The paper model as a 3-layer model: blocks.0 as the paper's, blocks.1 a no-op attention (zero output)
    plus a live but nearly silent MLP, blocks.2 the paper's layer 2 (router head and adder MLP). Same
    function as the paper model; its adder is blocks.2.mlp, while blocks.1 holds an MLP too, so an
    analysis hard-coded to blocks.1 reads the wrong MLP."""
    config = paper.config
    model_cfg = config.model.replace(n_layers=3, mlp_layers=(1, 2))
    cfg = dataclasses.replace(config, model=model_cfg)
    src = tl.parameters(paper.model)
    g = torch.Generator().manual_seed(0)
    state = {}
    for name, shape in tl.state_shapes(model_cfg).items():
        if name.startswith("blocks.2."):
            state[name] = src[name.replace("blocks.2.", "blocks.1.")].clone()
        elif name.startswith("blocks.1.") and name.endswith(".weight") and ".attn.o." not in name:
            scale = 1e-4 if ".mlp.out." in name else 0.1
            state[name] = scale * torch.randn(shape, generator=g)
        elif name in src and not name.startswith("blocks.1."):
            state[name] = src[name].clone()
        else:
            state[name] = torch.zeros(shape)  # blocks.1's attention output and every bias
    model = runs.model_of(cfg, state, "planted", bridge=False)
    return runs.for_analyses(runs.Loaded(model, cfg, paper.split, "planted 3-layer"))  # a bridge: hooks


def test_paper_model_is_located_as_the_study_says(paper):
    found = locate.locate(paper.model, paper.config, paper.split)
    assert (found.binder.layer, found.binder.head) == (0, 0)
    assert (found.router.layer, found.router.head) == (1, 0)
    assert found.adder.component == "blocks.1.mlp"
    for role in found.roles():
        assert role.score >= role.threshold
    # each role's runner-up is far below its threshold: the choice is not a close call
    table = found.candidates
    for role in ("binder", "router"):
        others = table[(table["role"] == role) & (table["component"] != getattr(found, role).component)]
        assert (others["score"] < locate.THRESHOLDS[role] / 2).all()


def test_adder_in_blocks_2_is_analysed_there_not_at_blocks_1(paper, planted, tmp_path):
    found = locate.locate(planted.model, planted.config, planted.split)
    assert (found.binder.layer, found.binder.head) == (0, 0)
    assert (found.router.layer, found.router.head) == (2, 0)
    assert found.adder.component == "blocks.2.mlp"
    mlp1 = found.candidates[found.candidates["component"] == "blocks.1.mlp"].iloc[0]
    assert mlp1["score"] < locate.THRESHOLDS["adder"]  # it exists, but does not add

    facts = write_fourier(planted, tmp_path, seed=0)
    assert facts["mlp_block"] == 2 and facts["fourier_subject"]["adds"]
    # the same function as the paper model, so the same key frequencies as its blocks.1 MLP
    paper_keys = locate.locate_adder(paper.model, paper.config, paper.split)[1]["key_frequencies"].iloc[0]
    assert facts["key_frequencies"] == paper_keys and len(paper_keys) >= 3
    assert facts["key_frequency_strength"] > 0.6 and facts["constant_grid_accuracy"] > 0.95
    assert (tmp_path / "locate.json").exists()

    # summary and dynamics read the same MLP (their grids are fourier's, tested above)
    assert fourier_block(planted.model, planted.config, planted.split) == 2


def test_no_trainable_mlp_reports_none_for_the_adder(tiny_config, tiny_split):
    config = dataclasses.replace(tiny_config, model=tiny_config.model.replace(mlp_layers=()))
    model = tl.boot(config.model)
    found = locate.locate(model, config, tiny_split, n=120)
    assert found.adder.component is None and found.adder.layer is None
    assert "none" in found.adder.line()
    assert not (found.candidates["role"] == "adder").any()
    subject = locate.fourier_subject(model, config, tiny_split)
    assert subject.layer is None and "no MLP" in subject.note
    with pytest.raises(ComposeLensError, match="no MLP"):
        fourier_plan(runs.Loaded(model, config, tiny_split, "no-mlp"), seed=0)
    measures = circuit_measures(model, config, tiny_split, n=120)
    assert all(math.isnan(measures[k]) for k in FOURIER_KEYS)


def test_an_mlp_that_is_not_the_last_block_is_refused_in_one_line(tiny_config, tiny_split):
    config = dataclasses.replace(tiny_config, model=tiny_config.model.replace(n_layers=3, mlp_layers=(1,)))
    loaded = runs.Loaded(tl.boot(config.model), config, tiny_split, "middle-mlp")
    with pytest.raises(ComposeLensError, match="last block") as refused:
        fourier_plan(loaded, seed=0)
    assert "\n" not in str(refused.value)


def test_n_layers_alone_puts_the_mlp_in_the_last_block():
    assert ModelConfig().mlp_layers == (1,)
    assert ModelConfig(n_layers=3).mlp_layers == (2,)
    assert RunConfig().with_overrides(["n_layers=3"]).model.mlp_layers == (2,)
    assert RunConfig().with_overrides(["n_layers=3", "mlp_layers=[1]"]).model.mlp_layers == (1,)
    assert RunConfig.from_dict({"model": {"n_layers": 4}}).model.mlp_layers == (3,)
    assert RunConfig().to_dict()["model"]["mlp_layers"] == [1]  # the paper's configs are written as before


# -- the probes read the located binder and router (issue #28) --------------------------------------


@pytest.fixture(scope="module")
def second_head(paper):
    """The paper model with two heads per layer: head 1 holds the paper's head, head 0 random queries,
    keys and values but a zero output. Same function as the paper model; an analysis hard-coded to
    head 0 reads a head that does nothing."""
    config = paper.config
    model_cfg = config.model.replace(n_heads=2)
    cfg = dataclasses.replace(config, model=model_cfg)
    src = tl.parameters(paper.model)
    g = torch.Generator().manual_seed(0)
    d = config.model.d_head
    state = {}
    for name, shape in tl.state_shapes(model_cfg).items():
        if name.endswith(("attn.q.weight", "attn.k.weight", "attn.v.weight")):
            state[name] = torch.cat([0.05 * torch.randn(d, shape[1], generator=g), src[name]])
        elif name.endswith("attn.o.weight"):
            state[name] = torch.cat([torch.zeros(shape[0], d), src[name]], dim=1)
        elif name.endswith(("attn.q.bias", "attn.k.bias", "attn.v.bias")):
            state[name] = torch.cat([torch.zeros(d), src[name]])
        else:
            state[name] = src[name].clone()
    model = runs.model_of(cfg, state, "second head", bridge=False)
    return runs.for_analyses(runs.Loaded(model, cfg, paper.split, "paper model in head 1"))


def test_paper_architecture_probes_read_the_papers_heads_unlocated(paper):
    heads = locate.circuit_heads(paper.model, paper.config, paper.split)
    assert heads == probes.PAPER_HEADS
    assert heads.to_dict()["binder"]["component"] == "blocks.0 head 0" and heads.to_dict()["none"] == []


def test_probes_read_the_located_heads_not_head_0(paper, second_head):
    heads = locate.circuit_heads(second_head.model, second_head.config, second_head.split)
    assert (heads.binder, heads.router) == ((0, 1), (1, 1)) and heads.how.startswith("located")
    reference = circuit_measures(paper.model, paper.config, paper.split)
    located = circuit_measures(second_head.model, second_head.config, second_head.split)  # locates
    for key in PROBE_KEYS:
        assert located[key] == pytest.approx(reference[key], abs=1e-4), key
    head0 = circuit_measures(second_head.model, second_head.config, second_head.split,
                             heads=probes.Heads((0, 0), (1, 0), "head 0"))
    assert head0["prev_token_attention_mass"] < 0.5 < reference["prev_token_attention_mass"]


def test_a_role_no_head_plays_is_nan_and_named(tiny_config, tiny_split):
    config = dataclasses.replace(tiny_config, model=tiny_config.model.replace(n_heads=2, d_head=16))
    loaded = runs.for_analyses(runs.Loaded(tl.boot(config.model), config, tiny_split, "untrained"))
    nobody = probes.Heads(None, None, "none")
    measures = circuit_measures(loaded.model, config, tiny_split, n=120, heads=nobody)
    assert all(math.isnan(measures[k]) for k in PROBE_KEYS)
    summary = circuit_summary(loaded.model, config, tiny_split, n=120, heads=nobody)
    assert summary["circuit_heads"]["none"] == ["binder", "router"]
    assert summary["prev_token_attention_score"] is None  # NaN, written as JSON null
    assert all(v["equals_to_values_score"] is None for v in summary["scores_by_type"].values())
    # a binder without a router: its own measures are read, the router's are not
    binder_only = circuit_measures(loaded.model, config, tiny_split, n=120, heads=probes.Heads((0, 1), None))
    assert not math.isnan(binder_only["prev_token_attention_mass"])
    assert math.isnan(binder_only["equals_to_values_mass"]) and math.isnan(binder_only["variable_identity_score"])
