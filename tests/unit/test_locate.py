"""analysis.locate: the circuit's roles found in any architecture, and the Fourier analyses reading the
located adder, never a hard-coded blocks.1 (issue #28)."""

from __future__ import annotations

import dataclasses
import json
import math

import pandas as pd
import pytest
import torch

from compose_lens.analysis import locate, probes
from compose_lens.registry.probes.summary import (FOURIER_KEYS, MEASURE_KEYS, circuit_measures, circuit_summary,
                                                  fourier_block)
from compose_lens.core.config import ModelConfig, RunConfig
from compose_lens.core.coverage import PAPER_MODEL_DIR
from compose_lens.core.errors import ConfigError
from compose_lens.core.errors import ComposeLensError
from compose_lens.model import tl
from compose_lens.report.context import fourier_plan
from compose_lens.report.context import run_analysis
from compose_lens.training.subject import Subject, for_analyses, model_of
from tests.planted import takes_the_papers_gate


PROBE_KEYS = [k for k in MEASURE_KEYS if k not in FOURIER_KEYS]


@pytest.fixture(scope="module")
def planted(paper):
    """The paper model as a 3-layer model: blocks.0 as the paper's, blocks.1 a no-op attention (zero output)
    plus a live but nearly silent MLP, blocks.2 the paper's layer 2 (router head and adder MLP). Same
    function as the paper model; its adder is blocks.2.mlp, while blocks.1 holds an MLP too, so an
    analysis hard-coded to blocks.1 reads the wrong MLP."""
    config = paper.config
    model_cfg = config.model.replace(n_layers=3, mlp_blocks=(1, 2))
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
    model = model_of(cfg, state, "planted", bridge=False)
    return for_analyses(Subject(model, cfg, paper.split, "planted 3-layer"))  # a bridge: hooks


def test_paper_model_is_located_as_the_study_says(paper):
    found = locate.locate(paper)
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
    found = locate.locate(planted)
    assert (found.binder.layer, found.binder.head) == (0, 0)
    assert (found.router.layer, found.router.head) == (2, 0)
    assert found.adder.component == "blocks.2.mlp"
    mlp1 = found.candidates[found.candidates["component"] == "blocks.1.mlp"].iloc[0]
    assert mlp1["score"] < locate.THRESHOLDS["adder"]  # it exists, but does not add

    facts = run_analysis("fourier", planted, tmp_path).value
    assert facts["mlp_block"] == 2 and facts["fourier_subject"]["adds"]
    # the same function as the paper model, so the same key frequencies as its blocks.1 MLP
    paper_keys = locate.locate_adder(paper)[1]["key_frequencies"].iloc[0]
    assert facts["key_frequencies"] == paper_keys and len(paper_keys) >= 3
    assert facts["key_frequency_strength"] > 0.6 and facts["constant_grid_accuracy"] > 0.95
    assert (tmp_path / "locate.json").exists()

    # summary and dynamics read the same MLP (their grids are fourier's, tested above)
    assert fourier_block(planted) == 2


def test_no_trainable_mlp_reports_none_for_the_adder(tiny_config, tiny_split):
    config = dataclasses.replace(tiny_config, model=tiny_config.model.replace(mlp_blocks=()))
    model = tl.boot(config.model)
    found = locate.locate(Subject(model, config, tiny_split, "test"), n=120)
    assert found.adder.component is None and found.adder.layer is None
    assert "none" in found.adder.line()
    assert not (found.candidates["role"] == "adder").any()
    subject = locate.fourier_subject(Subject(model, config, tiny_split, "test"))
    assert subject.layer is None and "no MLP" in subject.note
    with pytest.raises(ComposeLensError, match="no MLP"):
        fourier_plan(Subject(model, config, tiny_split, "no-mlp"), seed=0)
    measures = circuit_measures(Subject(model, config, tiny_split, "test"), n=120)
    assert all(math.isnan(measures[k]) for k in FOURIER_KEYS)


def test_an_mlp_that_is_not_the_last_block_is_read_where_it_is(tiny_config, tiny_split):
    config = dataclasses.replace(tiny_config, model=tiny_config.model.replace(n_layers=3, mlp_blocks=(1,)))
    loaded = Subject(tl.boot(config.model), config, tiny_split, "middle-mlp")
    _, subject = fourier_plan(loaded, seed=0)
    assert subject.layer == 1  # the only MLP, in the middle: read there, no longer refused
    assert fourier_block(Subject(loaded.model, config, tiny_split, "test")) == 1


def test_n_layers_alone_puts_the_mlp_in_the_last_block():
    assert ModelConfig().mlp_blocks == (1,)
    assert ModelConfig(n_layers=3).mlp_blocks == (2,)
    assert RunConfig().with_overrides(["n_layers=3"]).model.mlp_blocks == (2,)
    assert RunConfig().with_overrides(["n_layers=3", "mlp_blocks=[1]"]).model.mlp_blocks == (1,)
    assert RunConfig.from_dict({"model": {"n_layers": 4}}).model.mlp_blocks == (3,)
    assert RunConfig().to_dict()["model"]["mlp_blocks"] == [1]  # the paper's layer 2, blocks.1, as before


def test_runs_written_with_the_old_key_still_load():
    """Configs written before the rename (the embedded paper run, committed sweeps) say mlp_layers."""
    legacy = RunConfig.from_dict({"model": {"n_layers": 3, "mlp_layers": [0, 2]}})
    assert legacy.model.mlp_blocks == (0, 2)
    assert "mlp_layers" not in legacy.to_dict()["model"]
    paper = json.loads((PAPER_MODEL_DIR / "config.json").read_text())
    assert "mlp_layers" in paper["model"]  # the embedded run keeps its original file
    assert RunConfig.from_dict(paper).model.mlp_blocks == (1,)
    with pytest.raises(ConfigError, match="both mlp_layers .* and mlp_blocks"):
        RunConfig.from_dict({"model": {"mlp_layers": [1], "mlp_blocks": [1]}})


@pytest.mark.parametrize("key", ["mlp_layers", "model.mlp_layers"])
def test_the_old_key_on_the_command_line_says_what_it_became(key):
    with pytest.raises(ConfigError, match=r"mlp_layers is now mlp_blocks: 0-based block indices .*mlp_blocks=\[1\]"):
        RunConfig().with_overrides([f"{key}=[1]"])


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
    model = model_of(cfg, state, "second head", bridge=False)
    return for_analyses(Subject(model, cfg, paper.split, "paper model in head 1"))


def test_paper_architecture_probes_read_the_papers_heads_unlocated(paper):
    heads = locate.circuit_heads(paper)
    assert heads == probes.PAPER_HEADS
    assert heads.to_dict()["binder"]["component"] == "blocks.0 head 0" and heads.to_dict()["none"] == []


def test_probes_read_the_located_heads_not_head_0(paper, second_head):
    heads = locate.circuit_heads(second_head)
    assert (heads.binder, heads.router) == ((0, 1), (1, 1)) and heads.how.startswith("located")
    reference = circuit_measures(paper)
    located = circuit_measures(second_head)  # locates
    for key in PROBE_KEYS:
        assert located[key] == pytest.approx(reference[key], abs=1e-4), key
    head0 = circuit_measures(second_head,
                             heads=probes.Heads((0, 0), (1, 0), "head 0"))
    assert head0["prev_token_attention_mass"] < 0.5 < reference["prev_token_attention_mass"]


def test_a_role_no_head_plays_is_nan_and_named(tiny_config, tiny_split):
    config = dataclasses.replace(tiny_config, model=tiny_config.model.replace(n_heads=2, d_head=16))
    loaded = for_analyses(Subject(tl.boot(config.model), config, tiny_split, "untrained"))
    nobody = probes.Heads(None, None, "none")
    measures = circuit_measures(Subject(loaded.model, config, tiny_split, "test"), n=120, heads=nobody)
    assert all(math.isnan(measures[k]) for k in PROBE_KEYS)
    summary = circuit_summary(Subject(loaded.model, config, tiny_split, "test"), n=120, heads=nobody)
    assert summary["circuit_heads"]["none"] == ["binder", "router", "gatherer"]
    assert summary["prev_token_attention_score"] is None  # NaN, written as JSON null
    assert all(v["equals_to_values_score"] is None for v in summary["scores_by_type"].values())
    # a binder without a router: its own measures are read, the router's are not
    binder_only = circuit_measures(Subject(loaded.model, config, tiny_split, "test"), n=120, heads=probes.Heads((0, 1), None))
    assert not math.isnan(binder_only["prev_token_attention_mass"])
    assert math.isnan(binder_only["equals_to_values_mass"]) and math.isnan(binder_only["variable_identity_score"])


# -- every family with its roles planted in known components: same-mlp, analyze's parts, fourier ----


PLANTS = {}  # (the paper model, plant's arguments) -> the model: built once (test_modularity plants the 2x4 too)


def plant(paper, n_layers: int, n_heads: int, mlp_blocks: tuple[int, ...], binder: tuple[int, int],
          router: tuple[int, int], adder: int, seed: int = 0):
    """The paper model rebuilt in another architecture: its layer-1 head at ``binder`` (block, head), its
    layer-2 head at ``router``, its MLP at ``blocks.{adder}``. Every other head has random queries, keys
    and values but a zero output; every other MLP is live but nearly silent (output weights 1e-4). The
    same function as the paper model, its roles in known places; an analysis that reads a default
    block or head reads one that does nothing. Built once per paper model and arguments (:data:`PLANTS`),
    with the paper model's exhaustive accuracies once its answers are checked (tests/planted.py)."""
    key = (id(paper), n_layers, n_heads, mlp_blocks, binder, router, adder, seed)
    if key not in PLANTS:
        subject = _plant(paper, n_layers, n_heads, mlp_blocks, binder, router, adder, seed)
        assert takes_the_papers_gate(subject, paper), subject.source
        PLANTS[key] = paper, subject
    return PLANTS[key][1]  # (the paper model kept beside it: its id is not reused)


def _plant(paper, n_layers, n_heads, mlp_blocks, binder, router, adder, seed):
    config = paper.config
    model_cfg = config.model.replace(n_layers=n_layers, n_heads=n_heads, mlp_blocks=mlp_blocks)
    cfg = dataclasses.replace(config, model=model_cfg)
    src = tl.parameters(paper.model)
    g = torch.Generator().manual_seed(seed)
    d = config.model.d_head
    state = {}
    for name, shape in tl.state_shapes(model_cfg).items():
        if not name.startswith("blocks."):
            state[name] = src[name].clone()
        elif name.endswith(".bias") or ".attn.o." in name or (".mlp." in name and int(name.split(".")[1])
                                                                   not in mlp_blocks):
            state[name] = torch.zeros(shape)  # and the frozen MLPs of blocks without one
        else:
            state[name] = (1e-4 if ".mlp.out." in name else 0.1) * torch.randn(shape, generator=g)
    for paper_block, (block, head) in ((0, binder), (1, router)):
        rows = slice(head * d, (head + 1) * d)
        for x in ("q", "k", "v"):
            state[f"blocks.{block}.attn.{x}.weight"][rows] = src[f"blocks.{paper_block}.attn.{x}.weight"]
        state[f"blocks.{block}.attn.o.weight"][:, rows] = src[f"blocks.{paper_block}.attn.o.weight"]
    for part in ("in", "out"):
        state[f"blocks.{adder}.mlp.{part}.weight"] = src[f"blocks.1.mlp.{part}.weight"].clone()
    model = model_of(cfg, state, "planted", bridge=False)
    name = f"planted {n_layers}x{n_heads}, adder blocks.{adder}"
    return for_analyses(Subject(model, cfg, paper.split, name))


FAMILIES = {  # name: plant(...) arguments, and the components each role must be found in
    "3x2 MLPs everywhere": dict(n_layers=3, n_heads=2, mlp_blocks=(0, 1, 2), binder=(0, 1), router=(2, 1), adder=2),
    "2x4": dict(n_layers=2, n_heads=4, mlp_blocks=(1,), binder=(0, 2), router=(1, 3), adder=1),
    "3x1 adder in blocks.1, an MLP after it": dict(n_layers=3, n_heads=1, mlp_blocks=(1, 2), binder=(0, 0),
                                                    router=(1, 0), adder=1),
}


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, paper):
    return request.param, FAMILIES[request.param], plant(paper, **FAMILIES[request.param])


@pytest.fixture(scope="module")
def paper_same_mlp(paper):
    from compose_lens.registry.same_mlp import comparisons as same_mlp

    return same_mlp.same_mlp_report(paper, n=60)


def test_a_plant_that_answers_otherwise_does_not_take_the_papers_gate(paper):
    """tests/planted.py gives a plant the paper model's exhaustive accuracies only after its answers are
    checked: with the unembedding negated the answers differ, so nothing is given."""
    subject = _plant(paper, seed=0, **FAMILIES["3x1 adder in blocks.1, an MLP after it"])
    with torch.no_grad():
        tl.parameters(subject.model)["unembed.weight"].mul_(-1.0)
    assert not takes_the_papers_gate(subject, paper) and subject.computed == {}


def test_each_family_is_located_in_its_planted_components(family, family_location):
    _, spec, _ = family
    found = family_location
    assert (found.binder.layer, found.binder.head) == spec["binder"]
    assert (found.router.layer, found.router.head) == spec["router"]
    assert found.adder.component == f"blocks.{spec['adder']}.mlp"
    assert (found.gatherer.layer, found.gatherer.head) == spec["binder"]  # the paper's layer-1 head gathers too


def test_same_mlp_reads_the_located_adder_and_router(family, paper_same_mlp):
    from compose_lens.registry.same_mlp import comparisons as same_mlp

    name, spec, loaded = family
    report = same_mlp.same_mlp_report(loaded, n=60)
    components = report["components"]
    assert components["adder"] == f"blocks.{spec['adder']}.mlp" and components["missing"] is None
    study = spec["n_layers"] == 2
    assert components["isolation"] == ("token" if study else "router")
    if not study:
        assert components["routers"] == ["blocks.{} head {}".format(*spec["router"])]
    # the swaps moved the operand the planted router carries into the planted adder: each type's
    # own swap (const->const) lands far above chance (1/59), which a default block or head cannot do
    table = pd.DataFrame(report["tables"]["interchange"])
    same = table[(table["kind"] == "same") & (table["isolation"] == components["isolation"])]
    assert (same[same["condition"] == "const->const"]["value"] > 0.8).all(), same
    if study:  # the study's layout with more heads: the paper's tests, the paper's answers
        assert report["verdict"] == paper_same_mlp["verdict"]
        for test in ("interchange", "feature_transfer", "probe_transfer"):
            assert report["tests"][test]["effect"] == pytest.approx(paper_same_mlp["tests"][test]["effect"], abs=0.05)
    # the feature test ablated the adder's key frequencies: units that damage constants
    assert report["tests"]["feature_transfer"]["mean_damage_const"] > 0.1


def test_fourier_and_the_summary_read_the_planted_adder(family, paper, tmp_path):
    name, spec, loaded = family
    facts = run_analysis("fourier", loaded, tmp_path).value
    assert facts["mlp_block"] == spec["adder"] and facts["fourier_subject"]["adds"]
    paper_keys = locate.locate_adder(paper)[1]["key_frequencies"].iloc[0]
    assert facts["key_frequencies"] == paper_keys
    assert facts["constant_grid_accuracy"] > 0.95 and facts["restricted_loss"] < facts["excluded_loss_all"]
    summary = circuit_summary(loaded, n=300)
    assert summary["fourier_subject"]["mlp_block"] == spec["adder"]
    assert summary["circuit_heads"]["router"]["component"] == "blocks.{} head {}".format(*spec["router"])
    assert summary["circuit_heads"]["gatherer"]["component"] == "blocks.{} head {}".format(*spec["binder"])
    assert summary["ov_mlp_addition_accuracy"] > 0.9  # the router's OV into the adder: the paper's test
    assert summary["equals_to_operands_mass"] > 0.4  # read at the planted gatherer
    last = spec["adder"] == spec["n_layers"] - 1
    assert summary["fourier_readout"].startswith("exact" if last else "direct path")


def test_a_model_where_no_mlp_adds_gets_none_located_not_a_default_block(tiny_config, tiny_split):
    from compose_lens.registry.same_mlp import comparisons as same_mlp

    config = dataclasses.replace(tiny_config, model=tiny_config.model.replace(
        n_layers=3, n_heads=2, d_head=16, mlp_blocks=(0, 1, 2)))
    model = for_analyses(Subject(tl.boot(config.model), config, tiny_split, "untrained")).model
    report = same_mlp.same_mlp_report(Subject(model, config, tiny_split, "test"), n=40)
    assert report["verdict"] == "inconclusive" and report["verdict_reason"].startswith("none located")
    assert report["components"]["adder"] is None and report["tables"] == {}
    assert all(t["status"] == "inconclusive" for t in report["tests"].values())


# -- ablate and circuit read the located adder and circuit, never blocks.1 by default (issue #28) -----


@pytest.fixture(scope="module")
def family_location(family):
    _, _, loaded = family
    return locate.locate(loaded)


@pytest.fixture(scope="module")
def paper_parts(paper):
    """The paper model's ablation rows of MLP2's key frequencies (zero ablation, small pools)."""
    from compose_lens.registry.ablation import ablations as ablation

    table = ablation.ablation_table(paper, pool_size=30, reference_size=100,
                                    kinds=("zero",), single_neurons=False)
    return table[table["target"].isin(["frequency_neurons", "fourier_directions"])]


def test_ablate_reads_the_planted_adders_neurons(family, family_location, paper_parts):
    from compose_lens.registry.ablation import ablations as ablation

    name, spec, loaded = family
    neurons = ablation.neuron_subject(loaded, adder=family_location.adder)
    assert neurons.block == spec["adder"] and "located adder" in neurons.note
    table = ablation.ablation_table(loaded, pool_size=30, reference_size=100,
                                    kinds=("zero",), single_neurons=False, neurons=neurons)
    assert table.attrs["neuron_subject"]["component"] == f"blocks.{spec['adder']}.mlp"
    parts = table[table["target"].isin(["frequency_neurons", "fourier_directions"])]
    assert not parts.empty and (parts["block"] == spec["adder"]).all()
    # the same function as the paper model: its adder's frequencies, and ablating them costs what it
    # costs the paper's MLP2 (a silent MLP's neurons, or a default block's, would cost nothing)
    key = ["target", "index", "pool"]
    ours, theirs = parts.set_index(key)["accuracy"], paper_parts.set_index(key)["accuracy"]
    assert sorted(set(parts["index"])) == sorted(set(paper_parts["index"]))
    assert (ours - theirs.loc[ours.index]).abs().max() < 0.05


def test_circuit_is_scored_against_the_planted_components(family, family_location):
    from compose_lens.registry.circuit import discovery as C

    name, spec, loaded = family
    found = C.discover(loaded, "eap", n_pairs=12, location=family_location)
    b, r, a = "a{}.h{}".format(*spec["binder"]), "a{}.h{}".format(*spec["router"]), f"m{spec['adder']}"
    planted = {f"embed->{b}.q", f"embed->{b}.k", f"embed->{b}.v", f"{b}->{r}.k", f"embed->{r}.k", f"embed->{r}.v",
               f"{b}->{r}.q", f"{r}->{a}", f"{b}->{a}", f"{a}->logits", f"{r}->logits"}
    edges = found.edges
    assert set(edges.loc[edges["labelled"], "edge"]) == planted  # only the planted heads, not their layers
    assert found.summary["labelled"].startswith("the located circuit")
    # the planted components carry the whole function: the labelled edges outrank every other one
    assert found.summary["roc_auc"] > 0.95


def test_an_adder_in_blocks_2_is_ablated_and_labelled_there(planted, tmp_path):
    """The commands' own path (no location handed in): ablate's neurons and circuit's labels follow
    the adder to blocks.2 and never read the live, non-adding MLP of blocks.1."""
    import json

    table = run_analysis("ablation", planted, tmp_path / "ablate", pool_size=12).tables["ablation"]
    parts = table[table["target"].isin(["neuron", "frequency_neurons", "fourier_directions"])]
    assert not parts.empty and set(parts["block"]) == {2}
    assert json.loads((tmp_path / "ablate" / "ablation.provenance.json").read_text()
                      )["neuron_subject"]["mlp_block"] == 2

    found = run_analysis("circuit", planted, tmp_path / "circuit", method="eap", n_pairs=12)
    edges, summary = found.tables["circuit"], found.documents["circuit"]
    labelled = set(edges.loc[edges["labelled"], "edge"])
    assert {"m2->logits", "a2.h0->m2", "a0.h0->m2"} <= labelled
    assert not any("m1" in edge for edge in labelled) and summary["roc_auc"] > 0.95


def test_nothing_located_means_no_neuron_ablation_and_no_labels(tiny_config, tiny_split):
    """An untrained model in the study's layout with four heads: no adder, binder or router is located, so
    ablate leaves the neurons out and circuit scores against nothing, instead of blocks.1 and the paper's
    labels (the study's layout once sent both there)."""
    from compose_lens.registry.ablation import ablations as ablation
    from compose_lens.registry.circuit import discovery as C

    config = dataclasses.replace(tiny_config, model=tiny_config.model.replace(n_heads=4, d_head=8))
    model = for_analyses(Subject(tl.boot(config.model), config, tiny_split, "untrained")).model
    table = ablation.ablation_table(Subject(model, config, tiny_split, "test"), pool_size=12, reference_size=32, kinds=("zero",))
    assert not table["target"].isin(["neuron", "frequency_neurons", "fourier_directions"]).any()
    assert {"head", "mlp"} <= set(table["target"])  # the components are still ablated
    assert table.attrs["neuron_subject"]["mlp_block"] is None
    assert table.attrs["neuron_subject"]["note"].startswith("none located")
    found = C.discover(Subject(model, config, tiny_split, "test"), "eap", n_pairs=6)
    assert found.summary["roc_auc"] is None and "labelled" not in found.edges
    assert found.summary["labelled"].startswith("none located")


def test_an_mlp_block_outside_the_model_is_refused_in_the_block_convention():
    with pytest.raises(ComposeLensError, match=r"block\(s\) \[3\] do not exist in a 3-layer model .*blocks\.0 to "
                                               r"blocks\.2: the paper's layer 2 is 1"):
        RunConfig().with_overrides(["n_layers=3", "mlp_blocks=[3]"])
    with pytest.raises(ComposeLensError, match=r"block\(s\) \[2\]"):
        RunConfig.from_dict({"model": {"mlp_blocks": [2]}})  # the paper's "layer 2" typed as a paper number
    with pytest.raises(ComposeLensError, match=r"block\(s\) \[0\] named twice.*mlp_blocks=\[0, 2\]"):
        RunConfig().with_overrides(["n_layers=3", "mlp_blocks=[0, 2, 0]"])  # contradictory: one MLP or none
