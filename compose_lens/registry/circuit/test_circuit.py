"""Circuit discovery (discovery.py): the edge graph is the model, the methods agree with
each other and find a planted circuit, and the scores are right on the paper model."""

import pytest
import torch

from compose_lens.registry.circuit import discovery as C
from compose_lens.data.pairs import PromptPairs
from compose_lens.core.config import ModelConfig
from compose_lens.model import tl

TINY = ModelConfig(n_layers=3, d_model=16, d_head=4, n_heads=2, d_mlp=8, n_ctx=6, d_vocab=10, d_vocab_out=7,
                   mlp_blocks=(0, 2), trained_biases=True)


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    model = tl.boot(TINY)
    with torch.no_grad():
        for name, p in tl.parameters(model).items():
            if name.endswith("bias") and name not in tl.absent_names(TINY):
                p.normal_(0, 0.1)
    return model


def _random_pairs(cfg: ModelConfig, n: int, seed: int = 0) -> PromptPairs:
    g = torch.Generator().manual_seed(seed)
    clean = torch.randint(0, cfg.d_vocab, (n, cfg.n_ctx), generator=g)
    corrupted = torch.randint(0, cfg.d_vocab, (n, cfg.n_ctx), generator=g)
    a = torch.randint(0, cfg.d_vocab_out, (n,), generator=g)
    return PromptPairs(clean, corrupted, a, (a + 1) % cfg.d_vocab_out, "random")


@pytest.mark.parametrize("positions", [False, True])
def test_graph_forward_is_the_model(tiny, positions):
    gm = C.GraphModel.from_model(tiny, TINY, positions)
    pairs = _random_pairs(TINY, 8)
    with torch.no_grad():
        logits, _ = gm.forward(pairs.clean)
        reference = tiny(pairs.clean)[:, -1]
    torch.testing.assert_close(logits, reference, atol=1e-4, rtol=1e-4)
    # corrupting every edge is the corrupted run
    base = C.baseline(gm, pairs)
    with torch.no_grad():
        corrupted = gm.forward(pairs.clean, torch.ones(8, len(gm.graph)), base.corrupt_outs)[0]
        torch.testing.assert_close(corrupted, tiny(pairs.corrupted)[:, -1], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("norm", ["LN", "RMS"])
def test_the_graph_of_a_normalised_model_is_the_model(norm):
    """The edge graph refused every normalised model ("needs a plain residual sum"). Each receiver now
    normalises its own input as the model does: the clean graph is the model, every edge corrupted is the
    corrupted run, and corrupting one edge moves only its receiver's norm."""
    cfg = TINY.replace(normalization_type=norm)
    torch.manual_seed(1)
    model = tl.boot(cfg)
    with torch.no_grad():
        for name, p in tl.parameters(model).items():
            if name.endswith(("bias", "ln1.weight", "ln2.weight", "ln_final.weight")) and \
                    name not in tl.absent_names(cfg):
                p.normal_(0.5 if name.endswith("weight") else 0, 0.3)
    pairs = _random_pairs(cfg, 8)
    gm = C.GraphModel.from_model(model, cfg)
    with torch.no_grad():
        torch.testing.assert_close(gm.forward(pairs.clean)[0], model(pairs.clean)[:, -1], atol=1e-4, rtol=1e-4)
        base = C.baseline(gm, pairs)
        corrupted = gm.forward(pairs.clean, torch.ones(8, len(gm.graph)), base.corrupt_outs)[0]
        torch.testing.assert_close(corrupted, model(pairs.corrupted)[:, -1], atol=1e-4, rtol=1e-4)
    assert torch.isfinite(C.eap_ig_scores(gm, pairs, steps=4)).all()


def test_graph_edges():
    g = C.build_graph(ModelConfig())  # the paper model: 16 edges
    assert len(g) == 16 and "m1->logits" in {e.name for e in g.edges}
    assert int(C.paper_labels(g).sum()) == 11 and int(C.paper_labels(g, constant_path=False).sum()) == 10
    gp = C.build_graph(ModelConfig(), positions=True)
    assert len(gp) == 121  # last-layer queries, MLP and logits at "=" only
    assert all(e.position == 15 for e in gp.edges if e.receiver in ("m1", "logits", "a1.h0.q"))
    labelled = {e.name for e, x in zip(gp.edges, C.paper_labels(gp).tolist()) if x}
    assert len(labelled) == 68 and {"a0.h0->a1.h0.k@5", "embed->a0.h0.k@4", "a0.h0->m1@15"} <= labelled
    assert not {"embed->a0.h0.q@15", "a0.h0->a1.h0.k@14", "embed->a1.h0.v@12"} & labelled


@pytest.mark.parametrize("positions", [False, True])
def test_the_located_circuit_of_the_paper_roles_is_the_papers(positions):
    """The labelling by role at the paper's components is the paper's labelling, edge for edge (and
    without the constant path); at other components it labels only those, not their layers."""
    g = C.build_graph(ModelConfig(), positions)
    for constant_path in (True, False):
        assert torch.equal(C.located_labels(g, C.PAPER_ROLES, constant_path), C.paper_labels(g, constant_path))
    heads = C.build_graph(ModelConfig(n_heads=4, d_head=32), positions)
    labelled = {e.name for e, x in zip(heads.edges, C.located_labels(heads, C.CircuitRoles((0, 2), (1, 3), 1,
                                                                                          (0, 1))).tolist()) if x}
    assert {e.split("->")[0].split(".")[0] + "." + e.split("->")[0].split(".")[1] for e in labelled
            if e.startswith("a")} == {"a0.h2", "a0.h1", "a1.h3"}  # binder, gatherer, router: senders
    assert ("a0.h1->a1.h3.q" if not positions else "a0.h1->a1.h3.q@15") in labelled  # the gatherer's query
    assert not any(e.startswith(("embed->a0.h1.q", "a0.h2->a1.h3.q", "a0.h0", "a1.h0")) for e in labelled)
    assert C.paper_labels(heads).sum() > C.located_labels(heads, C.PAPER_ROLES).sum()  # every head of a layer


def test_eap_ig_is_complete_and_eap_is_exact_for_a_linear_edge(tiny):
    gm = C.GraphModel.from_model(tiny, TINY)
    pairs = _random_pairs(TINY, 16)
    ig = C.eap_ig_scores(gm, pairs, steps=64)
    assert abs(float(ig.sum()) - 1.0) < 0.02  # completeness: they add up to the whole effect
    inputs = C.eap_ig_inputs_scores(gm, pairs, steps=64)  # ... here the embedding edges do
    from_embed = [i for i, e in enumerate(gm.graph.edges) if e.sender == "embed"]
    assert abs(float(inputs[from_embed].sum()) - 1.0) < 0.02
    exact, eap = C.exact_scores(gm, pairs), C.eap_scores(gm, pairs)
    last = [i for i, e in enumerate(gm.graph.edges) if e.receiver == "logits"]  # logits are linear
    torch.testing.assert_close(eap[last], exact[last], atol=1e-4, rtol=1e-4)


def planted(direct: bool = False) -> tuple[C.GraphModel, PromptPairs, set[str]]:
    """Two layers of two heads; a0.h0 copies the first token everywhere, a1.h0 moves it to the answer.

    Residual: token dims 0-4, positions 5-8, a constant 9, moved 10-14, answer 15-19, junk 20-24.
    a0.h1 and a1.h1 read the tokens too but write junk that nothing reads. ``direct``: the middle
    edge is absent, a1.h0 itself looks at position 0 and reads the token from the embeddings
    (a0.h0 still copies, into dims nothing reads).
    """
    cfg = ModelConfig(n_layers=2, d_model=25, d_head=5, n_heads=2, d_mlp=4, n_ctx=4, d_vocab=5,
                      d_vocab_out=5, mlp_blocks=())
    d, dh = 25, 5
    p = {"embed.weight": torch.zeros(5, d), "pos_embed.weight": torch.zeros(4, d),
         "unembed.weight": torch.zeros(5, d), "unembed.bias": torch.zeros(5)}
    p["embed.weight"][:, :5] = torch.eye(5)
    p["pos_embed.weight"][:, 5:9] = torch.eye(4)
    p["pos_embed.weight"][:, 9] = 1.0
    p["unembed.weight"][:, 15:20] = 10 * torch.eye(5)
    for layer in range(2):
        for kind in "qkv":
            p[f"blocks.{layer}.attn.{kind}.weight"] = torch.zeros(2 * dh, d)
            p[f"blocks.{layer}.attn.{kind}.bias"] = torch.zeros(2 * dh)
        p[f"blocks.{layer}.attn.o.weight"] = torch.zeros(d, 2 * dh)
        p[f"blocks.{layer}.attn.o.bias"] = torch.zeros(d)
        moved = (0, 5) if layer == 0 or direct else (10, 15)
        for head, (src, dst) in enumerate([(moved, (10, 15) if layer == 0 else (15, 20)),
                                           ((0, 5), (20, 25))]):
            p[f"blocks.{layer}.attn.v.weight"][head * dh:(head + 1) * dh, src[0]:src[1]] = torch.eye(5)
            p[f"blocks.{layer}.attn.o.weight"][dst[0]:dst[1], head * dh:(head + 1) * dh] = torch.eye(5)
    p["blocks.0.attn.q.weight"][0, 9] = 60.0  # a0.h0 looks at position 0 from everywhere
    p["blocks.0.attn.k.weight"][0, 5] = 1.0
    if direct:
        p["blocks.1.attn.q.weight"][0, 9], p["blocks.1.attn.k.weight"][0, 5] = 60.0, 1.0
    g = torch.Generator().manual_seed(0)
    clean = torch.randint(0, 5, (40, 4), generator=g)
    corrupted = clean.clone()
    corrupted[:, 0] = (clean[:, 0] + torch.randint(1, 5, (40,), generator=g)) % 5
    pairs = PromptPairs(clean, corrupted, clean[:, 0], corrupted[:, 0], "first token")
    circuit = {"embed->a1.h0.v", "a1.h0->logits"} if direct else {"embed->a0.h0.v", "a0.h0->a1.h0.v", "a1.h0->logits"}
    return C.GraphModel(p, cfg), pairs, circuit


@pytest.mark.parametrize("method", C.METHODS)
def test_every_method_finds_the_planted_circuit(method):
    gm, pairs, circuit = planted()
    scores, _ = C.method_scores(gm, pairs, method)
    top = {gm.graph.edges[i].name for i in scores.abs().argsort(descending=True)[:3].tolist()}
    assert top == circuit
    others = [i for i, e in enumerate(gm.graph.edges) if e.name not in circuit]
    assert float(scores[others].abs().max()) < 1e-3
    found = torch.tensor([e.name in circuit for e in gm.graph.edges])
    assert C.roc_auc(scores, found) == 1.0
    assert float(C.faithfulness(gm, pairs, found[None])["recovered"].iloc[0]) == pytest.approx(1.0, abs=1e-4)
    if method == "acdc":
        kept, _ = C.acdc(gm, pairs, threshold=0.01)
        assert {gm.graph.edges[i].name for i in kept.nonzero()[:, 0].tolist()} == circuit


@pytest.mark.parametrize("method", C.METHODS)
def test_no_method_finds_an_absent_edge(method):
    """The negative case: with the middle edge gone, every method moves the credit to the direct
    edge, and the two-layer labels no longer score 1 (a method that echoed the graph's structure,
    or the labels, would fail here)."""
    gm, pairs, circuit = planted(direct=True)
    _, _, two_layer = planted()
    scores, _ = C.method_scores(gm, pairs, method)
    names = [e.name for e in gm.graph.edges]
    top = {names[i] for i in scores.abs().argsort(descending=True)[:2].tolist()}
    assert top == circuit
    assert max(abs(float(scores[names.index(e)])) for e in ("embed->a0.h0.v", "a0.h0->a1.h0.v")) < 1e-3
    assert C.roc_auc(scores, torch.tensor([n in two_layer for n in names])) < 0.9


def test_scores_helpers():
    assert C.roc_auc(torch.tensor([3.0, 2.0, 1.0]), torch.tensor([True, False, False])) == 1.0
    assert C.roc_auc(torch.tensor([1.0, 1.0]), torch.tensor([True, False])) == 0.5
    assert C.spearman(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([10.0, 20.0, 30.0])) == pytest.approx(1.0)


def test_paper_model_scores():
    from compose_lens.training.subject import load_model

    loaded = load_model("paper")
    gm = C.GraphModel.from_model(loaded.model, loaded.config.model)
    pairs = C.resample_pairs(loaded.split, 60)
    exact = C.exact_scores(gm, pairs)
    labels = C.paper_labels(gm.graph)
    assert C.roc_auc(exact, labels) > 0.9
    assert C.spearman(C.eap_ig_scores(gm, pairs, steps=8), exact) > 0.8


@pytest.mark.parametrize("positions", [False, True])
def test_exact_scores_are_one_full_forward_per_edge(tiny, positions):
    """The batched path patching (which reuses the clean run upstream of an edge) against a plain
    forward of the whole graph with that one edge corrupted."""
    gm = C.GraphModel.from_model(tiny, TINY, positions)
    pairs = _random_pairs(TINY, 6)
    base = C.baseline(gm, pairs)
    exact = C.exact_scores(gm, pairs, base)
    for e in range(0, len(gm.graph), 7):
        masks = torch.zeros(6, len(gm.graph))
        masks[:, e] = 1.0
        with torch.no_grad():
            ld = C._ld(gm.forward(pairs.clean, masks, base.corrupt_outs)[0], pairs).mean()
        assert float(exact[e]) == pytest.approx(float((base.ld_clean - ld) / base.denominator), abs=1e-4)


def test_early_checkpoint_lacks_the_labelled_circuit(reference_dir):
    """The labels fit the trained model, not any model: before the assignment phase (step 3,001)
    layer 2 reads nothing from layer 1 (a0 -> a1.q / a1.k near 0) and EAP-IG's ranking misses the
    labelled circuit; after the refinement phase (16,001) both edges carry the routing."""
    from compose_lens.training.subject import load_model

    found = {}
    for step in (3001, 16001):
        loaded = load_model(reference_dir / f"step_{step}.pth", reference_dir / "split.json")
        gm = C.GraphModel.from_model(loaded.model, loaded.config.model)
        scores = C.eap_ig_scores(gm, C.resample_pairs(loaded.split, 60), steps=8)
        names = [e.name for e in gm.graph.edges]
        routing = min(float(scores[names.index(f"a0.h0->a1.h0.{k}")]) for k in "qk")
        found[step] = (C.roc_auc(scores, C.paper_labels(gm.graph)), routing)
    assert found[3001][0] < 0.9 and found[3001][1] < 0.005
    assert found[16001][0] > 0.95 and found[16001][1] > 0.015


def test_the_bootstrap_of_pairs_that_agree_gives_one_size_and_of_pairs_that_differ_a_range():
    """Every pair alike: each resample reads the same curve, so the same size. Half the pairs need
    one edge and half need three: resamples read 1 to 3, and the point is the pooled curve's."""
    curve = torch.tensor([0.0, 0.5, 0.9, 1.0])  # recovered by 0..3 edges (clean 1, corrupted 0)
    ld = curve[:, None].repeat(1, 40)
    ones, zeros = torch.ones(40), torch.zeros(40)
    assert set(C.bootstrap_sizes(ld, ones, zeros, 0.95).tolist()) == {3}
    quick = torch.tensor([0.0, 1.0, 1.0, 1.0])[:, None].repeat(1, 20)
    slow = torch.tensor([0.0, 0.0, 0.2, 1.0])[:, None].repeat(1, 20)
    sizes = C.bootstrap_sizes(torch.cat([quick, slow], 1), ones, zeros, 0.55)
    assert set(sizes.tolist()) <= {1, 2, 3} and len(set(sizes.tolist())) > 1


def test_the_circuit_size_interval_holds_the_size_and_narrows_with_more_pairs():
    """The paper model's position graph: the size with its interval is size_at's size, inside its
    interval, and the interval over 150 pairs is narrower than over 30."""
    from compose_lens.training.subject import load_model

    loaded = load_model("paper")
    gm = C.GraphModel.from_model(loaded.model, loaded.config.model, positions=True)
    widths = []
    for n in (30, 150):
        pairs = C.resample_pairs(loaded.split, n)
        base = C.baseline(gm, pairs)
        scores = C.eap_ig_scores(gm, pairs, base, steps=8)
        size, (low, high) = C.size_with_interval(gm, pairs, scores, 0.95, base)
        assert size == C.size_at(gm, pairs, scores, 0.95, base)[0]
        assert low <= size <= high
        widths.append(high - low)
    assert widths[1] < widths[0], widths
