"""The activations the probes read, computed once per batch of sequences, and the attention patterns.

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

:func:`collect` reads them through the one forward (:class:`compose_lens.model.forward.Forward`): for
the paper's architecture from small vocabulary and position *tables* gathered at the tokens (layer 1
sees only ``E[t] + P[i]``), fast enough for the thousands of sequences of a Fourier grid; for any other
with the model's own ``run_with_cache``. The tests check that both agree.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

import torch

from compose_lens.core.config import ModelConfig
from compose_lens.model.forward import ANSWER, Forward, Site
from compose_lens.model import tl

if TYPE_CHECKING:  # the shapes are documentation; importing jaxtyping costs start-up time
    from jaxtyping import Float, Int


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


PAPER_BINDER = (0, 0)  # blocks.0 head 0: the paper's previous-token head (layer 1)
PAPER_ROUTER = (1, 0)  # blocks.1 head 0: the paper's routing head (layer 2)


def collect(model: tl.Model, cfg: ModelConfig, tokens: Int[torch.Tensor, "batch pos"], *, chunk: int = 4096,
            fast: bool | None = None, resid: bool = True, mlp_layer: int = 1,
            binder: tuple[int, int] | None = PAPER_BINDER,
            router: tuple[int, int] | None = PAPER_ROUTER) -> Activations:
    """Activations of ``tokens`` (N, n) on CPU in float32 (module doc: ``mlp_layer`` is M, ``binder`` and
    ``router`` the heads); ``resid=False`` skips ``resid_mid0``.
    """
    binder = None if binder is None else tuple(binder)
    router = None if router is None else tuple(router)
    sites = {"resid_mid1_last": Site(f"blocks.{mlp_layer}.hook_resid_mid", ANSWER),
             "mlp_pre": Site(f"blocks.{mlp_layer}.mlp.hook_pre", ANSWER),
             "mlp_post": Site(f"blocks.{mlp_layer}.mlp.hook_post", ANSWER), "logits": Site("logits", ANSWER)}
    if binder is not None:
        sites["pattern0"] = Site(f"blocks.{binder[0]}.attn.hook_pattern", None, binder[1])
        if resid:
            sites["resid_mid0"] = Site(f"blocks.{binder[0]}.hook_resid_mid")
    if router is not None:
        sites["pattern1_last"] = Site(f"blocks.{router[0]}.attn.hook_pattern", ANSWER, router[1])
    found = Forward(model, cfg, fast).read(tokens, sites.values(), chunk)
    fields = dict.fromkeys(("pattern0", "resid_mid0", "pattern1_last"))
    fields.update({field: found[site] for field, site in sites.items()})
    return Activations(tokens=tokens.detach().cpu(), **fields, binder=binder, router=router)


def attention_patterns(model: tl.Model, cfg: ModelConfig, tokens: Int[torch.Tensor, "batch pos"]
                       ) -> tuple[Float[torch.Tensor, "batch layer head query key"], Float[torch.Tensor, "batch d_vocab_out"]]:
    """Patterns (B, n_layers, n_heads, n, n) and last-position logits (B, d_vocab_out)."""
    patterns = [Site(f"blocks.{layer}.attn.hook_pattern") for layer in range(cfg.n_layers)]
    found = Forward(model, cfg).read(tokens, [*patterns, Site("logits", ANSWER)])
    return torch.stack([found[site] for site in patterns], dim=1), found[Site("logits", ANSWER)]
