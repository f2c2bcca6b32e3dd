"""The MLP adds: Fourier analysis of layer 2's MLP over the p x p grid of operand values.

SPEC section 6, item 4. Once layer-2 attention has brought both operand values to ``=``, the MLP
input is (close to) ``OV2 e_x + OV2 e_y`` and the MLP must output ``(x + y) mod p``. Modular-addition
networks do this with a few *key frequencies* k: a neuron reads ``cos(2 pi k x / p + a)`` and
``cos(2 pi k y / p + b)``, its nonlinearity makes products of the two, i.e. terms in
``cos(2 pi k (x + y) / p)``, and ``W_out W_U`` reads those out as logits ``cos(2 pi k (x + y - z) / p)``,
which peak at ``z = x + y``.

On the p x p grid of operand values a component ``(k, 0)``, ``(0, k)`` or ``(k, k)`` belongs to
frequency k (``cos k(x+y)`` lives in ``(k, k)``); cross terms ``(k, k')`` belong to none. Low
:func:`restricted_loss` (only the key frequencies kept) and high :func:`excluded_loss` (one removed):
the key frequencies are what the MLP computes with.

An :class:`AdditionGrid` holds the MLP at ``=`` for every (x, y): from sequences with constant or
variable operands (:func:`operand_grid`, compared by :func:`compare_grids`) or from the weights alone
(:func:`ov_grid`). In another architecture the MLP is the located adder
(:mod:`compose_lens.analysis.locate`), in whichever block it sits ("MLP2" means it); before the last
block its logits are read through :class:`FrozenDownstreamReadout`. The summary, the locator, same-MLP
and ablation read these measures; the fourier analysis's own outputs are ``registry/fourier/``'s.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
from dataclasses import dataclass
from typing import Iterator

import pandas as pd
import torch
import torch.nn.functional as F

from compose_lens.analysis.activations import collect
from compose_lens.core.config import RunConfig, TaskConfig
from compose_lens.core.errors import ComposeLensError
from compose_lens.data import streams
from compose_lens.data.sampler import render
from compose_lens.data.split import Split
from compose_lens.data.safety import check_finite_logits
from compose_lens.data.task import SequenceKind
from compose_lens.model import tl, weights
from compose_lens.training.subject import Subject

OPERAND_KINDS = tuple(kind.operands for kind in SequenceKind)  # constant, left, right, both


# -- the basis ------------------------------------------------------------------------------


def fourier_basis(p: int) -> tuple[torch.Tensor, list[str]]:
    """(p, p) orthonormal Fourier basis over Z_p as rows, and their names.

    Rows: ``const``, then ``cos k``, ``sin k`` for k = 1 .. (p - 1) // 2, then, for even p,
    ``cos p/2`` (the sine of the Nyquist frequency vanishes on the integers).
    """
    basis, names = _fourier_basis(p)
    return basis.clone(), list(names)


@functools.lru_cache(maxsize=16)
def _fourier_basis(p: int) -> tuple[torch.Tensor, tuple[str, ...]]:
    x = torch.arange(p, dtype=torch.float64)
    rows, names = [torch.ones(p, dtype=torch.float64)], ["const"]
    for k in range(1, p // 2 + 1):
        rows.append(torch.cos(2 * math.pi * k * x / p))
        names.append(f"cos {k}")
        if 2 * k != p:
            rows.append(torch.sin(2 * math.pi * k * x / p))
            names.append(f"sin {k}")
    basis = torch.stack(rows)
    return (basis / basis.norm(dim=1, keepdim=True)).float(), tuple(names)


def basis_frequencies(p: int) -> torch.Tensor:
    """(p,) the frequency of each row of :func:`fourier_basis` (0 for ``const``)."""
    return torch.tensor([0] + [int(name.split()[1]) for name in _fourier_basis(p)[1][1:]])


def fft1d(values: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """Coefficients of ``values`` along ``dim`` (length p) in the Fourier basis."""
    p = values.shape[dim]
    basis = _fourier_basis(p)[0].to(values)
    moved = values.movedim(dim, 0)
    return (basis @ moved.reshape(p, -1)).reshape(moved.shape).movedim(0, dim)


def _apply_2d(matrix: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    """``M G M^T`` on the first two axes of a (p, p, ...) grid, as two matrix products."""
    p = grid.shape[0]
    flat = grid.reshape(p, -1)  # x, (y ...)
    once = (matrix @ flat).reshape(grid.shape).transpose(0, 1)  # y, i, ...
    twice = (matrix @ once.reshape(p, -1)).reshape(once.shape)  # j, i, ...
    return twice.transpose(0, 1)


def fft2d(grid: torch.Tensor) -> torch.Tensor:
    """(p, p, ...) grid over (x, y) -> coefficients ``B G B^T`` on its first two axes."""
    return _apply_2d(_fourier_basis(grid.shape[0])[0].to(grid), grid)


def ifft2d(coefficients: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`fft2d` (the basis is orthonormal: ``B^T C B``)."""
    return _apply_2d(_fourier_basis(coefficients.shape[0])[0].to(coefficients).T, coefficients)


def component_frequencies(p: int) -> torch.Tensor:
    """(p, p) the frequency each 2-D component belongs to: k for ``(k, 0)``, ``(0, k)`` and
    ``(k, k)``, 0 for the constant, -1 for cross terms ``(k, k')`` (k != k', both > 0)."""
    f = basis_frequencies(p)
    fx, fy = f.view(p, 1).expand(p, p), f.view(1, p).expand(p, p)
    single = (fx == fy) | (fx == 0) | (fy == 0)
    return torch.where(single, torch.maximum(fx, fy), torch.full_like(fx, -1))


def frequency_mask(p: int, frequencies: int | list[int], constant: bool = False) -> torch.Tensor:
    """(p, p) bool over 2-D components: ``(k, 0)``, ``(0, k)`` and ``(k, k)`` for each k given,
    plus ``(0, 0)`` if ``constant``."""
    freqs = [frequencies] if isinstance(frequencies, int) else list(frequencies)
    owner = component_frequencies(p)
    mask = torch.isin(owner, torch.tensor([k for k in freqs if k > 0], dtype=torch.long))
    if constant:
        mask |= owner == 0
    return mask


def project_onto_frequency(grid: torch.Tensor, frequencies: int | list[int],
                           constant: bool = False, coefficients: torch.Tensor | None = None) -> torch.Tensor:
    """The part of a (p, p, ...) grid made of the given frequencies (see :func:`frequency_mask`);
    ``coefficients``: ``fft2d(grid)`` if the caller has it already."""
    mask = frequency_mask(grid.shape[0], frequencies, constant).to(grid.device)
    coeffs = fft2d(grid) if coefficients is None else coefficients
    return ifft2d(coeffs * mask.view(*mask.shape, *([1] * (grid.dim() - 2))).to(grid.dtype))


def frequency_power(grid: torch.Tensor, coefficients: torch.Tensor | None = None) -> torch.Tensor:
    """(p // 2 + 1, ...) squared coefficients per frequency; row 0 is the constant alone. Cross terms
    belong to no row, so rows 1.. sum to at most the non-constant power."""
    p = grid.shape[0]
    power = (fft2d(grid) if coefficients is None else coefficients).pow(2).reshape(p * p, *grid.shape[2:])
    owner = component_frequencies(p).flatten()
    keep = owner >= 0
    out = power.new_zeros(p // 2 + 1, *grid.shape[2:])
    return out.index_add_(0, owner[keep], power[keep])


def frequency_fractions(grid: torch.Tensor, coefficients: torch.Tensor | None = None) -> torch.Tensor:
    """(p // 2 + 1, ...) fraction of the non-constant power in each frequency (row 0: zero)."""
    p = grid.shape[0]
    coeffs = fft2d(grid) if coefficients is None else coefficients
    non_constant = coeffs.pow(2).reshape(p * p, *grid.shape[2:]).sum(0) - coeffs[0, 0].pow(2)
    fractions = frequency_power(grid, coeffs) / non_constant.clamp_min(1e-30)
    fractions[0] = 0
    return fractions


# -- the grids: MLP2 at "=" for every (x, y) -------------------------------------------------


@dataclass
class AdditionGrid:
    """MLP2 at ``=`` over all operand values, indexed [x, y, ...]."""

    operands: str  # constant / left / right / both / ov
    resid_mid: torch.Tensor  # (p, p, d_model): the MLP2 input
    mlp_pre: torch.Tensor  # (p, p, d_mlp)
    mlp_post: torch.Tensor  # (p, p, d_mlp)
    readout: weights.LinearReadout  # MLP2 + unembedding, linear in the neurons (W_logit: neuron -> logits)
    tokens: torch.Tensor | None = None  # (p^2, seq_len), x-major, or None for the weights-only grid
    task: TaskConfig | None = None  # whose operation gives the labels (None: the study's addition)

    # What several measures of one grid share is computed once, on first use (the grid never changes)

    @functools.cached_property
    def mlp_post_coefficients(self) -> torch.Tensor:
        """``fft2d(mlp_post)``: (p, p, d_mlp) the neurons in the 2-D Fourier basis over (x, y)."""
        return fft2d(self.mlp_post)

    @functools.cached_property
    def direct_logits(self) -> torch.Tensor:
        """(p, p, d_vocab_out) the logits that do not go through a neuron."""
        return self.readout.direct(self.resid_mid)

    @functools.cached_property
    def neuron_logits(self) -> torch.Tensor:
        """(p, p, d_vocab_out) the neurons' contribution to the logits, ``mlp_post W_logit``."""
        return self.mlp_post @ self.readout.W_logit

    @functools.cached_property
    def neuron_logit_coefficients(self) -> torch.Tensor:
        return fft2d(self.neuron_logits)

    @functools.cached_property
    def logit_coefficients(self) -> torch.Tensor:
        return fft2d(self.direct_logits + self.neuron_logits)

    @property
    def modulus(self) -> int:
        return self.resid_mid.shape[0]

    @property
    def labels(self) -> torch.Tensor:
        p = self.modulus
        x = torch.arange(p)
        task = self.task or TaskConfig(modulus=p)
        return task.answer(x.view(p, 1).expand(p, p), x.view(1, p).expand(p, p))

    def logits(self, mlp_post: torch.Tensor | None = None) -> torch.Tensor:
        """(p, p, d_vocab_out) logits, optionally with replaced neuron activations."""
        if mlp_post is None:
            return self.direct_logits + self.neuron_logits  # readout.logits's sum, from the cache
        return self.readout.logits(self.resid_mid, mlp_post)

    def accuracy(self) -> float:
        return (self.logits().argmax(-1) == self.labels).float().mean().item()


def grid_rows(split: Split, operands: str = "constant", seed: int = 0) -> torch.Tensor:
    """(p^2, 4) rows ``(x, y, v, w)``, x-major, for every pair of values, the variables of ``operands``
    drawn per pair (seeded) by :func:`draw_variables`."""
    if operands not in OPERAND_KINDS:
        raise ValueError(f"operands={operands!r}: use one of {', '.join(OPERAND_KINDS)}")
    kind = SequenceKind.parse(operands)
    task = split.task
    p = task.modulus
    g = streams.derived_generator(seed, streams.OPERAND_GRID, kind.index)
    x = torch.arange(p).repeat_interleave(p)
    y = torch.arange(p).repeat(p)
    return torch.stack([x, y, *draw_variables(task, kind, p * p, g)], dim=1)


def draw_variables(task: TaskConfig, kind: SequenceKind, n: int,
                   g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """The variables ``(v, w)`` of ``n`` sequences of ``kind``, drawn from ``g`` among those allowed on
    each side (an allowed ordered pair for 2-var); -1 where the operand is written as a constant."""
    v = w = torch.full((n,), -1, dtype=torch.long)

    def draw(options) -> torch.Tensor:
        table = torch.tensor(options, dtype=torch.long)
        return table[torch.randint(0, len(table), (n,), generator=g)]

    if kind is SequenceKind.ONE_VAR_LEFT:
        v = draw(task.allowed_left)
    elif kind is SequenceKind.ONE_VAR_RIGHT:
        w = draw(task.allowed_right)
    elif kind is SequenceKind.TWO_VAR:
        v, w = draw(task.allowed_two_var_pairs).unbind(1)
    return v, w


def grid_tokens(split: Split, operands: str = "constant", seed: int = 0) -> torch.Tensor:
    """(p^2, seq_len) the sequences of :func:`operand_grid`: :func:`grid_rows` rendered with seeded
    random contexts (the split and seed decide them, not the model)."""
    rows = grid_rows(split, operands, seed)
    g = streams.derived_generator(seed, streams.OPERAND_GRID, 10 + SequenceKind.parse(operands).index)
    return render(split, rows, g).tokens


def check_readout_layer(config: RunConfig, layer: int) -> None:
    """Refuse (one line) a block without an MLP: the grids cannot read it."""
    if not 0 <= layer < config.model.n_layers or layer not in config.model.mlp_blocks:
        raise ComposeLensError(f"blocks.{layer} has no MLP (mlp_blocks={list(config.model.mlp_blocks)})")


@dataclass(frozen=True)
class FrozenDownstreamReadout(weights.LinearReadout):
    """The readout of an MLP that is NOT in the last block (whose logits are not linear in its neurons).

    It takes the MLP's *direct path* and holds everything else at its clean value:
    ``logits = rest + post W_logit`` with ``rest = clean logits - clean post W_logit`` per grid cell.
    The clean grid's loss and accuracy are exact; a change of the neurons (restricted, excluded loss)
    moves the logits through the direct path only (direct logit attribution).
    """

    rest: torch.Tensor | None = None  # (..., d_vocab_out) the logits no neuron of this MLP writes directly

    def direct(self, resid_mid: torch.Tensor) -> torch.Tensor:
        return self.rest


def is_last_block(config: RunConfig, layer: int) -> bool:
    return layer == config.model.n_layers - 1


def readout_kind(config: RunConfig, layer: int) -> str:
    """How the grids of ``blocks.{layer}.mlp`` read the logits (for the outputs)."""
    if is_last_block(config, layer):
        return "exact: the MLP is in the last block, the logits are linear in its neurons"
    return (f"direct path: blocks.{layer}.mlp is followed by blocks.{layer + 1}..{config.model.n_layers - 1}, "
            f"held at their clean values (FrozenDownstreamReadout); clean-grid loss and accuracy are exact")


_SHARED_GRIDS: contextvars.ContextVar[dict | None] = contextvars.ContextVar("shared_grids", default=None)


@contextlib.contextmanager
def shared_grids() -> Iterator[None]:
    """While open, :func:`operand_grid` builds each grid (model, operands, seed, layer) once and hands
    the same read-only :class:`AdditionGrid` to every later caller (opened per model by
    :mod:`compose_lens.report.context`)."""
    token = _SHARED_GRIDS.set({})
    try:
        yield
    finally:
        _SHARED_GRIDS.reset(token)


def operand_grid(subject: Subject, operands: str = "constant",
                 seed: int = 0, tokens: torch.Tensor | None = None, *, layer: int = 1) -> AdditionGrid:
    """The MLP of ``blocks.{layer}`` (1: the paper's MLP2) at ``=`` for every (x, y), from
    :func:`grid_tokens` (``tokens`` if already rendered); inside :func:`shared_grids`, built once."""
    model, split = subject.model, subject.split
    shared = _SHARED_GRIDS.get()
    if shared is None or tokens is not None:
        return _operand_grid(subject, operands, seed, tokens, layer=layer)
    key = (id(model), id(split), operands, seed, layer)
    if key not in shared or shared[key][0] is not model:  # the model is kept: its id is not reused
        shared[key] = (model, _operand_grid(subject, operands, seed, layer=layer))
    return shared[key][1]


def _operand_grid(subject: Subject, operands: str = "constant",
                  seed: int = 0, tokens: torch.Tensor | None = None, *, layer: int = 1) -> AdditionGrid:
    model, config, split = subject.model, subject.config, subject.split
    check_readout_layer(config, layer)
    tokens = grid_tokens(split, operands, seed) if tokens is None else tokens
    acts = collect(model, config.model, tokens, resid=False, mlp_layer=layer, binder=None, router=None)  # the MLP only
    p = config.task.modulus
    readout = weights.linear_readout(model, layer)
    post = acts.mlp_post.view(p, p, -1)
    if not is_last_block(config, layer):
        rest = acts.logits.view(p, p, -1) - post @ readout.W_logit
        readout = FrozenDownstreamReadout(readout.W_U, readout.W_logit, readout.bias, rest)
    grid = AdditionGrid(operands, acts.resid_mid1_last.view(p, p, -1), acts.mlp_pre.view(p, p, -1),
                        post, readout, tokens, config.task)
    check_finite_logits(grid.logits())  # what every measure of the grid reads (its loss, accuracy, spectra)
    return grid


def ov_grid(model: tl.Model, config: RunConfig, scale: float = 1.0, *, layer: int = 1, head: int = 0,
            head_layer: int | None = None) -> AdditionGrid:
    """The weights-only grid: the MLP of ``blocks.{layer}`` fed ``scale (OV e_x + OV e_y)``, OV of head
    ``head`` of ``blocks.{head_layer}`` (default: the MLP's own block), read by the unembedding directly
    (as if nothing followed the MLP). A ReLU MLP's argmax does not depend on ``scale``.
    """
    check_readout_layer(config, layer)
    p = config.task.modulus
    params = weights.detached_parameters(model)
    source = layer if head_layer is None else head_layer
    ov = params["embed.weight"][:p] @ weights.ov_matrix(model, source, head)  # (p, d): OV e_x as rows
    resid = scale * (ov.view(p, 1, -1) + ov.view(1, p, -1))
    pre, post = weights.mlp_neurons(params, config.model, resid, layer)
    grid = AdditionGrid("ov", resid, pre, post, weights.linear_readout(model, layer), None, config.task)
    check_finite_logits(grid.logits())
    return grid


def ov_mlp_addition_accuracy(model: tl.Model, config: RunConfig, *, layer: int = 1, head: int = 0,
                             head_layer: int | None = None) -> float:
    """The weights-only test of SPEC 6.4: the accuracy of :func:`ov_grid` over the p^2 pairs."""
    return ov_grid(model, config, layer=layer, head=head, head_layer=head_layer).accuracy()


# -- neurons and key frequencies --------------------------------------------------------------


def neuron_frequencies(mlp_post: torch.Tensor | AdditionGrid) -> pd.DataFrame:
    """Per neuron of a (p, p, d_mlp) grid (or an :class:`AdditionGrid`'s neurons): dominant frequency,
    the fraction of its non-constant variance that frequency explains, and that variance (0: a dead neuron)."""
    coefficients = None
    if isinstance(mlp_post, AdditionGrid):
        mlp_post, coefficients = mlp_post.mlp_post, mlp_post.mlp_post_coefficients
    p = mlp_post.shape[0]
    fractions = frequency_fractions(mlp_post, coefficients)  # (p//2 + 1, d_mlp)
    best = fractions.max(dim=0)
    variance = mlp_post.flatten(0, 1).var(dim=0, unbiased=False)
    return pd.DataFrame({"neuron": range(mlp_post.shape[-1]), "frequency": best.indices.tolist(),
                         "fraction_explained": best.values.tolist(), "variance": variance.tolist()}).assign(modulus=p)


def frequency_shares(neurons: pd.DataFrame, min_fraction: float = 0.5) -> pd.Series:
    """Share of the MLP's total activation variance held by neurons that one frequency explains
    (>= ``min_fraction``), per frequency."""
    total = neurons["variance"].sum()
    clean = neurons[neurons["fraction_explained"] >= min_fraction]
    if total <= 0 or clean.empty:
        return pd.Series(dtype=float)
    return (clean.groupby("frequency")["variance"].sum() / total).sort_values(ascending=False)


def key_frequencies(grid_or_neurons: AdditionGrid | pd.DataFrame | torch.Tensor, *,
                    min_fraction: float = 0.5, min_share: float = 0.03) -> list[int]:
    """The key frequencies: those whose clean neurons (>= ``min_fraction`` of their variance
    in that frequency) hold at least ``min_share`` of the MLP's activation variance. Sorted."""
    neurons = grid_or_neurons
    if isinstance(neurons, (AdditionGrid, torch.Tensor)):
        neurons = neuron_frequencies(neurons)
    shares = frequency_shares(neurons, min_fraction)
    return sorted(int(k) for k, share in shares.items() if share >= min_share and k > 0)


def key_frequency_strength(grid: AdditionGrid | torch.Tensor, keys: list[int]) -> float:
    """Fraction of the neuron activations' non-constant variance (all neurons together) that
    lies in the key frequencies (0 when there are none); ``grid``: an :class:`AdditionGrid` or
    its (p, p, d_mlp) neurons."""
    if not keys:
        return 0.0
    post, coefficients = (grid.mlp_post, grid.mlp_post_coefficients) if isinstance(grid, AdditionGrid) \
        else (grid, fft2d(grid))
    power = frequency_power(post, coefficients)  # (p//2 + 1, d_mlp)
    total = coefficients.pow(2).sum() - power[0].sum()
    return (power[keys].sum() / total.clamp_min(1e-30)).item()


# -- losses -----------------------------------------------------------------------------------


def grid_loss(grid: AdditionGrid, logits: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> float:
    """Mean cross-entropy of ``(x + y) mod p`` over the grid (or the pairs where ``mask`` is true)."""
    logits = grid.logits() if logits is None else logits
    losses = F.cross_entropy(logits.flatten(0, 1), grid.labels.flatten(), reduction="none")
    if mask is not None:
        losses = losses[mask.flatten()]
    return losses.mean().item()


def _kept_logits(grid: AdditionGrid, frequencies: list[int], on: str, remove: bool) -> torch.Tensor:
    """Logits with the neuron activations (or the logits) restricted to / stripped of frequencies.
    Projecting over (x, y) commutes with ``W_out W_U``, so the neurons are projected through their
    (cheaper) logit contribution."""
    if on not in ("neurons", "logits"):
        raise ValueError(f"on={on!r}: use neurons or logits")
    direct, mlp = grid.direct_logits, grid.neuron_logits
    target = mlp if on == "neurons" else direct + mlp
    coefficients = grid.neuron_logit_coefficients if on == "neurons" else grid.logit_coefficients
    if remove:
        kept = target - project_onto_frequency(target, frequencies, coefficients=coefficients)
    else:
        kept = project_onto_frequency(target, frequencies, constant=True, coefficients=coefficients)
    return direct + kept if on == "neurons" else kept


def restricted_loss(grid: AdditionGrid, keys: list[int], *, on: str = "neurons",
                    mask: torch.Tensor | None = None) -> float:
    """Loss with only the key frequencies (and the constant) kept in the MLP2 activations
    (``on="neurons"``; the direct path left alone) or in the final logits (``on="logits"``)."""
    return grid_loss(grid, _kept_logits(grid, keys, on, remove=False), mask)


def excluded_loss(grid: AdditionGrid, keys: list[int], *, on: str = "neurons",
                  mask: torch.Tensor | None = None) -> dict[int, float]:
    """Loss with one key frequency removed at a time: ``{k: loss}``."""
    return {k: grid_loss(grid, _kept_logits(grid, [k], on, remove=True), mask) for k in keys}


def excluded_loss_all(grid: AdditionGrid, keys: list[int], *, on: str = "neurons",
                      mask: torch.Tensor | None = None) -> float:
    """Loss with every key frequency removed at once (the progress-measures definition)."""
    return grid_loss(grid, _kept_logits(grid, keys, on, remove=True), mask)


# -- the readout and single neurons -----------------------------------------------------------


def unembed_fourier(grid_or_model) -> pd.DataFrame:
    """``W_out W_U`` of a grid's readout (or a model's MLP2) in the Fourier basis over the output classes:
    per basis direction, the norm of its coefficients over the neurons (the key frequencies stand out)."""
    readout = grid_or_model.readout if isinstance(grid_or_model, AdditionGrid) else weights.linear_readout(grid_or_model)
    p = readout.W_logit.shape[1]
    return pd.DataFrame({"direction": _fourier_basis(p)[1], "frequency": basis_frequencies(p).tolist(),
                         "norm": fft1d(readout.W_logit, dim=1).norm(dim=0).tolist()})


def unembed_frequency_norms(table: pd.DataFrame) -> pd.Series:
    """Per-frequency norm (root of the summed squares of its cos and sin rows)."""
    return table.assign(sq=table["norm"] ** 2).groupby("frequency")["sq"].sum() ** 0.5


def ideal_pattern(p: int, k: int, phase: float = 0.0) -> torch.Tensor:
    """(p, p) ``cos(2 pi k (x + y) / p + phase)``."""
    x = torch.arange(p, dtype=torch.float32)
    return torch.cos(2 * math.pi * k * (x.view(p, 1) + x.view(1, p)) / p + phase)


def fit_ideal_pattern(pattern: torch.Tensor, k: int) -> tuple[float, float, torch.Tensor]:
    """Least-squares ``A cos(2 pi k (x + y) / p + phase) + c`` for a (p, p) pattern:
    (Pearson correlation with the fit, phase, the fitted pattern)."""
    p = pattern.shape[0]
    cos, sin = ideal_pattern(p, k), ideal_pattern(p, k, -math.pi / 2)  # cos, sin of k(x+y)
    centred = pattern - pattern.mean()
    a = (centred * cos).sum() / cos.pow(2).sum()
    b = (centred * sin).sum() / sin.pow(2).sum()
    phase = math.atan2(-b.item(), a.item())
    fitted = pattern.mean() + a * cos + b * sin
    return correlation(pattern, fitted), phase, fitted


def correlation(a: torch.Tensor, b: torch.Tensor) -> float:
    """Pearson correlation of two same-shaped tensors (0 if either is constant)."""
    a, b = a.flatten() - a.mean(), b.flatten() - b.mean()
    denom = (a.norm() * b.norm()).item()
    return (a @ b).item() / denom if denom > 0 else 0.0


def ideal_neuron(mlp_pre: torch.Tensor, k: int, act=F.relu) -> torch.Tensor:
    """The ideal frequency-k neuron for a (p, p) pre-activation: keep only its frequency-k
    part (and its constant), then apply the nonlinearity."""
    return act(project_onto_frequency(mlp_pre, k, constant=True))


def best_neurons(grid: AdditionGrid, keys: list[int]) -> pd.DataFrame:
    """For each key frequency, the neuron it explains best, and two correlations of that
    neuron's (p, p) activation pattern:

    * ``cos_correlation``: with the ideal ``A cos(2 pi k (x + y) / p + phase) + c`` (fitted);
      a ReLU neuron also keeps the single-operand terms ``cos k x``, ``cos k y``, so this
      stays well below 1 even for a clean neuron;
    * ``ideal_neuron_correlation``: with :func:`ideal_neuron`, the nonlinearity applied to
      the frequency-k part of its own pre-activation (1 for a pure frequency-k neuron).
    """
    fractions = frequency_fractions(grid.mlp_post, grid.mlp_post_coefficients)
    variance = grid.mlp_post.flatten(0, 1).var(dim=0, unbiased=False)
    rows = []
    for k in keys:
        neuron = int(fractions[k].masked_fill(variance <= 0, -1.0).argmax())
        pattern = grid.mlp_post[:, :, neuron]
        corr, phase, _ = fit_ideal_pattern(pattern, k)
        ideal = ideal_neuron(grid.mlp_pre[:, :, neuron], k)
        rows.append({"frequency": k, "neuron": neuron, "fraction_explained": fractions[k, neuron].item(),
                     "cos_correlation": corr, "phase": phase,
                     "ideal_neuron_correlation": correlation(pattern, ideal)})
    return pd.DataFrame(rows, columns=["frequency", "neuron", "fraction_explained", "cos_correlation",
                                       "phase", "ideal_neuron_correlation"])


# -- constants against variables ---------------------------------------------------------------


def compare_grids(first: AdditionGrid, second: AdditionGrid, **key_options) -> dict:
    """Do two grids (e.g. constant and variable operands, same values) use the same MLP the
    same way? Key frequencies of each, the share of live neurons with the same dominant
    frequency, and the mean per-neuron correlation of the activation patterns."""
    n1, n2 = neuron_frequencies(first.mlp_post), neuron_frequencies(second.mlp_post)
    alive = (n1["variance"] > 0) & (n2["variance"] > 0)
    a = first.mlp_post.flatten(0, 1)[:, torch.tensor(alive.to_numpy())]
    b = second.mlp_post.flatten(0, 1)[:, torch.tensor(alive.to_numpy())]
    a, b = a - a.mean(0), b - b.mean(0)
    corr = (a * b).sum(0) / (a.norm(dim=0) * b.norm(dim=0)).clamp_min(1e-12)
    return {
        "operands": [first.operands, second.operands],
        "key_frequencies": [key_frequencies(n1, **key_options), key_frequencies(n2, **key_options)],
        "same_dominant_frequency": float((n1["frequency"][alive] == n2["frequency"][alive]).mean())
        if alive.any() else float("nan"),
        "mean_neuron_correlation": corr.mean().item() if len(corr) else float("nan"),
        "accuracy": [first.accuracy(), second.accuracy()],
    }
