"""Direct logit attribution adds up to the model's own margin, and finds the adder."""

from __future__ import annotations

import json

import pytest
import torch

from compose_lens.registry.dla import attribution as la
from compose_lens.core.config import ModelConfig, RunConfig
from compose_lens.data.sampler import concat_batches, make_pools
from compose_lens.core.errors import ComposeLensError
from compose_lens.data.split import Split
from compose_lens.model import tl
from compose_lens.model.forward import ANSWER, Site
from compose_lens.training.subject import load_model
from compose_lens.training.subject import Subject


@pytest.fixture(scope="module")
def paper():
    return load_model("paper")


def test_the_terms_sum_to_the_margin_on_the_paper_model_and_a_two_head_model_with_biases(paper, tiny_task):
    joined, _ = concat_batches(make_pools(paper.split, 20, 0))
    assert la.check_sums(paper.model, paper.config, joined.tokens, joined.labels) < 1e-3
    cfg = ModelConfig.for_task(tiny_task, d_model=32, d_head=16, d_mlp=64).replace(n_heads=2, trained_biases=True)
    model = tl.boot(cfg, task=tiny_task)
    with torch.no_grad():  # move every weight (biases included) off its initialisation
        for p in tl.trainable_parameters(model):
            p.add_(0.3 * torch.randn_like(p))
    config = RunConfig(task=tiny_task, model=cfg)
    split = Split.from_task(tiny_task)
    joined, _ = concat_batches(make_pools(split, 10, 0))
    assert la.check_sums(model, config, joined.tokens, joined.labels) < 1e-3
    table = la.logit_attribution(Subject(model, config, split, "two heads with biases"), n=90)
    assert {"layer 1 (blocks.0) head 1", "layer 2 (blocks.1) attention bias"} <= set(table["component"])


def test_on_the_paper_model_layer_2_mlp_writes_the_answer_and_the_lens_sees_it_only_after_it(paper):
    table = la.logit_attribution(paper, n=270)
    mlp = table[table["component"] == "layer 2 (blocks.1) MLP"].set_index("kind")["share"]
    assert (mlp > 0.9).all() and set(mlp.index) == {"0var", "1var", "2var"}
    lens = la.logit_lens(paper, n=270)
    before = lens[lens["after"] == "layer 2 (blocks.1) attention"]["accuracy"]
    after = lens[lens["after"] == "layer 2 (blocks.1) MLP"]["accuracy"]
    assert before.max() < 0.2 and after.min() > 0.95


def test_the_table_forward_gives_the_hooked_terms_on_the_paper_model(paper):
    """The paper architecture is read without hooks (what analyze loads): the same terms, in the same order."""
    weights = load_model("paper", bridge=False)
    joined, _ = concat_batches(make_pools(paper.split, 20, 0))
    hooked = la.components_at_answer(paper.model, paper.config, joined.tokens)
    tables = la.components_at_answer(weights.model, weights.config, joined.tokens)
    assert list(tables) == list(hooked)
    for name in hooked:
        assert torch.allclose(tables[name], hooked[name].detach(), atol=1e-4), name
    assert la.check_sums(weights.model, weights.config, joined.tokens, joined.labels) < 1e-3


def test_weights_of_another_architecture_are_read_through_a_bridge_booted_for_them(tiny_task):
    """A two-head model handed in as weights only (no hooks) gets the same terms as its bridge: the one
    forward boots one (it was refused before)."""
    cfg = ModelConfig.for_task(tiny_task, d_model=32, d_head=16, d_mlp=64).replace(n_heads=2)
    bridge = tl.boot(cfg, task=tiny_task)
    weights = tl.Weights(bridge.state_dict(), cfg)
    config = RunConfig(task=tiny_task, model=cfg)
    tokens = concat_batches(make_pools(Split.from_task(tiny_task), 5, 0))[0].tokens
    from_weights = la.components_at_answer(weights, config, tokens)
    from_bridge = la.components_at_answer(bridge, config, tokens)
    assert list(from_weights) == list(from_bridge) and "layer 1 (blocks.0) head 1" in from_weights
    for name, value in from_bridge.items():
        assert torch.equal(from_weights[name], value), name


def test_the_dla_command_writes_its_tables_and_figure(tmp_path):
    from compose_lens.cli import main

    out = tmp_path / "dla"
    assert main(["dla", "paper", "--out", str(out), "--n", "90", "--quiet"]) == 0
    for name in ("logit_attribution.csv", "logit_lens.csv", "logit_attribution_by_pool.csv",
                 "figures/logit_attribution.png"):
        assert (out / name).is_file(), name
    record = json.loads((out / "logit_attribution.provenance.json").read_text())
    assert record["settings"] == {"n": 90} and record["seed"] == 0


def test_the_pool_split_averages_back_to_the_kinds_and_each_pool_row_is_that_pool(paper):
    """By pool, the same sequences: each kind's row is its pools' rows weighted by their counts; and
    each pool's row is that pool's (its mean margin is the model's own margin on that pool drawn
    alone), so pools swapped or mislabelled, even within one kind, are seen."""
    from compose_lens.data.sampler import POOL_NAMES, make_pool
    from compose_lens.training.evaluate import answer_logits

    kinds = la.logit_attribution(paper, n=270)
    pools = la.logit_attribution(paper, n=270, by="pool")
    assert list(pools["pool"].drop_duplicates()) == list(POOL_NAMES)
    assert all(row.pool.startswith(row.kind) for row in pools.itertuples())
    weighted = (pools.assign(total=pools["contribution"] * pools["n"]).groupby(["kind", "component"])
                [["total", "n"]].sum())
    merged = kinds.set_index(["kind", "component"]).merge(weighted, left_index=True, right_index=True,
                                                           suffixes=("", "_pools"))
    assert (merged["n"] == merged["n_pools"]).all()
    assert ((merged["total"] / merged["n_pools"] - merged["contribution"]).abs() < 1e-4).all()
    for name in POOL_NAMES:
        batch = make_pool(paper.split, name, 30, 0)
        logits = answer_logits(paper.model, paper.config.model, batch.tokens)
        own = (logits.gather(1, batch.labels[:, None])[:, 0] - logits.mean(1)).mean().item()
        row = pools[pools["pool"] == name].iloc[0]
        assert abs(row["margin"] - own) < 1e-3, name
        assert (pools[pools["pool"] == name]["contribution_low"] <= pools[pools["pool"] == name]["contribution"]).all()
    with pytest.raises(ComposeLensError, match="kind or pool"):
        la.logit_attribution(paper, n=90, by="side")


@pytest.mark.parametrize("norm", ["LN", "LNPre", "RMS"])
def test_with_a_final_norm_the_terms_still_sum_to_the_margin(norm):
    """Logit attribution refused every normalised model. With the final norm's scale held at the value the
    model computed, each component's term is its centred, scaled and weighted write, the norm's bias one
    more term, and they add up to the model's own margin; the lens's last stage reads the model's answer."""
    from compose_lens.training.subject import load_subject
    from tests import user_models

    decl = user_models.declaration(query="infix", output="vocab", unused=1)
    subject = load_subject(user_models.tl_model(decl, normalization_type=norm), decl)
    joined, _ = concat_batches(make_pools(subject.split, 10, 0))
    assert la.check_sums(subject.model, subject.config, joined.tokens, joined.labels) < 1e-4
    last_site = Site(f"blocks.{subject.config.model.n_layers - 1}.hook_resid_post", ANSWER)
    whole = subject.forward.read(joined.tokens, [last_site])[last_site]  # the lens on the whole stream: the model
    assert torch.allclose(subject.forward.lens(whole), subject.forward.logits(joined.tokens).float(), atol=1e-4)
    table = la.logit_attribution(subject, n=90)
    assert (la.FINAL_NORM_BIAS in set(table["component"])) == (norm == "LN")
    for _, group in table.groupby("kind"):
        assert abs(group["contribution"].sum() - group["margin"].iloc[0]) < 1e-4
    lens = la.logit_lens(subject, n=90)
    last = lens[lens["order"] == lens["order"].max()].set_index("kind")["accuracy"]
    model_accuracy = table.drop_duplicates("kind").set_index("kind")["accuracy"].sort_index()
    assert torch.allclose(torch.tensor(last.sort_index().tolist()), torch.tensor(model_accuracy.tolist()))
