"""The one module that talks to TransformerLens.

TransformerLens 4 removed ``HookedTransformer``; small models are built from a ``TransformerBridgeConfig``
with ``TransformerBridge.boot_native``. Everything compose-lens needs from TransformerLens goes through
the functions here, so the next major version is a one-file change:

* :func:`boot` builds the study's model (or any :class:`ModelConfig`) as a ``TransformerBridge``, with
  every TransformerLens hook, ``run_with_cache``, ``run_with_hooks`` and ``transformer_lens.patching``,
  and the task's tokenizer (:mod:`compose_lens.model.tokenizer`, no BOS).
* A layer without an MLP keeps an *absent* MLP: zero and never trained (exactly what the study did), so
  its ``hook_mlp_out`` is exactly zero and the standard block layout holds. Biases are absent unless the
  configuration trains them. *Frozen* tensors keep a fixed non-zero value and are never trained
  (orthogonal embeddings). :func:`apply_structure` makes both so; :func:`structure_problem` checks
  loaded weights against them.
* :func:`parameters` gives the tensors under their clean state-dict names (``blocks.1.mlp.in.weight``);
  :func:`convert_legacy_state_dict` maps a pre-4.0 ``HookedTransformer`` state dict (the study's
  ``.pth`` files) onto them.
* :class:`Weights` holds a model's tensors without a bridge. Importing TransformerLens (and
  ``transformers``) takes about 2 s, so it is imported on first use, and what needs only the fast
  forwards (``evaluate``, the analyses of the paper architecture) loads a ``Weights`` and never imports it.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import math
import weakref
from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch

from compose_lens.core.config import ModelConfig, TaskConfig
from compose_lens.core.errors import ComposeLensError

if TYPE_CHECKING:  # imported on first use (see the module doc)
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge

    Model = TransformerBridge


def bridge_config(cfg: ModelConfig) -> TransformerBridgeConfig:
    from transformer_lens.config import TransformerBridgeConfig

    return TransformerBridgeConfig(
        n_layers=cfg.n_layers,
        d_model=cfg.d_model,
        d_head=cfg.d_head,
        n_heads=cfg.n_heads,
        d_mlp=cfg.d_mlp,
        act_fn=cfg.act_fn,
        normalization_type=cfg.normalization_type,
        n_ctx=cfg.n_ctx,
        d_vocab=cfg.d_vocab,
        d_vocab_out=cfg.d_vocab_out,
        positional_embedding_type="standard",
        init_mode="gpt2",
        seed=cfg.init_seed,
        architecture="TransformerLensNative",
    )


def boot(cfg: ModelConfig, device: str | torch.device = "cpu", task: TaskConfig | None = None) -> TransformerBridge:
    """Build a freshly initialised model (seeded by ``cfg.init_seed``) with the tokenizer of ``task``
    (default: the task the model's sizes imply, :func:`implied_task`).

    ``cfg.init == "study"`` gives the study's initialisation: the pre-4.0 ``HookedTransformer`` drew every
    weight matrix from N(0, (0.8 / sqrt(d_model))^2); ``boot_native`` draws the same, then scales the
    attention and MLP output matrices by 1 / sqrt(2 n_layers) (GPT-2's residual scaling), which the
    study's initialisation undoes. ``"tl4"`` keeps it.
    """
    from transformer_lens.model_bridge import TransformerBridge
    from transformer_lens.model_bridge.sources import native as _native  # noqa: F401  (registers boot_native)

    with contextlib.redirect_stdout(io.StringIO()):  # the bridge prints set-up chatter
        model = TransformerBridge.boot_native(bridge_config(cfg), device=device)
    if cfg.init == "study":
        params = parameters(model)
        with torch.no_grad():
            for layer in range(cfg.n_layers):
                for name in (f"blocks.{layer}.attn.o.weight", f"blocks.{layer}.mlp.out.weight"):
                    params[name].mul_(math.sqrt(2 * cfg.n_layers))  # what boot_native divides them by
    apply_structure(model, cfg)
    apply_read_order(model, cfg)
    attach_tokenizer(model, task or implied_task(cfg))
    return model


def bridge_of(weights: "Weights", task: TaskConfig | None = None) -> TransformerBridge:
    """A bridge (eval mode) holding ``weights``' tensors, for what reads hooks, with the tokenizer of
    ``task`` (default: the one the sizes imply)."""
    state = parameters(weights)
    model = boot(weights.cfg, state["embed.weight"].device, task)
    load_state(model, state)  # checked when the Weights were made
    return model.eval()


def apply_read_order(model: TransformerBridge, cfg: ModelConfig) -> None:
    """Give every attention layer the causal mask of ``cfg.read_order`` (a model read in another
    order than left to right: :mod:`compose_lens.data.declaration`); nothing where it is None."""
    if cfg.read_order is None:
        return
    from compose_lens.model.heads import causal_mask

    masks = [buffer for name, buffer in model.named_buffers() if name.endswith("attn._original_component.causal_mask")]
    if len(masks) != cfg.n_layers:
        raise ComposeLensError(f"read_order: found {len(masks)} attention masks for {cfg.n_layers} layers in this "
                               f"TransformerLens version; the model cannot be read in another order")
    for mask in masks:
        mask.copy_(causal_mask(cfg.n_ctx, cfg.n_ctx, mask.device, cfg.read_order))


def implied_task(cfg: ModelConfig) -> TaskConfig | None:
    """The task whose vocabulary a model's sizes spell out (p = d_vocab_out outputs, p + 3 + n_vars
    inputs, n_ctx tokens), or None where no task fits them."""
    try:
        return TaskConfig(modulus=cfg.d_vocab_out, n_vars=cfg.d_vocab - cfg.d_vocab_out - 3, seq_len=cfg.n_ctx)
    except ComposeLensError:
        return None


def attach_tokenizer(model: TransformerBridge, task: TaskConfig | None) -> None:
    """Give ``model`` the task's tokenizer, without BOS (a sequence is exactly the task's tokens)."""
    if task is None or task.d_vocab != model.cfg.d_vocab:
        return
    from compose_lens.model.tokenizer import task_tokenizer  # imports transformers

    model.tokenizer = task_tokenizer(task)
    model.cfg.default_prepend_bos = False
    model.cfg.tokenizer_prepends_bos = False


def to_device(model: TransformerBridge | Weights, device: str | torch.device) -> TransformerBridge | Weights:
    """Move a model without the bridge's console chatter."""
    if isinstance(model, Weights):
        return model.to(device)
    with contextlib.redirect_stdout(io.StringIO()):
        return model.to(device)


_PARAMETERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # bridge -> (tensor ids, state)


def parameters(model: TransformerBridge | Weights) -> dict[str, torch.Tensor]:
    """Parameters and buffers under their clean names, as the live tensors (not copies).

    A bridge builds its state dict in ~1 ms and an ``analyze`` asks ~200 times, so the dict is kept per
    bridge and rebuilt when its tensors are no longer the same objects (training and ``load_state_dict``
    change them in place, which the kept dict shows). Checking costs ~0.2 ms.
    """
    if isinstance(model, Weights):
        return model.state_dict()
    tensors = tuple(map(id, itertools.chain(model.parameters(), model.buffers())))
    kept = _PARAMETERS.get(model)
    if kept is None or kept[0] != tensors:
        kept = (tensors, dict(model.state_dict(keep_vars=True)))
        _PARAMETERS[model] = kept
    return dict(kept[1])


class Weights:
    """A model's tensors under the bridge's state-dict names, and its sizes (``cfg``), without the bridge:
    what the fast forwards read through :func:`parameters`. For hooks, load a bridge."""

    training = False  # nothing in it behaves differently in training (no dropout)

    def __init__(self, state: dict[str, torch.Tensor], cfg: ModelConfig):
        self._state, self.cfg = dict(state), cfg

    def state_dict(self, keep_vars: bool = False) -> dict[str, torch.Tensor]:
        return dict(self._state)

    def train(self, mode: bool = True) -> Weights:
        return self

    def eval(self) -> Weights:
        return self

    def to(self, device: str | torch.device) -> Weights:
        return Weights({name: value.to(device) for name, value in self._state.items()}, self.cfg)


def state_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The name and shape of every tensor of the bridge's state dict for ``cfg``, from the configuration alone."""
    d, heads = cfg.d_model, cfg.n_heads * cfg.d_head
    shapes: dict[str, tuple[int, ...]] = {"embed.weight": (cfg.d_vocab, d), "pos_embed.weight": (cfg.n_ctx, d)}
    norm_params = {"LN": ("weight", "bias"), "RMS": ("weight",)}.get(cfg.normalization_type, ())
    for layer in range(cfg.n_layers):
        block = f"blocks.{layer}"
        shapes.update({f"{block}.ln1.{p}": (d,) for p in norm_params})
        for proj in ("q", "k", "v"):
            shapes.update({f"{block}.attn.{proj}.weight": (heads, d), f"{block}.attn.{proj}.bias": (heads,)})
        shapes.update({f"{block}.attn.o.weight": (d, heads), f"{block}.attn.o.bias": (d,)})
        shapes.update({f"{block}.ln2.{p}": (d,) for p in norm_params})
        shapes.update({f"{block}.mlp.in.weight": (cfg.d_mlp, d), f"{block}.mlp.in.bias": (cfg.d_mlp,),
                       f"{block}.mlp.out.weight": (d, cfg.d_mlp), f"{block}.mlp.out.bias": (d,)})
    shapes.update({f"ln_final.{p}": (d,) for p in norm_params})
    shapes.update({"unembed.weight": (cfg.d_vocab_out, d), "unembed.bias": (cfg.d_vocab_out,)})
    return shapes


def absent_names(cfg: ModelConfig) -> list[str]:
    """Names of the tensors that are *absent*: exactly zero and never trained (absent MLPs,
    untrained biases). Parts of tensors that are absent are in :func:`absent_masks`."""
    names = []
    for layer in range(cfg.n_layers):
        if layer not in cfg.mlp_blocks:
            names += [f"blocks.{layer}.mlp.{p}.{w}" for p in ("in", "out") for w in ("weight", "bias")]
        if not cfg.trained_biases:
            names += [f"blocks.{layer}.attn.{p}.bias" for p in ("q", "k", "v", "o")]
            names += [f"blocks.{layer}.mlp.{p}.bias" for p in ("in", "out")]
    if not cfg.trained_biases:
        names.append("unembed.bias")
    return sorted(set(names))


def absent_masks(cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Tensor name -> bool mask of the entries that are absent though the tensor is not: with
    ``residual="disentangled"`` a writer's output matrix (and bias) has rows only in its own block of the
    residual stream (:meth:`ModelConfig.residual_blocks`). Their gradient is masked to zero, so AdamW
    (elementwise, with decoupled decay) leaves them exactly zero. Empty otherwise."""
    if cfg.residual == "additive":
        return {}
    blocks, shapes, skip = cfg.residual_blocks(), state_shapes(cfg), set(absent_names(cfg))
    outputs = {"embed": ["embed.weight", "pos_embed.weight"] if cfg.embeddings == "learned" else []}
    for layer in range(cfg.n_layers):
        outputs[f"attn{layer}"] = [f"blocks.{layer}.attn.o.weight", f"blocks.{layer}.attn.o.bias"]
        outputs[f"mlp{layer}"] = [f"blocks.{layer}.mlp.out.weight", f"blocks.{layer}.mlp.out.bias"]
    masks = {}
    for writer, (start, stop) in blocks.items():
        for name in outputs.get(writer, []):
            if name in skip:
                continue
            mask = torch.ones(shapes[name], dtype=torch.bool)
            # the residual axis: columns of the embeddings (V, d), rows of o / out weights (d, ...)
            if name.endswith("embed.weight"):
                mask[:, start:stop] = False
            else:
                mask[start:stop] = False
            masks[name] = mask
    return masks


def frozen_names(cfg: ModelConfig) -> list[str]:
    """Names of the tensors that are *frozen*: kept at their initial, non-zero value
    (:func:`fixed_embeddings`) and never trained."""
    return ["embed.weight", "pos_embed.weight"] if cfg.embeddings == "orthogonal" else []


def fixed_embeddings(cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """The frozen token and position embeddings of ``embeddings="orthogonal"`` (float32), or {}.

    Directions u_0 .. u_{m-1} (m = :meth:`ModelConfig.embedding_directions`) are orthonormal
    in the embedding block (``onehot``: unit vectors; ``random``: the Q of a Gaussian's QR
    from ``init_seed``). Token t is ``sqrt(1 - c) u_t + sqrt(c) u_shared`` (c =
    ``embedding_overlap``: two distinct tokens have cosine exactly c, each has norm 1),
    position i is ``u_{d_vocab + i}``.
    """
    if cfg.embeddings != "orthogonal":
        return {}
    m, (start, stop) = cfg.embedding_directions(), cfg.residual_blocks()["embed"]
    if cfg.embedding_basis == "onehot":
        basis = torch.eye(m, stop - start)
    else:
        g = torch.Generator().manual_seed(cfg.init_seed)
        q, r = torch.linalg.qr(torch.randn(stop - start, m, generator=g, dtype=torch.float64))
        basis = (q * torch.sign(torch.diagonal(r))).T.float()  # (m, width), orthonormal rows
    directions = torch.zeros(m, cfg.d_model)
    directions[:, start:stop] = basis
    c, V = cfg.embedding_overlap, cfg.d_vocab
    tokens = directions[:V]
    if c > 0:
        tokens = math.sqrt(1 - c) * tokens + math.sqrt(c) * directions[m - 1]
    return {"embed.weight": tokens.contiguous(), "pos_embed.weight": directions[V: V + cfg.n_ctx].contiguous()}


def apply_structure(model: TransformerBridge, cfg: ModelConfig) -> None:
    """Make the weights what the configuration says: absent tensors and entries zero and
    untrained (a gradient hook masks the absent entries of a trained tensor), frozen
    tensors at their fixed values and untrained."""
    params = parameters(model)
    with torch.no_grad():
        for name in absent_names(cfg):
            if name in params:
                params[name].zero_()
                params[name].requires_grad_(False)
        for name, value in fixed_embeddings(cfg).items():
            params[name].copy_(value)
            params[name].requires_grad_(False)
        for name, mask in absent_masks(cfg).items():
            keep = (~mask).to(params[name].device)
            params[name].mul_(keep)
            params[name].register_hook(lambda grad, keep=keep: grad * keep)


def structure_problem(cfg: ModelConfig, state: dict[str, torch.Tensor]) -> str | None:
    """Why ``state`` does not have the structure ``cfg`` gives it (one line), or None: an absent
    tensor or entry that is not zero, or a frozen embedding that is not its fixed value."""
    for name in absent_names(cfg):
        if name in state and state[name].abs().max() > 0:
            return (f"{name} is not zero, but the config says it does not exist "
                    f"(mlp_blocks={list(cfg.mlp_blocks)}, trained_biases={cfg.trained_biases})")
    for name, mask in absent_masks(cfg).items():
        if name in state and state[name][mask.to(state[name].device)].abs().max() > 0:
            return f"{name} writes outside its block of the disentangled residual (residual=disentangled)"
    for name, value in fixed_embeddings(cfg).items():
        if name in state and not torch.equal(state[name].float().cpu(), value):
            return (f"{name} is not the frozen embedding the config fixes (embeddings=orthogonal, "
                    f"embedding_basis={cfg.embedding_basis}, embedding_overlap={cfg.embedding_overlap})")
    return None


def trainable_parameters(model: TransformerBridge) -> list[torch.nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def convert_legacy_state_dict(state_dict: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """A pre-4.0 ``HookedTransformer`` state dict in the bridge's layout."""
    from transformer_lens.utilities.tl_checkpoint_conversion import convert_tl_checkpoint

    converted = convert_tl_checkpoint(state_dict, bridge_config(cfg))
    if "unembed.bias" not in converted:
        converted["unembed.bias"] = torch.zeros(cfg.d_vocab_out)
    return converted


def load_state(model: TransformerBridge, state: dict[str, torch.Tensor]) -> None:
    """Load a bridge-layout state dict strictly (every key, every shape)."""
    model.load_state_dict(state, strict=True)


def size(model: TransformerBridge | Weights, name: str) -> int:
    """A size of a model from its config: ``n_layers``, ``n_heads``, ``d_head``, ``d_model``,
    ``d_mlp``, ``n_ctx``, ``d_vocab``, ``d_vocab_out`` (the same names in TransformerLens's
    config and in :class:`~compose_lens.core.config.ModelConfig`)."""
    return int(getattr(model.cfg, name))


def run_with_cache(model: TransformerBridge, tokens: torch.Tensor, **kwargs: Any):
    """``(logits, cache)``; pass ``names_filter`` to keep only some hooks."""
    return model.run_with_cache(tokens, **kwargs)


def run_with_hooks(model: TransformerBridge, tokens: torch.Tensor,
                   fwd_hooks: list[tuple[str, Callable]]) -> torch.Tensor:
    """Logits of one forward pass with ``(hook name, function)`` forward hooks on for it only."""
    return model.run_with_hooks(tokens, fwd_hooks=fwd_hooks)


@contextlib.contextmanager
def evaluating(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """The model in eval mode inside the block, its own mode restored on exit."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


@contextlib.contextmanager
def hooks(model: TransformerBridge, fwd_hooks: list[tuple[str, Callable]]) -> Iterator[TransformerBridge]:
    """Forward hooks on every forward pass inside the block, removed on exit."""
    with model.hooks(fwd_hooks=fwd_hooks):
        yield model


# -- activation patching, the TransformerLens way (the baseline of registry.patching) ----------

PATCH_HOOKS = {
    "resid_pre": "blocks.{layer}.hook_resid_pre",
    "resid_mid": "blocks.{layer}.hook_resid_mid",
    "resid_post": "blocks.{layer}.hook_resid_post",
    "attn_out": "blocks.{layer}.hook_attn_out",
    "mlp_out": "blocks.{layer}.hook_mlp_out",
    "z": "blocks.{layer}.attn.hook_z",
    # a head's inputs (compose_lens.registry.patching.tables.head_patching_table): (batch, pos, head, d_head),
    # the pattern (batch, head, dest, src); and an MLP's pre-activation (path patching's MLP receiver)
    "q": "blocks.{layer}.attn.hook_q",
    "k": "blocks.{layer}.attn.hook_k",
    "v": "blocks.{layer}.attn.hook_v",
    "pattern": "blocks.{layer}.attn.hook_pattern",
    "mlp_pre": "blocks.{layer}.mlp.hook_pre",
}


def hook_name(component: str, layer: int) -> str:
    """The TransformerLens hook of a patching component (``z``: the per-head output)."""
    return PATCH_HOOKS[component].format(layer=layer)


def tl_patch_sweep(model: TransformerBridge, component: str, corrupted_tokens: torch.Tensor,
                   clean_cache: Any, metric) -> torch.Tensor:
    """``transformer_lens.patching``'s sweep over every (layer, position[, head]) of a component: one
    forward of the whole corrupted batch per site, in eval mode. ``metric`` maps logits (batch, pos, vocab)
    to (batch,); returns (layer, pos, batch), or (layer, pos, head, batch) for ``z``."""
    from transformer_lens import patching as tl_patching

    if component == "z":
        setter, axes = tl_patching.layer_pos_head_vector_patch_setter, ["layer", "pos", "head_index"]
    else:
        setter, axes = tl_patching.layer_pos_patch_setter, ["layer", "pos"]
    with evaluating(model), torch.no_grad():
        result = tl_patching.generic_activation_patch(model, corrupted_tokens, clean_cache, metric, setter,
                                                      component, index_axis_names=axes, reduce="none")
    return result.values


# -- TransformerLens's head detector (its scoring, for compose_lens.analysis.exploratory) -------------

HEAD_DETECTION_NAMES = ("previous_token_head", "duplicate_token_head", "induction_head")  # head_detector.HEAD_NAMES


def head_detection_pattern(name: str, tokens: torch.Tensor) -> torch.Tensor:
    """TransformerLens's (pos, pos) detection pattern ``name`` (one of :data:`HEAD_DETECTION_NAMES`)
    for one row of tokens: where a head of that kind attends."""
    from transformer_lens import head_detector

    return getattr(head_detector, f"get_{name}_detection_pattern")(tokens.cpu()).float()


def head_similarity(pattern: torch.Tensor, detection: torch.Tensor, *, exclude_bos: bool,
                    exclude_current_token: bool, error_measure: str) -> float:
    """TransformerLens's score of one head's (query, key) attention pattern against a detection pattern."""
    from transformer_lens.head_detector import compute_head_attention_similarity_score

    return compute_head_attention_similarity_score(pattern.clone(), detection, exclude_bos=exclude_bos,
                                                   exclude_current_token=exclude_current_token,
                                                   error_measure=error_measure)
