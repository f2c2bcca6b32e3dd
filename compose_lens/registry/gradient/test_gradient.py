"""The gradient decomposition of compose_lens.registry.gradient.terms, against autograd."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from compose_lens.registry.gradient import terms as gradient_terms
from compose_lens.core.errors import ComposeLensError
from compose_lens.data.sampler import TrainingSampler
from compose_lens.data.task import parse_sequence
from compose_lens.model import fastpath, tl
from compose_lens.training.subject import Subject

VARIANTS = {"paper": {}, "both": dict(embeddings="orthogonal", residual="disentangled", d_model=128)}


def _setup(tiny_config, tiny_split, name):
    config = tiny_config.replace(model=tiny_config.model.replace(**VARIANTS[name]))
    model = tl.boot(config.model)
    with torch.no_grad():  # away from the initialisation, so that every term is alive
        for key, value in tl.parameters(model).items():
            if value.requires_grad:
                value.add_(0.05 * torch.randn_like(value) * (value != 0))
    batch = TrainingSampler(tiny_split, 64, 0).batch(0)
    return config, model, batch


@pytest.mark.parametrize("name", list(VARIANTS))
def test_the_terms_sum_to_the_autograd_gradient(tiny_config, tiny_split, name):
    config, model, batch = _setup(tiny_config, tiny_split, name)
    params = tl.parameters(model)
    full, terms = gradient_terms.decompose(params, config, batch.tokens, batch.labels)
    for matrix in gradient_terms.MATRICES:
        total = sum(terms[matrix].values())
        assert torch.allclose(total, full[matrix], rtol=1e-9, atol=1e-12 * full[matrix].abs().max())
        assert terms[matrix][gradient_terms.KEPT].norm() > 0
        without_kept = total - terms[matrix][gradient_terms.KEPT]  # the check can fail
        assert not torch.allclose(without_kept, full[matrix], rtol=1e-6)
    # and the "full" gradient is the model's own: its forward is the fast path's, and the chain rule
    # through W_QK0 = W_Q0 W_K0^T gives the gradient the trainer's forward gives blocks.0.attn.q.weight
    logits = fastpath.last_position_logits(params, config.model, batch.tokens)
    fw = gradient_terms.forward(params, config.model, batch.tokens, gradient_terms.Products.of(params))
    assert torch.allclose(fw.logits.float(), logits.detach(), atol=1e-4)
    model.zero_grad()
    F.cross_entropy(logits, batch.labels).backward()
    k = params["blocks.0.attn.k.weight"].detach().double()
    assert torch.allclose((k @ full["qk0"].T).float(), params["blocks.0.attn.q.weight"].grad, atol=1e-6, rtol=1e-3)


def test_the_circuit_pairs_are_the_assignments_and_the_operands(tiny_config):
    task = tiny_config.task
    tokens = torch.tensor([parse_sequence(task, "b=6, e=5, d=2, b+3=?")])
    binding, routing = gradient_terms.circuit_pairs(task, tokens)
    ctx = task.context_len
    values = [i for i in range(ctx) if tokens[0, i] < task.modulus]
    assert len(values) == 3
    assert binding[0].nonzero().tolist() == [[i, i - 1] for i in values]
    b_value = values[0]  # b is assigned first (left padding puts the assignments in order)
    assert int(tokens[0, b_value]) == 6
    assert routing[0].nonzero().flatten().tolist() == [b_value, ctx + 2]  # b's value, and the constant 3


def test_shares_are_fractions_and_refuse_other_architectures(tiny_config, tiny_split):
    config, model, batch = _setup(tiny_config, tiny_split, "paper")
    table = gradient_terms.shares(tl.parameters(model), config, batch.tokens, batch.labels)
    assert set(table["matrix"]) == set(gradient_terms.MATRICES)
    assert ((table["cosine"] >= -1) & (table["cosine"] <= 1)).all() and (table["share"] >= 0).all()
    normed = config.replace(model=config.model.replace(normalization_type="LN"))
    with pytest.raises(ComposeLensError, match="needs the paper layout"):
        gradient_terms.decompose(tl.parameters(model), normed, batch.tokens, batch.labels)


def test_idealisation_reads_the_weights_not_the_config(tiny_config):
    """What the report's gradient section states about a model is measured on its weights: the
    overlap knob's cosine, frozen embeddings left where the config fixes them, and the entries a
    disentangled residual forbids at zero; a planted change of either is read back."""
    both = tiny_config.model.replace(embeddings="orthogonal", embedding_overlap=0.3, residual="disentangled",
                                     d_model=132)
    model = tl.boot(both)
    found = gradient_terms.idealisation(model, both)
    assert found["token_mean_cosine"] == pytest.approx(0.3, abs=1e-5)
    assert found["frozen_embedding_change"] == 0.0 and found["forbidden_entry_max"] == 0.0
    params = tl.parameters(model)
    mask = tl.absent_masks(both)["blocks.0.attn.o.weight"]
    with torch.no_grad():
        params["blocks.0.attn.o.weight"][mask.nonzero()[0].tolist()] = 0.7
        params["embed.weight"][3, 0] += 0.25
    found = gradient_terms.idealisation(model, both)
    assert found["forbidden_entry_max"] == pytest.approx(0.7) and found["frozen_embedding_change"] == pytest.approx(0.25)
    learned = gradient_terms.idealisation(tl.boot(tiny_config.model), tiny_config.model)
    assert learned["frozen_embedding_change"] is None and learned["forbidden_entry_max"] is None
    assert abs(learned["token_mean_cosine"]) < 0.2  # random Gaussian embeddings: near 0, not the knob's value


def test_the_registered_gradient_analysis_reads_only_the_layout_it_covers(tiny_config, tiny_split):
    from compose_lens import registry

    analysis = registry.by_name(registry.ANALYSES, "gradient")
    assert analysis.reads(tiny_config)
    deeper = tiny_config.replace(model=tiny_config.model.replace(n_layers=3, mlp_blocks=[2]))
    assert not analysis.reads(deeper)
    model = tl.boot(tiny_config.model)
    with torch.no_grad():  # the analyses run under no_grad; the decomposition needs autograd all the same
        table = gradient_terms.shares_of_model(Subject(model, tiny_config, tiny_split, "test"), 32, 0)
    assert set(table["matrix"]) == set(gradient_terms.MATRICES) and (table["full_norm"] > 0).all()
