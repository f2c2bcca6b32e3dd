"""The activations the probes read, computed once per batch of sequences.

Every activation-based analysis of this package looks at the same few places of
the model: the binder head ``(Lb, hb)``, the router head ``(Lr, hr)`` and an MLP block
``M`` (the paper's: ``binder=(0, 0)``, ``router=(1, 0)``, ``mlp_layer=1``, the defaults;
another architecture's are found by :mod:`compose_lens.analysis.locate`):

==========================  ==========================================  ==================
field                       TransformerLens hook                        shape
==========================  ==========================================  ==================
``pattern0``                ``blocks.Lb.attn.hook_pattern`` (head hb)    (B, n, n)
``resid_mid0``              ``blocks.Lb.hook_resid_mid``                 (B, n, d_model)
``pattern1_last``           ``blocks.Lr.attn.hook_pattern`` (hr), at =   (B, n)
``resid_mid1_last``         ``blocks.M.hook_resid_mid``, at ``=``        (B, d_model)
``mlp_pre`` / ``mlp_post``  ``blocks.M.mlp.hook_pre`` / ``hook_post``   (B, d_mlp)
``logits``                  the output at ``=``                         (B, d_vocab_out)
==========================  ==========================================  ==================

``binder=None`` / ``router=None`` (no head plays the role) leaves that head's fields None;
``binder`` / ``router`` record which head filled them.

:func:`collect` reads them with the model's own ``run_with_cache``. That forward
pass is slow for the thousands of sequences a Fourier grid needs, so for the
paper's architecture (:func:`compose_lens.capabilities.is_paper_architecture`:
two layers, one head each, an MLP in the last layer only, no normalisation, zero
biases) :func:`table_forward` computes the same numbers from the weights with
*tables*: layer 1 sees only ``E[t] + P[i]``, so its queries, keys and values are
rows of small (vocabulary) and (position) tables gathered at the tokens, and so
are layer 2's keys and values once layer 1's pattern is known. Only the last
position's query, MLP and unembedding are computed per sequence. The test suite
checks that both give the same activations.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

import torch

from compose_lens.config import ModelConfig
from compose_lens.model import fastpath, tl, weights

if TYPE_CHECKING:  # the shapes are documentation; importing jaxtyping costs start-up time
    from jaxtyping import Int


@dataclass
class Activations:
    """The activations of the module doc's hooks for a batch of token sequences."""

    tokens: torch.Tensor  # (B, n) int
    pattern0: torch.Tensor | None  # (B, n, n): the binder head's attention (paper: layer 1), query x key
    resid_mid0: torch.Tensor | None  # (B, n, d_model): after the binder's attention (None if skipped)
    pattern1_last: torch.Tensor | None  # (B, n): the router head's attention (paper: layer 2) from =
    resid_mid1_last: torch.Tensor  # (B, d_model): the MLP2 input at =
    mlp_pre: torch.Tensor  # (B, d_mlp)
    mlp_post: torch.Tensor  # (B, d_mlp)
    logits: torch.Tensor  # (B, d_vocab_out)
    binder: tuple[int, int] | None = (0, 0)  # (layer, head) of pattern0 / resid_mid0 (None: not read)
    router: tuple[int, int] | None = (1, 0)  # (layer, head) of pattern1_last (None: not read)

    def __len__(self) -> int:
        return len(self.tokens)


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run with ``n`` torch threads (0 or None: leave as is), then restore. The analyses are many
    small tensor ops, which one thread runs fastest (several slow down badly on a busy machine)."""
    if not n:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@torch.no_grad()
def table_forward(params: dict[str, torch.Tensor], cfg: ModelConfig, tokens: Int[torch.Tensor, "batch pos"],
                  resid: bool = True) -> Activations:
    """The activations of the paper architecture from weight tables (exact up to rounding).

    This is the training fast path (:func:`compose_lens.model.fastpath.forward_at_answer`)
    read out at every step; ``resid=False`` skips ``resid_mid0`` at every position
    (the Fourier grids need only ``=``).
    """
    params = {k: v.float() for k, v in params.items()}
    a = fastpath.forward_at_answer(params, cfg, tokens)
    resid_mid0 = fastpath.resid_after_layer1(params, tokens, a.pattern0) if resid else None
    return Activations(tokens, a.pattern0, resid_mid0, a.pattern1_last, a.resid_mid1_last,
                       a.mlp_pre, a.mlp_post, a.logits, PAPER_BINDER, PAPER_ROUTER)


PAPER_BINDER = (0, 0)  # blocks.0 head 0: the paper's previous-token head (layer 1)
PAPER_ROUTER = (1, 0)  # blocks.1 head 0: the paper's routing head (layer 2)


@torch.no_grad()
def cached_forward(model: tl.Model, tokens: Int[torch.Tensor, "batch pos"], mlp_layer: int = 1, *,
                   binder: tuple[int, int] | None = PAPER_BINDER,
                   router: tuple[int, int] | None = PAPER_ROUTER) -> Activations:
    """The same activations read from the model's own ``run_with_cache`` (any architecture);
    ``mlp_layer``: the block whose MLP input and neurons fill ``resid_mid1_last``, ``mlp_pre``
    and ``mlp_post`` (the paper's MLP2, 1, by default; the located adder for the Fourier grids);
    ``binder`` / ``router``: the heads of ``pattern0`` / ``pattern1_last`` (see the module doc)."""
    hooks = {f"blocks.{mlp_layer}.hook_resid_mid", f"blocks.{mlp_layer}.mlp.hook_pre",
             f"blocks.{mlp_layer}.mlp.hook_post"}
    if binder is not None:
        hooks |= {f"blocks.{binder[0]}.attn.hook_pattern", f"blocks.{binder[0]}.hook_resid_mid"}
    if router is not None:
        hooks.add(f"blocks.{router[0]}.attn.hook_pattern")
    logits, cache = tl.run_with_cache(model, tokens, names_filter=lambda name: name in hooks)
    return Activations(
        tokens=tokens,
        pattern0=None if binder is None else cache[f"blocks.{binder[0]}.attn.hook_pattern"][:, binder[1]].float(),
        resid_mid0=None if binder is None else cache[f"blocks.{binder[0]}.hook_resid_mid"].float(),
        pattern1_last=(None if router is None
                       else cache[f"blocks.{router[0]}.attn.hook_pattern"][:, router[1], -1].float()),
        resid_mid1_last=cache[f"blocks.{mlp_layer}.hook_resid_mid"][:, -1].float(),
        mlp_pre=cache[f"blocks.{mlp_layer}.mlp.hook_pre"][:, -1].float(),
        mlp_post=cache[f"blocks.{mlp_layer}.mlp.hook_post"][:, -1].float(),
        logits=logits[:, -1].float(),
        binder=binder,
        router=router,
    )


def collect(model: tl.Model, cfg: ModelConfig, tokens: Int[torch.Tensor, "batch pos"], *, chunk: int = 4096,
            fast: bool | None = None, resid: bool = True, mlp_layer: int = 1,
            binder: tuple[int, int] | None = PAPER_BINDER,
            router: tuple[int, int] | None = PAPER_ROUTER) -> Activations:
    """Activations of ``tokens`` (N, n) on CPU in float32; the table forward where it is exact.

    ``resid=False`` lets the table forward skip ``resid_mid0`` (set to None). ``mlp_layer``,
    ``binder``, ``router``: see :func:`cached_forward` (the table forward has its MLP in block 1
    and reads the paper's heads only).
    """
    binder = None if binder is None else tuple(binder)
    router = None if router is None else tuple(router)
    use_tables = weights.use_table_forward(cfg, fast)
    if use_tables and mlp_layer != 1:
        raise ValueError(f"mlp_layer={mlp_layer}: the table forward's MLP is blocks.1's")
    if use_tables and (binder not in (PAPER_BINDER, None) or router not in (PAPER_ROUTER, None)):
        raise ValueError(f"binder={binder}, router={router}: the table forward reads blocks.0 head 0 and "
                         f"blocks.1 head 0 only")
    params = tl.parameters(model)
    device = params["embed.weight"].device
    parts = []
    for start in range(0, len(tokens), chunk):
        part = tokens[start: start + chunk].to(device)
        acts = (table_forward(params, cfg, part, resid) if use_tables
                else cached_forward(model, part, mlp_layer, binder=binder, router=router))
        parts.append(acts)
    for acts in parts:
        if not resid or binder is None:
            acts.resid_mid0 = None
        if binder is None:
            acts.pattern0 = None
        if router is None:
            acts.pattern1_last = None
        acts.binder, acts.router = binder, router

    def join(name: str):
        if name in ("binder", "router"):
            return getattr(parts[0], name)
        if getattr(parts[0], name) is None:
            return None
        tensors = [getattr(a, name).detach().cpu() for a in parts]
        return torch.cat([t if name == "tokens" else t.float() for t in tensors])

    return Activations(**{name: join(name) for name in Activations.__dataclass_fields__})
