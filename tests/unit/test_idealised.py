"""The theory's idealised variants of the model (docs/idealised.md): orthogonal, frozen
embeddings, the overlap knob, and the disentangled residual.

Each variant's forward (the TransformerLens bridge and the table fast path) is checked
against a forward written out here with plain torch ops, in the variant's own terms: the
disentangled transformer *concatenates* what each writer produces, rather than adding
into one stream with masked weights as the package does.
"""

from __future__ import annotations

import math

import pytest
import torch

from compose_lens.core.config import ModelConfig, RunConfig
from compose_lens.core.errors import ComposeLensError
from compose_lens.core.files import load_json
from compose_lens.core import capabilities
from compose_lens.model import fastpath, tl
from compose_lens.core.coverage import PAPER_MODEL_DIR
from compose_lens.training.runs import save_model
from compose_lens.training.subject import load_model
from compose_lens.training.train import Trainer

VARIANTS = {
    "orthogonal": dict(embeddings="orthogonal"),
    "orthogonal_random": dict(embeddings="orthogonal", embedding_basis="random"),
    "overlap": dict(embeddings="orthogonal", embedding_overlap=0.4, d_model=40),
    "disentangled": dict(residual="disentangled"),
    "both": dict(embeddings="orthogonal", residual="disentangled", d_model=128),
}


def variant(tiny_config: RunConfig, name: str) -> RunConfig:
    return tiny_config.replace(model=tiny_config.model.replace(**VARIANTS[name]))


def reference_forward(params: dict[str, torch.Tensor], cfg: ModelConfig, tokens: torch.Tensor) -> torch.Tensor:
    """Logits (B, n, d_vocab_out) of a 1-head, no-norm, no-bias model, written out plainly.

    Additive: every writer adds into one d_model-wide stream. Disentangled: the stream is the
    concatenation of the writers' outputs so far; a reader sees only that many columns of its
    input matrix, and a writer's output matrix has only its own block's rows."""
    p = {k: v.detach().double() for k, v in params.items()}
    n = tokens.shape[1]
    blocks = cfg.residual_blocks()
    disentangled = cfg.residual == "disentangled"

    def own(name: str, writer: str) -> torch.Tensor:  # (rows of the writer's block, ...)
        start, stop = blocks[writer]
        return p[name][start:stop] if disentangled else p[name]

    def read(written: list[torch.Tensor], weight: torch.Tensor) -> torch.Tensor:
        stream = torch.cat(written, dim=-1) if disentangled else sum(written)
        return stream @ weight[:, : stream.shape[-1]].T

    start, stop = blocks["embed"]
    embed = p["embed.weight"][:, start:stop] if disentangled else p["embed.weight"]
    pos = p["pos_embed.weight"][:, start:stop] if disentangled else p["pos_embed.weight"]
    written = [embed[tokens] + pos[:n]]
    for layer in range(cfg.n_layers):
        q = read(written, p[f"blocks.{layer}.attn.q.weight"])
        k = read(written, p[f"blocks.{layer}.attn.k.weight"])
        v = read(written, p[f"blocks.{layer}.attn.v.weight"])
        scores = q @ k.transpose(1, 2) / math.sqrt(cfg.d_head)
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        written.append(scores.softmax(-1) @ v @ own(f"blocks.{layer}.attn.o.weight", f"attn{layer}").T)
        if layer in cfg.mlp_blocks:
            hidden = torch.relu(read(written, p[f"blocks.{layer}.mlp.in.weight"]))
            written.append(hidden @ own(f"blocks.{layer}.mlp.out.weight", f"mlp{layer}").T)
    return read(written, p["unembed.weight"])


@pytest.mark.parametrize("name", list(VARIANTS))
def test_each_variant_forward_equals_the_written_out_forward(tiny_config, name):
    config = variant(tiny_config, name)
    model = tl.boot(config.model)
    tokens = torch.randint(0, config.model.d_vocab, (32, config.model.n_ctx), generator=torch.Generator().manual_seed(1))
    expected = reference_forward(tl.parameters(model), config.model, tokens)
    with torch.no_grad():
        bridge = model(tokens).double()
        tables = fastpath.last_position_logits(tl.parameters(model), config.model, tokens).double()
    assert capabilities.answer_forward(config.model) == "tables"
    assert torch.allclose(bridge, expected, atol=1e-5), (bridge - expected).abs().max()
    assert torch.allclose(tables, expected[:, -1], atol=1e-5), (tables - expected[:, -1]).abs().max()


def test_the_disentangled_reference_is_not_the_additive_one(tiny_config):
    """The check above can fail: the concatenating reference differs from the additive forward
    of the same (unmasked) weights."""
    model = tl.boot(tiny_config.model)
    tokens = torch.randint(0, tiny_config.model.d_vocab, (8, tiny_config.model.n_ctx))
    wrong = reference_forward(tl.parameters(model), variant(tiny_config, "disentangled").model, tokens)
    with torch.no_grad():
        assert not torch.allclose(model(tokens).double(), wrong, atol=1e-3)


@pytest.mark.parametrize("name", ["orthogonal", "both"])
def test_orthogonal_embeddings_stay_orthonormal_and_unchanged_by_training(tmp_path, tiny_config, name):
    config = variant(tiny_config, name).with_overrides(["steps=6", "eval_every=3", "checkpoint_every=3"])
    first = {k: v.detach().clone() for k, v in tl.parameters(tl.boot(config.model)).items()}
    trainer = Trainer(config, tmp_path / "run", progress=False)
    trainer.run()
    params = tl.parameters(trainer.model)
    for key in ("embed.weight", "pos_embed.weight"):
        assert torch.equal(params[key], first[key]), key  # bit-unchanged
    rows = torch.cat([params["embed.weight"], params["pos_embed.weight"]])
    assert torch.allclose(rows @ rows.T, torch.eye(rows.shape[0]), atol=1e-6)
    assert not torch.equal(params["blocks.0.attn.q.weight"], first["blocks.0.attn.q.weight"])  # it trained
    for key, mask in tl.absent_masks(config.model).items():  # the disentangled blocks stay apart
        assert torch.count_nonzero(params[key][mask]) == 0, key
        assert torch.count_nonzero(params[key][~mask]) > 0, key
    reloaded = load_model(tmp_path / "run")  # the saved run reads back, structure checked
    assert torch.equal(tl.parameters(reloaded.model)["embed.weight"], first["embed.weight"])


@pytest.mark.parametrize("overlap", [0.05, 0.3, 0.8])
def test_the_overlap_knob_sets_the_mean_cosine_between_tokens(tiny_config, overlap):
    cfg = tiny_config.model.replace(embeddings="orthogonal", embedding_overlap=overlap, d_model=40,
                                    embedding_basis="random")
    E = tl.fixed_embeddings(cfg)["embed.weight"]
    unit = E / E.norm(dim=1, keepdim=True)
    cosines = unit @ unit.T
    off = ~torch.eye(len(E), dtype=torch.bool)
    assert abs(cosines[off].mean().item() - overlap) < 1e-5
    assert torch.allclose(E.norm(dim=1), torch.ones(len(E)), atol=1e-5)
    P = tl.fixed_embeddings(cfg)["pos_embed.weight"]
    assert torch.allclose(P @ E.T, torch.zeros(len(P), len(E)), atol=1e-5)  # positions apart from tokens


def test_bad_settings_say_the_minimum(tiny_config):
    small = tiny_config.model  # d_vocab 16 + n_ctx 16 = 32 directions
    with pytest.raises(ComposeLensError, match="use d_model >= 128"):
        small.replace(embeddings="orthogonal", residual="disentangled")
    small.replace(embeddings="orthogonal", residual="disentangled", d_model=128)  # the minimum works
    with pytest.raises(ComposeLensError, match="use d_model >= 33"):
        small.replace(embeddings="orthogonal", embedding_overlap=0.2)
    with pytest.raises(ComposeLensError, match="not a multiple of 4"):
        small.replace(residual="disentangled", d_model=30)
    with pytest.raises(ComposeLensError, match="needs embeddings=orthogonal"):
        small.replace(embedding_overlap=0.2)
    with pytest.raises(ComposeLensError, match=r"in \[0, 1\)"):
        small.replace(embeddings="orthogonal", embedding_overlap=1.0)


def test_defaults_are_the_study(tiny_config):
    cfg = ModelConfig()
    assert (cfg.embeddings, cfg.residual, cfg.embedding_overlap) == ("learned", "additive", 0.0)
    assert tl.frozen_names(cfg) == [] and tl.absent_masks(cfg) == {} and tl.fixed_embeddings(cfg) == {}
    # the old meaning of "frozen" (zero and untrained) is now "absent", with the same tensors
    assert tl.absent_names(cfg) == sorted(
        [f"blocks.0.mlp.{p}.{w}" for p in ("in", "out") for w in ("weight", "bias")]
        + [f"blocks.{L}.attn.{p}.bias" for L in (0, 1) for p in "qkvo"]
        + ["blocks.1.mlp.in.bias", "blocks.1.mlp.out.bias", "unembed.bias"])
    paper = RunConfig.from_dict(load_json(PAPER_MODEL_DIR / "config.json"))
    assert paper.model == ModelConfig.for_task(paper.task) and not paper.model.idealised
    model = tl.boot(tiny_config.model)
    assert all(p.requires_grad for n, p in tl.parameters(model).items() if n in ("embed.weight", "pos_embed.weight"))


def test_a_changed_frozen_embedding_is_refused(tmp_path, tiny_config):
    from safetensors.torch import load_file, save_file

    config = variant(tiny_config, "orthogonal")
    directory = save_model(tl.boot(config.model), config, tmp_path / "m")
    state = load_file(str(directory / "model.safetensors"))
    state["embed.weight"][0, 0] += 0.01
    save_file(state, str(directory / "model.safetensors"))
    with pytest.raises(ComposeLensError, match="not the frozen embedding"):
        load_model(directory)
