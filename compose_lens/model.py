"""Building, saving and loading models: the paper model, runs, checkpoints, the study's .pth.

A saved model is a directory with ``model.safetensors`` (the weights, bridge
layout) and ``config.json`` (the :class:`RunConfig` that made it). Nothing is
ever unpickled: the study's ``.pth`` files are read with
``torch.load(weights_only=True)``, which only accepts plain tensors.

:func:`load_model` takes what a user types on the command line:

* ``paper``: the paper model trained by this project, shipped in the package;
* a model directory, a run directory (its final weights) or a checkpoint directory;
* a ``.safetensors`` file beside its ``config.json``;
* a study checkpoint ``*.pth`` (pre-4.0 ``HookedTransformer`` layout). A
  ``split.json`` beside it is used as its split unless another is given.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from compose_lens import lens
from compose_lens.config import ComposeLensError, RunConfig, load_json, write_json_atomic
from compose_lens.split import Split

PAPER_MODEL_DIR = Path(__file__).parent / "assets" / "paper"
WEIGHTS_FILE, CONFIG_FILE = "model.safetensors", "config.json"


@dataclass
class Loaded:
    """A model with the configuration and the split it belongs to."""

    model: lens.Model
    config: RunConfig
    split: Split
    source: str


def build_model(config: RunConfig, device: str = "cpu") -> lens.Model:
    return lens.boot(config.model, device=device)


def state_dict(model: lens.Model) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in model.state_dict().items()}


def save_model(model: lens.Model, config: RunConfig, directory: str | Path, extra: dict | None = None) -> Path:
    """Write ``model.safetensors`` + ``config.json`` into ``directory`` (atomically per file)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / (WEIGHTS_FILE + ".tmp")
    save_file(state_dict(model), str(tmp), metadata={"format": "compose-lens", **(extra or {})})
    tmp.replace(directory / WEIGHTS_FILE)
    write_json_atomic(directory / CONFIG_FILE, config.to_dict())
    return directory


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise ComposeLensError(f"{path}: not a readable safetensors file ({exc}); "
                               f"the checkpoint may be truncated: re-save or pick another") from None


def load_weights(model: lens.Model, config: RunConfig, state: dict[str, torch.Tensor], source: str) -> None:
    """Load a state dict after checking keys, shapes and the zero structure."""
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise ComposeLensError(f"{source}: weights do not match the model config "
                               f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    for key, shape in expected.items():
        if tuple(state[key].shape) != shape:
            raise ComposeLensError(f"{source}: {key} has shape {tuple(state[key].shape)}, "
                                   f"the config says {shape}")
    for key in lens.frozen_names(config.model):
        if key in state and state[key].abs().max() > 0:
            raise ComposeLensError(f"{source}: {key} is not zero, but the config says it does not "
                                   f"exist (mlp_layers={list(config.model.mlp_layers)}, "
                                   f"trained_biases={config.model.trained_biases})")
    lens.load_state(model, {k: v.float() for k, v in state.items()})


def load_model_dir(directory: str | Path, device: str = "cpu") -> tuple[lens.Model, RunConfig]:
    directory = Path(directory)
    weights = directory / WEIGHTS_FILE
    if not weights.exists():
        raise ComposeLensError(f"{directory}: no {WEIGHTS_FILE} here; expected a model, run or "
                               f"checkpoint directory")
    config = RunConfig.from_dict(load_json(directory / CONFIG_FILE))
    model = build_model(config, device)
    load_weights(model, config, _read_safetensors(weights), str(weights))
    return model, config


def load_reference_pth(path: str | Path, config: RunConfig | None = None) -> tuple[lens.Model, RunConfig]:
    """Load one of the study's ``HookedTransformer`` state dicts (``torch.load(weights_only=True)``)."""
    path = Path(path)
    config = config or RunConfig()
    try:
        legacy = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as exc:  # torch raises several types for bad files
        raise ComposeLensError(f"{path}: cannot be read as a plain tensor state dict "
                               f"({type(exc).__name__}); only weights-only .pth files are loaded") from None
    if not isinstance(legacy, dict) or "embed.W_E" not in legacy:
        raise ComposeLensError(f"{path}: not a HookedTransformer state dict (no embed.W_E)")
    mlp0 = [k for k in ("blocks.0.mlp.W_in", "blocks.0.mlp.W_out") if k in legacy]
    if any(legacy[k].abs().max() > 0 for k in mlp0):
        raise ComposeLensError(f"{path}: the layer-1 MLP (blocks.0.mlp) is not zero; the study's "
                               f"model has no MLP there, so this is not one of its checkpoints")
    model = build_model(config)
    try:
        state = lens.convert_legacy_state_dict(legacy, config.model)
    except ValueError as exc:
        raise ComposeLensError(f"{path}: {exc}") from None
    load_weights(model, config, state, str(path))
    return model, config


def load_model(spec: str | Path, split_file: str | Path | None = None, device: str = "cpu") -> Loaded:
    """Load what ``spec`` names (see the module docstring) with its split."""
    spec_str = str(spec)
    path = PAPER_MODEL_DIR if spec_str == "paper" else Path(spec_str)
    if spec_str == "paper" and not (path / WEIGHTS_FILE).exists():
        raise ComposeLensError("the paper model is not installed; train it with `make paper-model`")
    if not path.exists():
        raise ComposeLensError(f"{spec_str}: no such file or directory; give a run or checkpoint "
                               f"directory, a .safetensors or .pth file, or 'paper'")
    if path.suffix == ".pth":
        if split_file is None and (path.parent / "split.json").exists():
            split_file = path.parent / "split.json"
        split = Split.load(split_file) if split_file else Split.from_task(RunConfig().task)
        model, config = load_reference_pth(path, RunConfig(task=split.task))
        return Loaded(lens.to_device(model, device), config, split, str(path))
    if path.suffix == ".safetensors":
        path = path.parent
    model, config = load_model_dir(path, device)
    split = Split.load(split_file, config.task) if split_file else Split.from_task(config.task)
    return Loaded(model, config.__class__(task=split.task, model=config.model, train=config.train),
                  split, str(path))


def describe(config: RunConfig) -> str:
    return json.dumps(config.to_dict(), sort_keys=True)
