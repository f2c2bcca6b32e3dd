"""The one forward: the tables and the bridge give the same activations and edited answers at every Site
the tables hold; what the tables do not hold is read from the bridge, or refused when the tables are insisted on."""

from __future__ import annotations

import pytest
import torch

from compose_lens.data.sampler import concat_batches, make_pools
from compose_lens.core.errors import ComposeLensError
from compose_lens.model.forward import ANSWER, TABLE_SITES, Forward, Site
from compose_lens.training.subject import load_model


@pytest.fixture(scope="module")
def paper():
    bridge, weights = load_model("paper"), load_model("paper", bridge=False)
    tokens = concat_batches(make_pools(bridge.split, 12, 0))[0].tokens
    return bridge, weights, tokens


def test_every_table_site_reads_as_the_bridge_reads_it(paper):
    bridge, weights, tokens = paper
    sites = [Site(hook, position) for hook, position in sorted(TABLE_SITES, key=str)]
    sites += [Site("blocks.0.attn.hook_pattern", None, 0), Site("blocks.1.attn.hook_pattern", ANSWER, 0)]
    tables = Forward(weights.model, weights.config.model)
    hooked = Forward(bridge.model, bridge.config.model, fast=False)
    assert tables.on_tables(sites) and not hooked.on_tables(sites)
    from_tables, from_hooks = tables.read(tokens, sites), hooked.read(tokens, sites)
    for site in sites:
        assert from_tables[site].shape == from_hooks[site].shape, site
        assert torch.allclose(from_tables[site], from_hooks[site], atol=2e-4), (site, (from_tables[site] - from_hooks[site]).abs().max())


def test_the_tables_compute_exactly_the_sites_they_claim(paper):
    from compose_lens.model import forward
    from compose_lens.model import tl

    _, weights, tokens = paper
    computed = forward._answer_tables(tl.parameters(weights.model), weights.config.model, tokens[:2])
    assert set(computed) == forward._TABLE_KEYS


def test_a_site_the_tables_lack_is_read_from_a_bridge_booted_from_the_weights(paper):
    bridge, weights, tokens = paper
    site = Site("blocks.1.attn.hook_pattern")  # layer 2 at every query: the tables hold "=" only
    forward = Forward(weights.model, weights.config.model)
    assert not forward.on_tables([site])
    pattern = forward.read(tokens, [site])[site]
    assert pattern.shape == (len(tokens), 1, tokens.shape[1], tokens.shape[1])
    assert torch.allclose(pattern, Forward(bridge.model, bridge.config.model).read(tokens, [site])[site])
    assert torch.allclose(pattern[:, 0, -1], forward.read(tokens, [site.at(ANSWER)])[site.at(ANSWER)][:, 0], atol=1e-5)


def test_insisting_on_the_tables_refuses_in_one_line_what_they_cannot_do(paper):
    _, weights, tokens = paper
    forward = Forward(weights.model, weights.config.model, fast=True)
    with pytest.raises(ComposeLensError, match=r"cannot read blocks\.1\.attn\.hook_pattern\b") as error:
        forward.read(tokens, [Site("blocks.1.attn.hook_pattern"), Site("logits", ANSWER)])
    assert "\n" not in str(error.value)
    with pytest.raises(ComposeLensError, match="no head axis"):
        forward.read(tokens, [Site("blocks.1.hook_resid_mid", ANSWER, 0)])


def test_an_edit_gives_the_same_answer_on_the_tables_and_the_bridge(paper):
    bridge, weights, tokens = paper
    halve = {"blocks.1.hook_mlp_out": lambda act: act * 0.5, "blocks.0.attn.hook_z": lambda act: act * 0.0}
    tables = Forward(weights.model, weights.config.model).edited_logits(tokens, halve)
    hooked = Forward(bridge.model, bridge.config.model, fast=False).edited_logits(tokens, halve)
    clean = Forward(weights.model, weights.config.model).logits(tokens)
    assert (tables - clean).abs().max() > 1.0  # the edit changes the answer
    assert torch.allclose(tables, hooked, atol=1e-3)


def test_a_site_is_written_and_read_as_one_line():
    for text in ("blocks.1.hook_mlp_out@=", "blocks.0.attn.hook_pattern[0]", "blocks.1.attn.hook_z[2]@14", "hook_embed"):
        assert str(Site.parse(text)) == text
    assert Site.parse("blocks.1.attn.hook_z[2]@14") == Site("blocks.1.attn.hook_z", 14, 2)
    assert Site("blocks.1.attn.hook_z", 3, 0).component == "z" and Site("blocks.0.hook_resid_pre").component == "resid_pre"
    with pytest.raises(ComposeLensError, match="HOOK"):
        Site.parse("blocks.1 mlp")


def test_the_last_position_forward_reads_and_edits_as_the_bridge_on_another_architecture(tiny_task, monkeypatch):
    """Three layers, two heads, an MLP in every layer: no tables; the plain-torch forward answers what it
    computes (every layer at every position, the last MLP at "="), read and under an edit, as the bridge;
    the last layer's attention runs at every query only where a read needs it."""
    from compose_lens.core.config import ModelConfig
    from compose_lens.data.split import Split
    from compose_lens.model import lastpos, tl

    cfg = ModelConfig.for_task(tiny_task, d_model=32, d_head=8, d_mlp=64).replace(n_layers=3, n_heads=2,
                                                                                  mlp_blocks=(0, 1, 2))
    torch.manual_seed(0)
    model = tl.boot(cfg, task=tiny_task)
    tokens = concat_batches(make_pools(Split.from_task(tiny_task), 6, 0))[0].tokens
    sites = [Site("blocks.0.attn.hook_pattern"), Site("blocks.2.attn.hook_pattern", ANSWER, 1),
             Site("blocks.1.hook_resid_mid", 3), Site("blocks.1.mlp.hook_post"), Site("blocks.2.mlp.hook_post", ANSWER),
             Site("blocks.2.hook_resid_post", ANSWER), Site("logits", ANSWER)]
    plain, hooked = Forward(model, cfg), Forward(model, cfg, fast=False)
    assert plain.plain and not plain.tables and not hooked.plain
    zero_mlp = {"blocks.1.hook_mlp_out": torch.zeros_like}
    for edits in ({}, zero_mlp):
        a, b = plain.read(tokens, sites, edits=edits), hooked.read(tokens, sites, edits=edits)
        for site in sites:
            assert a[site].shape == b[site].shape and torch.allclose(a[site], b[site], atol=1e-5), (site, edits)
    queries, attention = [], lastpos.attention_with_pattern  # (layer, at the last query only) per layer run

    def counted(params, cfg_, layer, resid, last_only=False):
        queries.append((layer, last_only))
        return attention(params, cfg_, layer, resid, last_only)
    monkeypatch.setattr(lastpos, "attention_with_pattern", counted)
    at_answer, everywhere = Site("blocks.2.attn.hook_pattern", ANSWER), Site("blocks.2.attn.hook_pattern")
    one_query = plain.read(tokens, [at_answer])[at_answer]
    assert queries == [(0, False), (1, False), (2, True)]
    every_query = plain.read(tokens, [everywhere])[everywhere]
    assert queries[3:] == [(0, False), (1, False), (2, False)]
    assert torch.allclose(every_query[:, :, -1], one_query, atol=1e-6)
    monkeypatch.undo()
    edited = plain.read(tokens, [Site("logits", ANSWER)], edits=zero_mlp)[Site("logits", ANSWER)]
    assert (edited - plain.logits(tokens)).abs().max() > 1e-3  # the edit reaches the answer
    last_mlp = Site("blocks.2.mlp.hook_post")  # at every position: only the bridge has it
    assert plain.read(tokens, [last_mlp])[last_mlp].shape == (len(tokens), tokens.shape[1], 64)
    onward = plain.read(tokens, [Site("blocks.2.hook_resid_mid", ANSWER), Site("blocks.2.hook_resid_post", ANSWER)])
    for site, resid in onward.items():  # the model run on from the last block's residual stream at "="
        assert torch.allclose(plain.logits_from(site, resid), plain.logits(tokens), atol=1e-5), site
    with pytest.raises(ComposeLensError, match=r"runs on from the last block's residual stream at '='"):
        plain.logits_from(Site("blocks.1.hook_resid_mid", ANSWER), onward[Site("blocks.2.hook_resid_mid", ANSWER)])
    for layer in cfg.mlp_blocks:  # one block's MLP run from its input at "=": the output the forward made
        into, out = Site(f"blocks.{layer}.mlp.hook_in", ANSWER), Site(f"blocks.{layer}.hook_mlp_out", ANSWER)
        read = plain.read(tokens, [into, out])
        assert torch.allclose(plain.mlp_from(layer, read[into]), read[out], atol=1e-5), layer


def test_every_circuit_edge_names_its_ends_as_sites_of_the_model(paper):
    """The circuit graph speaks Site: each edge's sender is a hook the one forward reads (a head's write,
    an MLP's output, the stream at the start) at the edge's position, each receiver a head's q / k / v
    input (TransformerLens's hook_q_input names), an MLP's input or the logits; the text form parses back."""
    from compose_lens.registry.circuit.discovery import build_graph

    bridge, weights, tokens = paper
    cfg = weights.config.model
    graph = build_graph(cfg, positions=True)
    hooks = set(bridge.model.hook_dict)
    forward = Forward(weights.model, cfg)
    senders = set()
    for edge in graph.edges:
        sender, receiver = edge.sites()
        assert Site.parse(str(sender)) == sender and Site.parse(str(receiver)) == receiver, edge.name
        assert sender.position == receiver.position or receiver.hook == "logits", edge.name
        assert receiver.hook == "logits" or receiver.hook.replace("hook_q_input", "attn.hook_q").replace(
            "hook_k_input", "attn.hook_k").replace("hook_v_input", "attn.hook_v") in hooks, edge.name
        senders.add(sender.at(ANSWER) if sender.position is None else sender)
    read = forward.read(tokens[:3], sorted(senders, key=str))
    assert len(read) == len(senders) > 3 and all(value.shape == (3, cfg.d_model) for value in read.values())
    a0_to_v = next(e for e in graph.edges if e.name == "a0.h0->a1.h0.v@5")
    assert [str(s) for s in a0_to_v.sites()] == ["blocks.0.attn.hook_result[0]@5", "blocks.1.hook_v_input[0]@5"]


def test_an_edit_named_by_a_site_touches_that_position_and_head_only(paper):
    bridge, weights, tokens = paper
    tables, hooked = Forward(weights.model, weights.config.model), Forward(bridge.model, bridge.config.model, fast=False)
    at_5 = {Site("blocks.0.attn.hook_z", 5, 0): torch.zeros_like}

    def by_hand(act):  # the same edit written on the whole activation
        act = act.clone()
        act[:, 5, 0] = 0
        return act

    edited = tables.edited_logits(tokens, at_5)
    assert torch.allclose(edited, hooked.edited_logits(tokens, at_5), atol=1e-3)
    assert torch.allclose(edited, hooked.edited_logits(tokens, {"blocks.0.attn.hook_z": by_hand}), atol=1e-3)
    clean = tables.logits(tokens)
    assert (edited - clean).abs().max() > 1e-3 and not torch.allclose(edited, tables.edited_logits(
        tokens, {"blocks.0.attn.hook_z": torch.zeros_like}), atol=1e-3)  # one position, not all
    # layer 2 off "=" never reaches the answer: the tables cannot make it, the bridge does, and nothing moves
    off_answer = {Site("blocks.1.hook_mlp_out", 3): lambda act: act + 100.0}
    assert torch.allclose(tables.edited_logits(tokens, off_answer), clean, atol=1e-3)
    with pytest.raises(ComposeLensError, match=r"cannot edit blocks\.1\.hook_mlp_out@3"):
        Forward(weights.model, weights.config.model, fast=True).edited_logits(tokens, off_answer)
