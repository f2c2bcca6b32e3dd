"""Probes of the routing circuit: planted heads are found, absent ones are not, the study's model has them."""

from __future__ import annotations

import math

import pytest
import torch

from compose_lens.model import tl
from compose_lens.analysis import probes
from compose_lens.analysis.activations import collect
from compose_lens.data.sampler import make_pool
from compose_lens.data.task import parse_sequence
from compose_lens.training.subject import Subject


def one_hot_model(config, key_shift: int):
    """A model whose embeddings are one-hot (positions in dims 0..n-1, tokens after them) and
    whose layer-1 head scores query i against key j by ``[i == j + key_shift]`` (strongly).

    key_shift=1 plants a previous-token head; key_shift=0 a head that attends to itself.
    Layer 1's OV copies the attended token and position into the residual stream.
    """
    model = tl.boot(config.model)
    n, V, d = config.task.seq_len, config.task.d_vocab, config.model.d_model
    assert n + V <= d
    params = tl.parameters(model)
    with torch.no_grad():
        for tensor in params.values():
            tensor.zero_()
        params["pos_embed.weight"][:, :n] = torch.eye(n)
        params["embed.weight"][:, n: n + V] = torch.eye(V)
        strength = 30.0 * math.sqrt(config.model.d_head)
        params["blocks.0.attn.q.weight"][:n, :n] = strength * torch.eye(n)
        shift = torch.zeros(n, n)  # key j -> head dim j + key_shift
        for j in range(n - key_shift):
            shift[j + key_shift, j] = 1.0
        params["blocks.0.attn.k.weight"][:n, :n] = shift
        params["blocks.0.attn.v.weight"].copy_(torch.eye(d))
        params["blocks.0.attn.o.weight"].copy_(torch.eye(d))
    return model


def test_planted_previous_token_head_is_found_by_weights_activations_and_probe(tiny_config, tiny_split):
    model = one_hot_model(tiny_config, key_shift=1)
    assert probes.prev_token_weight_score(model, tiny_config) == 1.0
    acts = probes.probe_activations(Subject(model, tiny_config, tiny_split, "test"), n=270)
    assert probes.prev_token_attention_score(Subject(model, tiny_config, tiny_split, "test"), acts=acts) == 1.0
    probe = probes.prev_token_probe(Subject(model, tiny_config, tiny_split, "test"), acts=acts)
    assert probe.n_test > 50
    assert probe.test_accuracy > 0.95 > 3 * probe.chance


def test_self_attending_head_is_not_a_previous_token_head(tiny_config, tiny_split):
    model = one_hot_model(tiny_config, key_shift=0)
    # every earlier key ties, so only position 1 (a single earlier key) counts as a hit
    assert probes.prev_token_weight_score(model, tiny_config) == pytest.approx(1 / (tiny_config.task.context_len - 1))
    acts = probes.probe_activations(Subject(model, tiny_config, tiny_split, "test"), n=270)
    assert probes.prev_token_attention_score(Subject(model, tiny_config, tiny_split, "test"), acts=acts) == 0.0
    # the value position then holds only its own token and place: the variable is not there
    assert probes.prev_token_probe_accuracy(Subject(model, tiny_config, tiny_split, "test"), acts=acts) < 0.5


def test_positional_scores_and_previous_position_fraction():
    n = 6
    previous = torch.zeros(n, n)
    previous[torch.arange(1, n), torch.arange(n - 1)] = 1.0
    assert probes.previous_position_fraction(previous) == 1.0
    first = torch.zeros(n, n)
    first[:, 0] = 1.0  # always the first position
    assert probes.previous_position_fraction(first) == pytest.approx(1 / (n - 1))


def test_positional_attention_is_the_heads_pattern_with_the_tokens_taken_out(tiny_config, tiny_split):
    """What the positional figure draws (issue 43 asked which axis is which): row i, column j of
    ``positional_attention(positional_qk_scores)`` is the weight the binder's query at position i gives
    the key at position j when the token embeddings are zeroed, read from the model's own pattern hook.
    Transposed, it would not be: the random weights make the scores far from symmetric."""
    torch.manual_seed(0)
    model = tl.boot(tiny_config.model)
    with torch.no_grad():
        for tensor in tl.parameters(model).values():
            if tensor.requires_grad:
                tensor.normal_(0, 0.5)
    scores = probes.positional_qk_scores(model, tiny_config)
    weights = probes.positional_attention(scores)
    seen = {}
    model.run_with_hooks(make_pool(tiny_split, "2var_train", 1).tokens,
                         fwd_hooks=[("hook_embed", lambda x, hook: torch.zeros_like(x)),
                                    ("blocks.0.attn.hook_pattern", lambda x, hook: seen.setdefault("p", x))])
    n = tiny_config.task.context_len
    pattern = seen["p"][0, 0, :n, :n].detach()
    assert torch.allclose(weights, pattern, atol=1e-5)
    assert not torch.allclose(probes.positional_attention(scores.T), pattern, atol=1e-2)
    assert torch.allclose(weights.sum(dim=1), torch.ones(n)) and (weights.triu(1) == 0).all()


def test_positional_peaks_count_diagonal_and_previous_rows():
    scores = 2 * torch.eye(5) + torch.eye(5).roll(-1, dims=1)  # the diagonal first, one back second
    scores[4, 3] = 5.0  # the last row looks back
    assert probes.positional_peaks(scores) == {"query_positions": 4, "on_diagonal": 3, "just_below": 1,
                                               "argmax_per_query": [1, 2, 3, 3]}


def test_variable_identity_matrix_finds_planted_routing_and_rejects_a_permutation(tiny_config):
    model = one_hot_model(tiny_config, key_shift=1)  # OV1 copies tokens: E_var OV1 = e_var
    task = tiny_config.task
    n = task.seq_len
    var_dims = torch.arange(task.n_vars) + n + task.first_var_token
    params = tl.parameters(model)
    with torch.no_grad():
        params["blocks.1.attn.q.weight"][var_dims, var_dims] = 1.0
        params["blocks.1.attn.k.weight"][var_dims, var_dims] = 1.0
    S = probes.variable_identity_matrix(model, tiny_config)
    assert S.shape == (task.n_vars, task.n_vars)
    assert probes.variable_identity_score(model, tiny_config) == 1.0
    with torch.no_grad():  # keys of variable w answer the query of variable w + 1: never the diagonal
        params["blocks.1.attn.k.weight"][var_dims] = 0.0
        params["blocks.1.attn.k.weight"][var_dims, var_dims.roll(1)] = 1.0
    assert probes.variable_identity_score(model, tiny_config) == 0.0


def test_value_targets_point_at_the_values_of_the_operands(tiny_task):
    tokens = torch.tensor([parse_sequence(tiny_task, "PAD b 3 PAD e 5 PAD d 6 PAD PAD PAD + b 4 ="),
                           parse_sequence(tiny_task, "c 1 PAD PAD PAD PAD PAD PAD PAD PAD a 2 + a c ="),
                           parse_sequence(tiny_task, "PAD PAD PAD PAD PAD PAD PAD PAD PAD PAD e 2 + 3 4 =")])
    assert probes.value_targets(tiny_task, tokens).tolist() == [[2, 14], [11, 1], [13, 14]]
    seq, pos, var = probes.value_positions(tiny_task, tokens[:1])
    assert pos.tolist() == [2, 5, 8] and var.tolist() == [1, 4, 7]


def test_table_forward_matches_run_with_cache(tiny_config, tiny_split):
    torch.manual_seed(0)
    model = tl.boot(tiny_config.model)
    with torch.no_grad():  # a trained-looking model: larger weights than at init
        for name, tensor in tl.parameters(model).items():
            if tensor.requires_grad:
                tensor.normal_(0, 0.3)
    tokens = make_pool(tiny_split, "2var_train", 64).tokens
    fast = collect(model, tiny_config.model, tokens, fast=True)
    slow = collect(model, tiny_config.model, tokens, fast=False)
    for name in ("pattern0", "resid_mid0", "pattern1_last", "resid_mid1_last", "mlp_pre", "mlp_post", "logits"):
        a, b = getattr(fast, name), getattr(slow, name)
        assert (a - b).abs().max() <= 1e-5 * b.abs().max().clamp_min(1.0), name


def test_reference_model_has_the_routing_circuit(reference_final):
    subject = reference_final
    model, config = subject.model, subject.config
    acts = probes.probe_activations(subject, n=450)
    # measured on final.pth: 1.0 for every score
    assert probes.prev_token_weight_score(model, config) >= 0.9
    assert probes.prev_token_attention_score(subject, acts=acts) >= 0.95
    assert probes.prev_token_probe_accuracy(subject, acts=acts) >= 0.9
    assert probes.equals_to_operands_score(subject, acts=acts) >= 0.95
    assert probes.variable_identity_score(model, config) >= 0.9
    assert probes.equals_to_values_score(subject, acts=acts) >= 0.9
    by_type = probes.scores_by_type(config, acts)
    assert set(by_type) == {"0var", "1var_left", "1var_right", "2var"}
