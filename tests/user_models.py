"""Models trained outside compose-lens, as a researcher brings them: built with TransformerLens alone
(``TransformerBridge.boot_native``), saved as a folder of ``config.json`` (or ``tl_config.json``),
``model.safetensors`` and ``task.json``.

The weights are TransformerLens's random initialisation with every bias switched on (so each row of
the unembedding's bias matters), or trained a few hundred steps where a test needs a model that has
learned something (:func:`train`). The declarations cover the layouts a declaration can say: shuffled
ids, unused ids, an infix query, the whole vocabulary as output, another operation.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from compose_lens.data.declaration import TL_FIELDS, TaskDeclaration

P = 7


def declaration(query: str = "prefix", output: str = "numbers", unused: int = 0, shuffled: bool = True,
                operation: str = "add", **keys) -> TaskDeclaration:
    """p = 7, 5 variables ``p q r s t``; ``unused`` ids the task never reads; ``shuffled``: the ids in a
    seeded random order (else numbers first, then the variables, the operator, ``=`` and PAD)."""
    size = P + 5 + 3 + unused
    ids = torch.randperm(size, generator=torch.Generator().manual_seed(5)).tolist() if shuffled \
        else list(range(size))
    table = {"operation_table": tuple(tuple((3 * x + y * y) % P for y in range(P)) for x in range(P))} \
        if operation == "table" else {}
    procedure = {} if {"heldout_pairs", "split_file"} & set(keys) else {"f": 0.6, "seed": 1}  # one split source
    keys = {"variable_names": ("p", "q", "r", "s", "t"), "seq_len": 12, "max_assignments": 3, **procedure,
            **table, **keys}
    return TaskDeclaration(modulus=P, numbers=tuple(ids[:P]), variables=tuple(ids[P:P + 5]), operator=ids[12],
                           equals=ids[13], pad=ids[14], vocab_size=size, query=query, operation=operation,
                           output=output, **keys)


def tl_model(decl: TaskDeclaration, normalization_type: str | None = None, n_heads: int = 2, n_ctx: int | None = None,
             seed: int = 0):
    """A TransformerLens model of ``decl``'s vocabulary and outputs (random weights, biases on)."""
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge
    from transformer_lens.model_bridge.sources import native  # noqa: F401  (registers boot_native)

    cfg = TransformerBridgeConfig(n_layers=2, d_model=32, d_head=8, n_heads=n_heads, d_mlp=64, act_fn="relu",
                                  normalization_type=normalization_type, n_ctx=n_ctx or decl.seq_len,
                                  d_vocab=decl.vocab_size, d_vocab_out=decl.d_vocab_out,
                                  positional_embedding_type="standard", architecture="TransformerLensNative",
                                  seed=seed)
    model = TransformerBridge.boot_native(cfg)
    with torch.no_grad():
        for name, value in model.named_parameters():
            if name.endswith("bias"):
                value.normal_(0, 0.3, generator=torch.Generator().manual_seed(seed))
    return model.eval()


def config_of(model) -> dict:
    return {**{k: getattr(model.cfg, k) for k in TL_FIELDS}, "positional_embedding_type": "standard"}


def save(model, decl: TaskDeclaration, folder: Path, config_name: str = "config.json") -> Path:
    """The folder a researcher saves: the config, the weights, the task."""
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, str(folder / "model.safetensors"))
    (folder / config_name).write_text(json.dumps(config_of(model)))
    decl.write(folder / "task.json")
    return folder


def user_tokens(decl: TaskDeclaration, n: int = 64, seed: int = 0) -> torch.Tensor:
    """Sequences of every pool in the researcher's ids and positions."""
    from compose_lens.data.sampler import concat_batches, make_pools

    return decl.to_user(concat_batches(make_pools(decl.split(), n, seed))[0].tokens)


def train(model, decl: TaskDeclaration, steps: int = 300, seed: int = 0):
    """``steps`` of AdamW on the declared training pools, in the researcher's ids (cross-entropy at the
    last position over their output classes): enough for a tiny model to learn something."""
    from compose_lens.data.sampler import TrainingSampler

    sampler = TrainingSampler(decl.split(), batch_size=128, seed=seed)
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    model.train()
    for step in range(steps):
        batch = sampler.batch(step)
        logits = model(decl.to_user(batch.tokens))[:, -1]
        loss = torch.nn.functional.cross_entropy(logits, decl.answer_rows[batch.labels])
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    return model.eval()
