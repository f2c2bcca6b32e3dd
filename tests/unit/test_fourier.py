"""Fourier analysis of MLP2: the basis, projections, and a planted adder whose key frequencies are known."""

from __future__ import annotations

import math

import pytest
import torch

from compose_lens.model import tl
from compose_lens.analysis import fourier
from compose_lens.core.config import ModelConfig, RunConfig, TaskConfig


def cos_grid(p: int, k: int, phase: float = 0.0) -> torch.Tensor:
    return fourier.ideal_pattern(p, k, phase)


@pytest.mark.parametrize("p", [2, 7, 10, 59, 113])
def test_fourier_basis_is_orthonormal_and_reaches_the_top_frequency(p):
    basis, names = fourier.fourier_basis(p)
    assert basis.shape == (p, p) and len(names) == p
    assert torch.allclose(basis @ basis.T, torch.eye(p), atol=1e-5)
    assert names[0] == "const"
    assert f"cos {p // 2}" in names
    assert (f"sin {p // 2}" in names) == (p % 2 == 1)  # the Nyquist sine vanishes for even p
    freqs = fourier.basis_frequencies(p)
    assert freqs.max().item() == p // 2 and freqs.bincount().tolist()[0] == 1


def test_coefficients_passed_in_give_the_same_numbers():
    """The grids hand their cached 2-D coefficients to these functions: bit for bit the same."""
    grid = torch.randn(11, 11, 6, generator=torch.Generator().manual_seed(0))
    coeffs = fourier.fft2d(grid)
    assert torch.equal(fourier.frequency_fractions(grid, coeffs), fourier.frequency_fractions(grid))
    assert torch.equal(fourier.frequency_power(grid, coeffs), fourier.frequency_power(grid))
    assert torch.equal(fourier.project_onto_frequency(grid, [2, 3], coefficients=coeffs),
                       fourier.project_onto_frequency(grid, [2, 3]))
    other = fourier.fft2d(torch.randn(11, 11, 6, generator=torch.Generator().manual_seed(1)))
    assert not torch.allclose(fourier.frequency_fractions(grid, other), fourier.frequency_fractions(grid),
                              atol=1e-2)  # the coefficients passed in are the ones used


@pytest.mark.parametrize("p", [10, 13])
def test_pure_patterns_land_on_their_frequency(p):
    for k in range(1, p // 2 + 1):
        grid = cos_grid(p, k, phase=0.3 if 2 * k != p else 0.0)
        fractions = fourier.frequency_fractions(grid)
        assert fractions[k].item() == pytest.approx(1.0, abs=1e-5)
        assert torch.allclose(fourier.project_onto_frequency(grid, k), grid, atol=1e-5)
        assert fourier.project_onto_frequency(grid, [j for j in range(1, p // 2 + 1) if j != k]).abs().max() < 1e-5


def test_fft2d_round_trip_and_projections_split_a_grid():
    torch.manual_seed(0)
    grid = torch.randn(11, 11, 3)
    assert torch.allclose(fourier.ifft2d(fourier.fft2d(grid)), grid, atol=1e-5)
    coeffs = fourier.fft2d(grid)
    assert torch.allclose(coeffs.pow(2).sum(), grid.pow(2).sum(), rtol=1e-5)  # Parseval
    owner = fourier.component_frequencies(11)
    singles = torch.stack([fourier.project_onto_frequency(grid, k) for k in range(1, 6)]).sum(0)
    const = fourier.project_onto_frequency(grid, [], constant=True)
    cross = fourier.ifft2d(coeffs * (owner == -1).unsqueeze(-1))
    assert torch.allclose(singles + const + cross, grid, atol=1e-5)


def planted_adder(p: int, keys: list[int], phases: int = 12, readout_scale: float = 8.0):
    """A model whose MLP2 adds mod p with the given frequencies, read by ``ov_grid``.

    The numbers embed as (cos, sin) of each key frequency; layer 2's OV is the
    identity, so the MLP input is ``e_x + e_y``. For each key k, ``phases`` neurons read
    ``cos(k x - phi) + cos(k y - phi)``; the ReLU's second harmonic in phi carries
    ``cos(k (x + y) - 2 phi)``, which a readout ``cos(k z - 2 phi)`` sums to
    ``cos(k (x + y - z))``: largest at z = x + y.
    """
    task = TaskConfig(modulus=p, n_vars=6, left_forbidden=("f",), right_forbidden=("a",))
    d_mlp = phases * len(keys)
    config = RunConfig(task=task, model=ModelConfig.for_task(task, d_model=2 * len(keys) + d_mlp,
                                                             d_head=2 * len(keys) + d_mlp, d_mlp=d_mlp))
    model = tl.boot(config.model)
    params = tl.parameters(model)
    x = torch.arange(p, dtype=torch.float32)
    d = config.model.d_model
    with torch.no_grad():
        for tensor in params.values():
            tensor.zero_()
        params["blocks.1.attn.v.weight"].copy_(torch.eye(d))
        params["blocks.1.attn.o.weight"].copy_(torch.eye(d))
        neuron = 0
        for i, k in enumerate(keys):
            params["embed.weight"][:p, 2 * i] = torch.cos(2 * math.pi * k * x / p)
            params["embed.weight"][:p, 2 * i + 1] = torch.sin(2 * math.pi * k * x / p)
            for m in range(phases):
                phi = 2 * math.pi * m / phases
                params["blocks.1.mlp.in.weight"][neuron, 2 * i: 2 * i + 2] = torch.tensor([math.cos(phi), math.sin(phi)])
                params["blocks.1.mlp.out.weight"][2 * len(keys) + neuron, neuron] = 1.0
                params["unembed.weight"][:, 2 * len(keys) + neuron] = readout_scale * torch.cos(
                    2 * math.pi * k * x / p - 2 * phi)
                neuron += 1
    return model, config


@pytest.mark.parametrize("p,keys", [(13, [2, 5]), (23, [3, 7, 11])])
def test_planted_adder_gives_exactly_its_key_frequencies(p, keys):
    model, config = planted_adder(p, keys)
    assert fourier.ov_mlp_addition_accuracy(model, config) == 1.0
    grid = fourier.ov_grid(model, config)
    neurons = fourier.neuron_frequencies(grid.mlp_post)
    assert fourier.key_frequencies(neurons) == keys
    assert set(neurons["frequency"]) == set(keys)
    assert fourier.key_frequency_strength(grid, keys) > 0.9
    full = fourier.grid_loss(grid)
    assert fourier.restricted_loss(grid, keys) <= full + 1e-4
    excluded = fourier.excluded_loss(grid, keys)
    assert set(excluded) == set(keys)
    others = [k for k in range(1, p // 2 + 1) if k not in keys]
    assert min(excluded.values()) > max(fourier.excluded_loss(grid, others).values())
    assert fourier.excluded_loss_all(grid, keys) > math.log(p) - 0.1  # nothing left to add with
    best = fourier.best_neurons(grid, keys)
    assert best["frequency"].tolist() == keys
    assert (best["ideal_neuron_correlation"] > 0.99).all()
    readout = fourier.unembed_frequency_norms(fourier.unembed_fourier(grid))
    assert sorted(readout.sort_values().index[-len(keys):].tolist()) == keys


def test_grids_from_constants_and_variables_share_the_values(tiny_split):
    p = tiny_split.task.modulus
    for operands in fourier.OPERAND_KINDS:
        rows = fourier.grid_rows(tiny_split, operands)
        assert rows.shape == (p * p, 4)
        assert rows[:, 0].tolist() == torch.arange(p).repeat_interleave(p).tolist()
        assert rows[:, 1].tolist() == torch.arange(p).repeat(p).tolist()
        assert ((rows[:, 2] >= 0).any().item(), (rows[:, 3] >= 0).any().item()) == {
            "constant": (False, False), "left": (True, False), "right": (False, True), "both": (True, True)}[operands]


def test_reference_mlp_adds_with_a_few_key_frequencies(reference_final):
    model, config = reference_final.model, reference_final.config
    # measured on final.pth: OV accuracy 0.998, 10 key frequencies, strength 0.83
    assert fourier.ov_mlp_addition_accuracy(model, config) > 0.95
    constant = fourier.operand_grid(reference_final, "constant")
    keys = fourier.key_frequencies(constant)
    assert 1 <= len(keys) <= 12
    assert fourier.key_frequency_strength(constant, keys) > 0.6
    assert fourier.restricted_loss(constant, keys) < fourier.grid_loss(constant) + 0.01
    assert fourier.excluded_loss_all(constant, keys) > 1.0
    variable = fourier.operand_grid(reference_final, "both")
    comparison = fourier.compare_grids(constant, variable)
    assert comparison["key_frequencies"][0] == comparison["key_frequencies"][1]
    assert comparison["mean_neuron_correlation"] > 0.5
