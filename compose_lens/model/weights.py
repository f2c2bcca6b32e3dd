"""Weight-level maths the analyses share: QK and OV circuits, the readout at ``=``, the architecture.

**Circuits of one head** (Elhage et al., *A Mathematical Framework for Transformer Circuits*). The
residual stream is a row vector of width d_model; in TransformerLens orientation ``W_Q``, ``W_K``, ``W_V``
are (d_model, d_head) and ``W_O`` (d_head, d_model), and two products say everything the head can do:

* the **QK circuit** ``QK = W_Q W_K^T`` (d_model, d_model): a query vector ``a`` scores a key vector
  ``b`` with ``a QK b^T / sqrt(d_head)``: *where* the head looks;
* the **OV circuit** ``OV = W_V W_O`` (d_model, d_model): a key position holding ``b`` writes ``b OV``
  into the query's residual stream, weighted by its attention: *what* the head moves.

The parameters are stored in ``nn.Linear`` layout: ``blocks.L.attn.q.weight`` is (n_heads d_head,
d_model), head h owning rows ``h d_head .. (h + 1) d_head``, and ``blocks.L.attn.o.weight`` is (d_model,
n_heads d_head), head h owning those columns. :func:`head_weights` does that slicing, once, for everybody.

**The readout at ``=``.** In the paper model layer 2 (``blocks.1``) is the last layer and the answer is
read at the last position, so after layer-2 attention one vector per sequence remains, ``resid_mid``:

    mlp_pre  = resid_mid W_in^T + b_in          (d_mlp,)
    mlp_post = act(mlp_pre)                      (d_mlp,)
    mlp_out  = mlp_post W_out^T + b_out          (d_model,)
    logits   = (resid_mid + mlp_out) W_U^T + b_U (d_vocab_out,)

(:func:`mlp_readout`). The logits are linear in ``mlp_post``: ``logits = resid_mid W_U^T + b + mlp_post
W_logit`` with ``W_logit = W_out^T W_U^T`` (d_mlp, d_vocab_out), one row per neuron, and ``b = b_U +
b_out W_U^T``. :class:`LinearReadout` holds that form, which neuron ablation and the Fourier grids use.
Which architectures these are exact for: :mod:`compose_lens.core.capabilities`
(:func:`~compose_lens.core.capabilities.is_paper_architecture`,
:func:`~compose_lens.core.capabilities.has_paper_layout`).

>>> from compose_lens.core import capabilities
>>> from compose_lens.core.config import ModelConfig
>>> from compose_lens.model import tl
>>> cfg = ModelConfig()
>>> capabilities.is_paper_architecture(cfg), capabilities.has_paper_layout(cfg)
(True, True)
>>> model = tl.boot(cfg)
>>> qk_matrix(model, 0).shape == (cfg.d_model, cfg.d_model)
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from compose_lens.core import capabilities
from compose_lens.core.config import ModelConfig
from compose_lens.model import tl

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
}


def activation(cfg: ModelConfig) -> Callable[[torch.Tensor], torch.Tensor]:
    return ACTIVATIONS[cfg.act_fn]


def use_table_forward(cfg: ModelConfig, fast: bool | None = None) -> bool:
    """Whether an analysis of ``cfg`` reads the table forward rather than the model's hooks:
    ``fast`` as given, or (``None``) wherever that forward is exact (:mod:`compose_lens.core.capabilities`)."""
    return capabilities.supports(cfg, "tables") if fast is None else fast


def detached_parameters(model: tl.Model) -> dict[str, torch.Tensor]:
    """The parameters as float32 CPU copies without gradients (for weight-level analyses)."""
    return {name: value.detach().float().cpu() for name, value in tl.parameters(model).items()}


@dataclass(frozen=True)
class HeadWeights:
    """One head's projections, float32 on CPU, in TransformerLens orientation."""

    W_Q: torch.Tensor  # (d_model, d_head)
    W_K: torch.Tensor  # (d_model, d_head)
    W_V: torch.Tensor  # (d_model, d_head)
    W_O: torch.Tensor  # (d_head, d_model)


def head_weights(model: tl.Model, layer: int, head: int | None = 0) -> HeadWeights:
    """Head ``head`` of ``blocks.{layer}``: its rows of q / k / v and its columns of o. ``head=None``: every
    head side by side, so that ``W_V W_O`` is the sum of the heads' OV circuits (there is no such sum for QK)."""
    params = tl.parameters(model)
    d_head = tl.size(model, "d_head")
    own = slice(None) if head is None else slice(head * d_head, (head + 1) * d_head)

    def weight(kind: str) -> torch.Tensor:
        return params[f"blocks.{layer}.attn.{kind}.weight"].detach().float().cpu()

    return HeadWeights(weight("q")[own].T, weight("k")[own].T, weight("v")[own].T, weight("o")[:, own].T)


def qk_matrix(model: tl.Model, layer: int, head: int = 0) -> torch.Tensor:
    """``QK = W_Q W_K^T`` (d_model, d_model): ``score(a, b) = a QK b^T / sqrt(d_head)``."""
    w = head_weights(model, layer, head)
    return w.W_Q @ w.W_K.T


def ov_matrix(model: tl.Model, layer: int, head: int = 0) -> torch.Tensor:
    """``OV = W_V W_O`` (d_model, d_model): a row vector ``a`` at a key position is written as ``a OV``."""
    w = head_weights(model, layer, head)
    return w.W_V @ w.W_O


def _bias(params: dict[str, torch.Tensor], cfg: ModelConfig, name: str) -> torch.Tensor | None:
    """A trained bias, or None: leaving out an untrained one (an exact zero) keeps the dtype under autocast."""
    return params[name] if cfg.trained_biases else None


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    out = x @ weight.T
    return out if bias is None else out + bias


def mlp_neurons(params: dict[str, torch.Tensor], cfg: ModelConfig, resid_mid: torch.Tensor,
                layer: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """The neurons of ``blocks.{layer}.mlp`` on residual vectors (..., d_model):
    ``(mlp_pre, mlp_post)``, each (..., d_mlp)."""
    pre = _linear(resid_mid, params[f"blocks.{layer}.mlp.in.weight"], _bias(params, cfg, f"blocks.{layer}.mlp.in.bias"))
    return pre, activation(cfg)(pre)


def mlp_out(params: dict[str, torch.Tensor], cfg: ModelConfig, resid_mid: torch.Tensor,
            layer: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """MLP of ``blocks.{layer}`` on residual vectors (..., d_model): ``(mlp_pre, mlp_post, mlp_out)``,
    shaped (..., d_mlp), (..., d_mlp), (..., d_model). ``params`` may be live (gradients flow)."""
    pre, post = mlp_neurons(params, cfg, resid_mid, layer)
    out = _linear(post, params[f"blocks.{layer}.mlp.out.weight"], _bias(params, cfg, f"blocks.{layer}.mlp.out.bias"))
    return pre, post, out


def unembed(params: dict[str, torch.Tensor], cfg: ModelConfig, resid_post: torch.Tensor) -> torch.Tensor:
    """Logits (..., d_vocab_out) of final residual vectors (..., d_model) (no final normalisation)."""
    return _linear(resid_post, params["unembed.weight"], _bias(params, cfg, "unembed.bias"))


def mlp_readout(params: dict[str, torch.Tensor], cfg: ModelConfig, resid_mid: torch.Tensor,
                layer: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The last MLP (``blocks.{layer}``, MLP2 in the paper) and the unembedding on its input at ``=`` (..., d_model):
    ``(mlp_pre (..., d_mlp), mlp_post (..., d_mlp), logits (..., d_vocab_out))``."""
    pre, post, out = mlp_out(params, cfg, resid_mid, layer)
    return pre, post, unembed(params, cfg, resid_mid + out)


@dataclass(frozen=True)
class LinearReadout:
    """The readout at ``=`` as a linear map of the neurons (see the module doc), float32 on CPU."""

    W_U: torch.Tensor  # (d_model, d_vocab_out): the direct path, resid_mid -> logits
    W_logit: torch.Tensor  # (d_mlp, d_vocab_out): W_out^T W_U^T, neuron -> logits
    bias: torch.Tensor  # (d_vocab_out,): b_U + b_out W_U^T

    def direct(self, resid_mid: torch.Tensor) -> torch.Tensor:
        """The logits (..., d_vocab_out) that do not go through a neuron."""
        return resid_mid @ self.W_U + self.bias

    def logits(self, resid_mid: torch.Tensor, mlp_post: torch.Tensor) -> torch.Tensor:
        """Logits (..., d_vocab_out) from the MLP2 input (..., d_model) and the neurons (..., d_mlp)."""
        return self.direct(resid_mid) + mlp_post @ self.W_logit


def linear_readout(model: tl.Model, layer: int = 1) -> LinearReadout:
    """:class:`LinearReadout` of the MLP of ``blocks.{layer}`` (the paper's MLP2: 1) and the
    unembedding; exact when that block is the last and there is no final normalisation."""
    params = detached_parameters(model)
    W_U = params["unembed.weight"].T  # (d, V)
    W_out = params[f"blocks.{layer}.mlp.out.weight"].T  # (d_mlp, d)
    return LinearReadout(W_U, W_out @ W_U, params["unembed.bias"] + params[f"blocks.{layer}.mlp.out.bias"] @ W_U)
