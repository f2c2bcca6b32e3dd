"""The number embeddings in the Fourier basis: a planted two-frequency W_E, and the paper model."""

from __future__ import annotations

import math

import pytest
import torch

from compose_lens.core.config import ModelConfig, RunConfig, TaskConfig
from compose_lens.model import tl
from compose_lens.registry.fourier.features import embedding_fourier


def planted_embedding(p: int, frequencies: list[int], d_model: int = 16, seed: int = 0):
    """A model whose number embeddings are cos/sin of the given frequencies (random phases and
    directions, a common offset added), every other parameter as booted."""
    task = TaskConfig(modulus=p, n_vars=6, left_forbidden=("f",), right_forbidden=("a",))
    config = RunConfig(task=task, model=ModelConfig.for_task(task, d_model=d_model, d_head=d_model, d_mlp=32))
    model = tl.boot(config.model)
    g = torch.Generator().manual_seed(seed)
    x = torch.arange(p, dtype=torch.float32)
    W = torch.randn(1, d_model, generator=g).expand(p, d_model).clone()  # the mean embedding: left out
    for k in frequencies:
        phase = 2 * math.pi * torch.rand((), generator=g)
        W += torch.cos(2 * math.pi * k * x / p + phase).unsqueeze(1) * torch.randn(1, d_model, generator=g)
        W += torch.sin(2 * math.pi * k * x / p).unsqueeze(1) * torch.randn(1, d_model, generator=g)
    with torch.no_grad():
        tl.parameters(model)["embed.weight"][:p] = W
    return model, config


@pytest.mark.parametrize("p,planted", [(13, [2, 5]), (59, [7, 23]), (10, [1, 5])])
def test_planted_frequencies_hold_all_the_share(p, planted):
    model, config = planted_embedding(p, planted)
    table, summary = embedding_fourier(model, config, keys=[planted[0], 3])
    assert table["frequency"].tolist() == list(range(1, p // 2 + 1))
    assert table["share"].sum() == pytest.approx(1.0, abs=1e-9)
    assert sorted(summary["top_frequencies"]) == planted
    assert summary["top_share"] == pytest.approx(1.0, abs=1e-6)
    assert table.set_index("frequency")["share"].drop(planted).max() < 1e-6
    assert summary["constant_share"] > 0.01  # the offset is there, and kept out of the shares
    assert summary["overlap"] == [planted[0]]
    assert summary["key_share"] == pytest.approx(table.set_index("frequency")["share"][planted[0]], abs=1e-9)
    assert summary["key_share_if_uniform"] == pytest.approx(2 / (p // 2))


def test_without_keys_the_comparison_is_absent_and_noise_has_no_top_frequency_of_note():
    model, config = planted_embedding(13, [])
    with torch.no_grad():
        tl.parameters(model)["embed.weight"][:13] = torch.randn(13, 16, generator=torch.Generator().manual_seed(1))
    table, summary = embedding_fourier(model, config)
    assert table["share"].sum() == pytest.approx(1.0, abs=1e-9) and not table["key"].any()
    assert summary["key_share"] is None and summary["overlap"] is None
    assert summary["top_share"] < 0.9  # noise spreads over the frequencies


def test_paper_embedding_lives_in_the_mlp_key_frequencies():
    """Measured on the paper model: the 11 frequencies above the uniform share are exactly MLP2's
    11 key frequencies [3, 4, 5, 10, 12, 17, 21, 22, 23, 24, 27] and hold 0.938 of the embeddings'
    non-constant squared norm (a flat spectrum would give 11/29 = 0.379); the top 5 hold only
    0.47, so the embedding spreads over all of them."""
    from compose_lens.training.subject import load_model

    loaded = load_model("paper", bridge=False)  # bundled with the package
    keys = [3, 4, 5, 10, 12, 17, 21, 22, 23, 24, 27]  # fourier.key_frequencies of its constant grid
    table, summary = embedding_fourier(loaded.model, loaded.config, keys=keys)
    assert sorted(summary["top_frequencies"]) == keys
    assert summary["key_share"] > 0.9
    assert summary["key_share"] > 2 * summary["key_share_if_uniform"]


def test_the_figure_draws_the_table_with_and_without_keys():
    from compose_lens.registry.fourier.figure import embedding_fourier_figure
    from compose_lens.views.drawing import png_bytes

    model, config = planted_embedding(13, [2, 5])
    for keys in ([2, 3], None):
        table, summary = embedding_fourier(model, config, keys=keys)
        fig, data = embedding_fourier_figure(table, summary)
        assert data.equals(table)
        hatched = [bar.get_hatch() for bar in fig.axes[0].patches]
        assert hatched.count("//") == (2 if keys else 0)  # the keys are marked without colour too
        assert png_bytes(fig).startswith(b"\x89PNG")
