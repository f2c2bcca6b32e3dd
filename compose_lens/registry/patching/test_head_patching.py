"""Per-head q / k / v / pattern patching and path patching on the paper model.

The per-head numbers are TransformerLens's own ``transformer_lens.patching`` functions' on the same
pairs; path patching is a forward of the paper model written out here from its weights, with only
the sender's change added to the receiver's input."""

from __future__ import annotations

import math

import pytest
import torch

from compose_lens.analysis import metrics

from compose_lens.data import pairs as prompt_pairs
from compose_lens.core.errors import ComposeLensError
from compose_lens.model import tl
from compose_lens.registry.patching import tables
from compose_lens.training.subject import load_subject
from compose_lens.training.subject import Subject


@pytest.fixture(scope="module")
def paper():
    subject = load_subject("paper")
    subject.model.eval()  # transformer_lens.patching refuses a model in training mode
    return subject


@pytest.fixture(scope="module")
def pairs(paper):
    """A few pairs of each corruption: the queried variable swapped (the query and the pattern
    matter) and its value changed (the keys and values at the value matter)."""
    return {c: prompt_pairs.make_prompt_pairs(paper.split, 4, c, seed=3) for c in ("variable", "value")}


# TransformerLens's function for each component, and the corruption under which the component matters
TL_FUNCTIONS = {"q": ("get_act_patch_attn_head_q_by_pos", "variable"),
                "k": ("get_act_patch_attn_head_k_by_pos", "value"),
                "v": ("get_act_patch_attn_head_v_by_pos", "value"),
                "pattern": ("get_act_patch_attn_head_pattern_by_pos", "variable"),
                "z": ("get_act_patch_attn_head_out_by_pos", "value")}


def _transformer_lens(model, pairs, component: str) -> torch.Tensor:
    """TransformerLens's per-pair logit differences, as (sites, pairs) in head_sites' order."""
    from transformer_lens import patching as tl_patching

    _, cache = model.run_with_cache(pairs.clean)

    def metric(logits):
        return metrics.logit_diff(logits[:, -1].float(), pairs.answers)

    values = getattr(tl_patching, TL_FUNCTIONS[component][0])(model, pairs.corrupted, cache, metric,
                                                              reduce="none").values
    if component == "pattern":  # (layer, head, dest, batch) -> (layer, dest, head, batch)
        values = values.transpose(1, 2)
    return values.reshape(-1, len(pairs)).cpu()


@pytest.mark.parametrize("component", list(TL_FUNCTIONS))
def test_per_head_patching_is_transformer_lens_s(paper, pairs, component):
    chosen = pairs[TL_FUNCTIONS[component][1]]
    sites = tables.head_sites(paper.config.model, [component])
    ours = tables.patched_values(paper.model, paper.config.model, chosen, sites, fast=False)
    theirs = _transformer_lens(paper.model, chosen, component)
    assert ours.shape == theirs.shape == (2 * 16, len(chosen))
    assert torch.allclose(ours, theirs, atol=1e-5), float((ours - theirs).abs().max())
    # the comparison can fail: some site moves the answer by logits, so a patch that wrote nothing would show
    _, corrupted = tables.baseline_logit_diffs(paper.model, chosen)
    assert float((ours - corrupted).abs().max()) > 1.0


def test_the_table_normalises_transformer_lens_s_numbers(paper, pairs):
    chosen = pairs["value"]
    table = tables.head_patching_table(paper, components=["v"], pairs=chosen, by="position", n_boot=50)
    theirs = _transformer_lens(paper.model, chosen, "v")
    clean, corrupted = tables.baseline_logit_diffs(paper.model, chosen)
    expected = (theirs.mean(1) - corrupted.mean()) / (clean.mean() - corrupted.mean())
    assert torch.allclose(torch.tensor(table["mean"].values, dtype=torch.float32), expected, atol=1e-5)
    # by role: layer 2's value at the queried value carries the answer (the paper's reading)
    by_role = tables.head_patching_table(paper, components=["v"], pairs=chosen, n_boot=50)
    row = by_role[(by_role.block == 1) & (by_role.role == "queried value")].iloc[0]
    assert row["mean"] > 0.9 and row["ci_low"] <= row["mean"] <= row["ci_high"]


# -- path patching against a forward written out here ------------------------------------------


def _hand_forward(model, tokens, delta=None, into: str = ""):
    """Logits at ``=`` of the paper model (two one-head layers, an MLP in the second, no
    normalisation), from its weights; ``delta`` (N, n, d) is added to the input of ``into`` only:
    layer 2's ``q``, ``k`` or ``v``, or ``mlp``."""
    p = {k: v.detach().double() for k, v in tl.parameters(model).items()}
    d_head = p["blocks.0.attn.q.weight"].shape[0]
    n = tokens.shape[1]
    mask = torch.ones(n, n, dtype=torch.bool).tril()

    def attention(layer, x_q, x_k, x_v):
        a = f"blocks.{layer}.attn"
        q, k, v = (x @ p[f"{a}.{s}.weight"].T + p[f"{a}.{s}.bias"] for s, x in zip("qkv", (x_q, x_k, x_v)))
        scores = (q @ k.transpose(1, 2) / math.sqrt(d_head)).masked_fill(~mask, -math.inf)
        z = scores.softmax(-1) @ v
        return z @ p[f"{a}.o.weight"].T + p[f"{a}.o.bias"]

    x0 = p["embed.weight"][tokens] + p["pos_embed.weight"][:n]
    x1 = x0 + attention(0, x0, x0, x0)  # blocks.0 has no MLP
    add = {name: (delta if name == into else 0) for name in ("q", "k", "v", "mlp")}
    mid = x1 + attention(1, x1 + add["q"], x1 + add["k"], x1 + add["v"])
    hidden = torch.relu((mid + add["mlp"]) @ p["blocks.1.mlp.in.weight"].T + p["blocks.1.mlp.in.bias"])
    out = mid + hidden @ p["blocks.1.mlp.out.weight"].T + p["blocks.1.mlp.out.bias"]
    return (out @ p["unembed.weight"].T + p["unembed.bias"])[:, -1]


def _sender_write(model, tokens):
    """What blocks.0 head 0 writes into the residual stream (N, n, d): the forward's first layer."""
    _, cache = model.run_with_cache(tokens, names_filter=lambda name: name == "blocks.0.hook_attn_out")
    return cache["blocks.0.hook_attn_out"].double()  # one head: its output is the layer's


@pytest.mark.parametrize("corruption", ["variable", "value"])
def test_path_patching_is_the_forward_with_the_sender_s_change_in_one_input(paper, pairs, corruption):
    chosen = pairs[corruption]
    assert paper.config.model.n_heads == 1 and paper.config.model.mlp_blocks == (1,)
    receivers = ["blocks.1.head0.q", "blocks.1.head0.k", "blocks.1.head0.v", "blocks.1.mlp"]
    sender = tables.path_end("blocks.0.head0", "sender", paper.config.model)
    ends = [tables.path_end(r, "receiver", paper.config.model) for r in receivers]
    paths, total = tables.path_patched_values(paper.model, paper.config.model, chosen, sender, ends)
    delta = _sender_write(paper.model, chosen.clean) - _sender_write(paper.model, chosen.corrupted)
    for row, into in zip(paths, ("q", "k", "v", "mlp")):
        hand = metrics.logit_diff(_hand_forward(paper.model, chosen.corrupted, delta, into).float(), chosen.answers)
        assert torch.allclose(row, hand, atol=1e-3), (into, row, hand)
    # the sender alone, every path: the forward of the corrupted prompt with the clean first layer's write
    _, corrupted = tables.baseline_logit_diffs(paper.model, chosen)
    # the comparisons can tell a patch from none: the sender moves the answer by tenths of a logit or more
    assert float((total - corrupted).abs().max()) > 0.1 and float((paths - corrupted).abs().max()) > 0.1
    clean_write = _sender_write(paper.model, chosen.clean)
    assert torch.allclose(total, _everything_from(paper.model, chosen, clean_write), atol=1e-3)


def _everything_from(model, pairs, clean_write):
    """The corrupted forward with blocks.0's output replaced by ``clean_write`` (a plain hook)."""
    def write(act, hook):
        act[:] = clean_write.to(act.dtype)
        return act

    logits = model.run_with_hooks(pairs.corrupted, fwd_hooks=[("blocks.0.hook_attn_out", write)])
    return metrics.logit_diff(logits[:, -1].float(), pairs.answers)


def test_the_query_path_carries_the_swapped_variable(paper, pairs):
    """Under the variable swap, the first layer's head reaches layer 2 through its query (the
    path the study's reading names), hardly through its value: the paths differ, so a path
    patching that patched the wrong input would show."""
    table = tables.path_patching(paper, sender="blocks.0.head0",
                                   receivers=["blocks.1.head0.q", "blocks.1.head0.v"],
                                   pairs=pairs["variable"], n_boot=50)
    assert list(table["receiver"]) == ["blocks.1.head0.q", "blocks.1.head0.v", "all"]
    q, v, everything = table["mean"]
    assert q > 0.5 and abs(v) < 0.1 and everything > 0.9
    assert (table["ci_low"] <= table["mean"]).all() and (table["mean"] <= table["ci_high"]).all()


@pytest.mark.parametrize("sender, receiver, says", [
    ("blocks.1.head0", "blocks.0.head0.v", "no path blocks.1.head0 -> blocks.0.head0.v"),
    ("blocks.1.head0", "blocks.1.head0.q", "no path blocks.1.head0 -> blocks.1.head0.q"),
    ("blocks.1.mlp", "blocks.1.mlp", "no path blocks.1.mlp -> blocks.1.mlp"),
    ("blocks.0.mlp", "blocks.1.mlp", "blocks.0 has no MLP"),
    ("blocks.0.head0", "blocks.1.head0", "say which input"),
    ("blocks.0.head0.v", "blocks.1.mlp", "without .v"),
    ("blocks.0.head1", "blocks.1.mlp", "heads 0 to 0"),
    ("blocks.0.head0", "blocks.2.mlp", "blocks.0 to blocks.1"),
    ("layer1", "blocks.1.mlp", "blocks.L.headH or blocks.L.mlp"),
])
def test_a_path_that_cannot_exist_is_refused_in_one_line(paper, sender, receiver, says):
    with pytest.raises(ComposeLensError) as refused:
        tables.path_patching(paper, sender=sender, receivers=[receiver], n_pairs=2)
    assert says in str(refused.value) and "\n" not in str(refused.value)


def test_a_head_reaches_its_own_block_s_mlp(paper):
    sender = tables.path_end("blocks.1.head0", "sender", paper.config.model)
    tables.check_path(sender, tables.path_end("blocks.1.mlp", "receiver", paper.config.model))


def test_a_model_without_the_bridge_is_refused(paper):
    weights = load_subject("paper", bridge=False)
    for call in (lambda: tables.head_patching_table(weights, n_pairs=2),
                 lambda: tables.path_patching(weights, n_pairs=2)):
        with pytest.raises(ComposeLensError, match="bridge=True"):
            call()


def test_path_patching_is_the_circuit_graph_s_exact_edge_score_read_backwards(paper, pairs):
    """``circuit --method exact`` corrupts one edge of the clean run (the share of the answer lost);
    path patching restores one path of the corrupted run. With the pairs' roles swapped the two are
    one number, from two implementations (the edge graph runs the weights, path patching the hooks)."""
    from compose_lens.registry.circuit import discovery as circuit
    from compose_lens.data.pairs import PromptPairs

    chosen = pairs["variable"]
    swapped = PromptPairs(chosen.corrupted, chosen.clean, chosen.corrupted_labels, chosen.clean_labels, "swapped")
    table = tables.path_patching(paper, sender="blocks.0.head0", pairs=swapped, n_boot=10, receivers=[
        "blocks.1.head0.q", "blocks.1.head0.k", "blocks.1.head0.v", "blocks.1.mlp"])
    gm = circuit.GraphModel(tl.parameters(paper.model), paper.config.model)
    scores = circuit.exact_scores(gm, chosen)
    edges = [e.name for e in gm.graph.edges]
    exact = [float(scores[edges.index(f"a0.h0->{r}")]) for r in ("a1.h0.q", "a1.h0.k", "a1.h0.v", "m1")]
    assert torch.allclose(torch.tensor(table["mean"][:4].values, dtype=torch.float64),
                          torch.tensor(exact, dtype=torch.float64), atol=1e-4), (table["mean"], exact)
    assert max(map(abs, exact)) > 0.1  # some edge carries the swap


# -- several heads: the head index is the one named ---------------------------------------------


@pytest.fixture
def three_heads(tiny_config, tiny_split):
    """A tiny model with three heads per layer and trained biases, its weights pushed off the
    initialisation so every head matters, in eval mode; (model, config, split)."""
    config = tiny_config.replace(model=tiny_config.model.replace(n_heads=3, d_head=16, trained_biases=True))
    model = tl.boot(config.model)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, value in tl.parameters(model).items():
            if "blocks.0.mlp" in name:
                continue  # absent: stays zero
            value.normal_(0, 0.3) if name.endswith("bias") else value.mul_(3.0)
    return model.eval(), config, tiny_split


@pytest.mark.parametrize("component", list(TL_FUNCTIONS))
def test_per_head_patching_is_transformer_lens_s_with_several_heads(three_heads, component):
    model, config, split = three_heads
    chosen = prompt_pairs.make_prompt_pairs(split, 6, "variable", seed=1)
    ours = tables.patched_values(model, config.model, chosen, tables.head_sites(config.model, [component]),
                                   fast=False)
    theirs = _transformer_lens(model, chosen, component)
    assert (theirs - theirs[:1]).abs().amax() > 0.01  # the sites differ
    assert torch.allclose(ours, theirs, atol=1e-5 * float(theirs.abs().amax())), float((ours - theirs).abs().max())


def test_path_patching_reads_the_heads_it_names(three_heads):
    """Head 1 of blocks.0 into head 2's keys, head 0's query and the MLP of blocks.1: the circuit
    graph's exact edge scores of exactly those edges (pairs' roles swapped, as above)."""
    from compose_lens.registry.circuit import discovery as circuit
    from compose_lens.data.pairs import PromptPairs

    model, config, split = three_heads
    chosen = prompt_pairs.make_prompt_pairs(split, 8, "variable", seed=1)
    swapped = PromptPairs(chosen.corrupted, chosen.clean, chosen.corrupted_labels, chosen.clean_labels, "swapped")
    table = tables.path_patching(Subject(model, config, split, "test"), "blocks.0.head1", pairs=swapped, n_boot=10,
                                   receivers=["blocks.1.head2.k", "blocks.1.head0.q", "blocks.1.mlp"])
    gm = circuit.GraphModel(tl.parameters(model), config.model)
    scores = circuit.exact_scores(gm, chosen)
    edges = [e.name for e in gm.graph.edges]
    exact = torch.tensor([float(scores[edges.index(f"a0.h1->{r}")]) for r in ("a1.h2.k", "a1.h0.q", "m1")],
                         dtype=torch.float64)
    other_heads = torch.tensor([float(scores[edges.index(f"a0.h{h}->a1.h2.k")]) for h in (0, 2)], dtype=torch.float64)
    ours = torch.tensor(table["mean"][:3].values, dtype=torch.float64)
    assert torch.allclose(ours, exact, atol=1e-4), (ours, exact)
    assert (other_heads - exact[0]).abs().min() > 1e-3  # another sender head would give another number


def test_an_mlp_sends_to_later_heads_and_mlps(tiny_config, tiny_split):
    """With an MLP in both blocks, blocks.0.mlp's paths into blocks.1 head 1's keys and into
    blocks.1.mlp are the circuit graph's exact edge scores m0 -> a1.h1.k and m0 -> m1."""
    from compose_lens.registry.circuit import discovery as circuit
    from compose_lens.data.pairs import PromptPairs

    config = tiny_config.replace(model=tiny_config.model.replace(n_heads=2, d_head=16, mlp_blocks=(0, 1)))
    model = tl.boot(config.model)
    with torch.no_grad():
        for value in tl.parameters(model).values():
            value.mul_(3.0)
    chosen = prompt_pairs.make_prompt_pairs(tiny_split, 8, "value", seed=2)
    swapped = PromptPairs(chosen.corrupted, chosen.clean, chosen.corrupted_labels, chosen.clean_labels, "swapped")
    table = tables.path_patching(Subject(model.eval(), config, tiny_split, "test"), "blocks.0.mlp", pairs=swapped, n_boot=10,
                                   receivers=["blocks.1.head1.k", "blocks.1.mlp"])
    gm = circuit.GraphModel(tl.parameters(model), config.model)
    scores = circuit.exact_scores(gm, chosen)
    edges = [e.name for e in gm.graph.edges]
    exact = torch.tensor([float(scores[edges.index(e)]) for e in ("m0->a1.h1.k", "m0->m1")], dtype=torch.float64)
    assert torch.allclose(torch.tensor(table["mean"][:2].values, dtype=torch.float64), exact, atol=1e-4)
    assert exact.abs().max() > 0.01
    with pytest.raises(ComposeLensError, match="no path blocks.0.mlp -> blocks.0.head0.v"):
        tables.path_patching(Subject(model, config, tiny_split, "test"), "blocks.0.mlp", ["blocks.0.head0.v"], n_pairs=2)
