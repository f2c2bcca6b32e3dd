"""The subject of every analysis: what it is, and how one is built from anything a researcher names.

A :class:`Subject` is what each analysis takes: ``subject.model`` (a TransformerLens bridge, or the fast
forwards' :class:`~compose_lens.model.tl.Weights`), ``subject.config`` (the task and the model in the
study's coordinates), ``subject.split`` (what training held out) and ``subject.source``.
:func:`load_subject` builds one from what a researcher names (MODEL, ``--task``, ``--split``):

* ``paper`` (the paper model shipped in the package), a compose-lens model, run (its final weights) or
  checkpoint directory, a ``.safetensors`` file beside its ``config.json``, or one of the study's ``.pth``
  checkpoints (pre-4.0 ``HookedTransformer`` layout; a ``split.json`` beside it is its split):
  :func:`load_model`;
* **their own TransformerLens model**: a ``TransformerBridge`` in Python (:func:`from_model`) or a
  directory of its TransformerLens ``config.json`` and ``model.safetensors``, with its task declared
  (:class:`~compose_lens.data.declaration.TaskDeclaration`: ``--task FILE``, or a ``task.json`` /
  ``task.toml`` in the directory).

A researcher's model is mapped onto the study's coordinates exactly (:mod:`compose_lens.data.declaration`:
the embedding's rows in the study's token order, the positions in its position order, the unembedding's
rows at the answers 0..p-1), so it computes the researcher's model's own numbers (its logits, every hook's
activations up to the order of positions) and every analysis, written once in the study's coordinates,
reads it. ``subject.declaration`` keeps the researcher's coordinates for printing and for going back
(:meth:`Subject.user_tokens`, :func:`export_transformerlens`).

Every loader returns its model in **eval mode**, ready for TransformerLens's patching and ``fit_das``,
which refuse a model in train mode (a :class:`~compose_lens.model.tl.Weights` has no train mode). With
``bridge=False`` a model the fast forwards compute is loaded as a ``Weights``, without booting or
importing TransformerLens (``evaluate``: 2 s sooner); :func:`for_analyses` boots a bridge where the
analyses need hooks. The files are read and written by :mod:`compose_lens.training.runs`.

>>> from compose_lens.training.subject import load_subject
>>> subject = load_subject("paper")
>>> subject.task.modulus, subject.declaration.query
(59, 'prefix')
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from compose_lens.core import capabilities

from compose_lens.data import safety
from compose_lens.core.config import Origin, RunConfig, TaskConfig, TrainConfig
from compose_lens.core.coverage import PAPER_MODEL_DIR
from compose_lens.data.sampler import concat_batches, make_pools
from compose_lens.data.split import Split, split_bytes
from compose_lens.data.declaration import (TL_FIELDS, DeclarationError, TaskDeclaration, UserWeights, study_coordinates,
                                      study_declaration, user_coordinates)
from compose_lens.core.errors import ArgumentTypeError, ComposeLensError
from compose_lens.core.files import atomic_path, load_json, write_json_atomic
from compose_lens.model.forward import Forward, check_tokens
from compose_lens.model import tl
from compose_lens.core.provenance import VERSION, code_version
from compose_lens.training.runs import (CONFIG_FILE, SPLIT_FILE, STUDY_FINAL, TASK_FILES, TL_CONFIG_FILES, WEIGHTS_FILE,
                               file_sha256, find_checkpoints, is_transformerlens_dir, read_pth, read_results,
                               read_safetensors, read_state, read_transformerlens_dir, select_checkpoints,
                               write_safetensors)


@dataclass
class Subject:
    """A model with its task, split and origin: what every analysis takes (see the module doc)."""

    model: tl.Model | tl.Weights
    config: RunConfig
    split: Split
    source: str
    declaration: TaskDeclaration | None = None  # the researcher's coordinates (None: the study's own)
    user_weights: UserWeights | None = None  # the researcher's model as read (None: its own are the study's)
    # (name, seed) -> (digest of the weights it read, result): see :meth:`once`
    computed: dict = dataclasses.field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def task(self) -> TaskConfig:
        """The task in the study's coordinates."""
        return self.config.task

    def __post_init__(self) -> None:
        if self.declaration is None and not self.config.task.is_variant:
            self.declaration = study_declaration(self.config.task)

    @property
    def forward(self) -> Forward:
        """The model's one forward (:class:`compose_lens.model.forward.Forward`): its answer, activations and
        edited answers at ``=``, asked for by :class:`~compose_lens.model.forward.Site`."""
        return Forward(self.model, self.config.model)

    def once(self, name: str, seed: int, compute):
        """``compute()``'s result, computed once per (name, seed) while this model's weights stay as they are
        (the exhaustive accuracies: 194k prompts). The weights are known by their bytes
        (:func:`weights_digest`): the trainer's fused AdamW leaves torch's version counters as they were."""
        digest = weights_digest(tl.parameters(self.model))
        held = self.computed.get((name, seed))
        if held is None or held[0] != digest:
            held = self.computed[(name, seed)] = (digest, compute())
        return held[1]

    def user_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """Study-coordinates token rows (N, seq_len) as the researcher's model reads them (refused in one
        line where they are not such rows: :func:`compose_lens.model.forward.check_tokens`)."""
        check_tokens(tokens, self.task.d_vocab, self.task.seq_len, exact=True)
        return tokens if self.declaration is None else self.declaration.to_user(tokens)


def check_weights(config: RunConfig, state: dict[str, torch.Tensor], source: str) -> dict[str, torch.Tensor]:
    """``state`` as float32 after checking its keys, shapes and zero structure against ``config``."""
    expected = tl.state_shapes(config.model)
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise ComposeLensError(f"{source}: weights do not match the model config "
                               f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    for key, shape in expected.items():
        if tuple(state[key].shape) != shape:
            raise ComposeLensError(f"{source}: {key} has shape {tuple(state[key].shape)}, "
                                   f"the config says {shape}")
    for key, value in state.items():
        if value.dtype == torch.bool or value.is_complex():  # torch cannot even take their abs()
            raise ComposeLensError(f"{source}: {key} is stored as {str(value.dtype).removeprefix('torch.')}, "
                                   f"not as real numbers: these are not a model's weights; pick another file")
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise ComposeLensError(f"{source}: {key} contains NaN or infinite values; these weights "
                                   f"are broken (a diverged run?): pick another checkpoint")
    structure = tl.structure_problem(config.model, state)
    if structure:
        raise ComposeLensError(f"{source}: {structure}")
    return {k: v.float() for k, v in state.items()}


def load_weights(model: tl.Model, config: RunConfig, state: dict[str, torch.Tensor], source: str) -> None:
    tl.load_state(model, check_weights(config, state, source))


def check_device(device: str) -> None:
    """Refuse a device torch cannot use here (one line, before any model is built)."""
    TrainConfig(device=device)  # the accepted spellings: cpu, cuda, cuda:N
    if device.startswith("cuda"):
        index = int(device.split(":")[1]) if ":" in device else 0
        if not torch.cuda.is_available() or index >= torch.cuda.device_count():
            raise ComposeLensError(f"device={device}: torch sees no such GPU here "
                                   f"({torch.cuda.device_count()} GPU(s)); use cpu")


def load_model_dir(directory: str | Path, device: str = "cpu", weights: str | Path | None = None,
                   bridge: bool = True) -> tuple[tl.Model | tl.Weights, RunConfig]:
    """The model of a directory: ``weights`` (default ``model.safetensors``) with its ``config.json``."""
    directory = Path(directory)
    weights = Path(weights) if weights else directory / WEIGHTS_FILE
    if not weights.is_file():
        raise ComposeLensError(f"{directory}: no {WEIGHTS_FILE} here; expected a model, run or "
                               f"checkpoint directory")
    if not (directory / CONFIG_FILE).is_file():
        raise ComposeLensError(f"{directory}: no {CONFIG_FILE} beside {weights.name}; give a compose-lens run's "
                               f"{CONFIG_FILE}, or your TransformerLens config as {' or '.join(TL_CONFIG_FILES)} "
                               f"with task.json (docs/own-model.md)")
    config = RunConfig.from_dict(load_json(directory / CONFIG_FILE))
    safety.require_memory({"the model": safety.forward_bytes(config, 1, training=False),
                           "its split": split_bytes(config.task)}, f"{weights}")
    check_device(device)
    return model_of(config, read_safetensors(weights), str(weights), bridge, device), config


def load_reference_pth(path: str | Path, config: RunConfig | None = None,
                       bridge: bool = True) -> tuple[tl.Model | tl.Weights, RunConfig]:
    """One of the study's ``.pth`` checkpoints as a model of ``config`` (default: the paper's)."""
    path, config = Path(path), config or RunConfig()
    return model_of(config, read_pth(path, config), str(path), bridge), config


def model_of(config: RunConfig, state: dict[str, torch.Tensor], source: str, bridge: bool = True,
             device: str = "cpu") -> tl.Model | tl.Weights:
    """The model of a state dict, after :func:`check_weights`: a booted bridge, or with ``bridge=False``
    a :class:`~compose_lens.model.tl.Weights` wherever the fast forwards compute its answer."""
    state = check_weights(config, state, source)
    if not bridge and capabilities.answer_forward(config.model) != "transformerlens":
        return tl.Weights(state, config.model).to(device)
    model = tl.boot(config.model, device, config.task)
    tl.load_state(model, state)
    return model.eval()


def with_bridge(loaded: Subject) -> Subject:
    """``loaded`` with a TransformerLens bridge as its model, booted from its
    :class:`~compose_lens.model.tl.Weights` if it holds those (for what reads hooks)."""
    if not isinstance(loaded.model, tl.Weights):
        return loaded
    return dataclasses.replace(loaded, model=tl.bridge_of(loaded.model, loaded.config.task))


def for_analyses(loaded: Subject) -> Subject:
    """What the analyses need: for the paper architecture they all run on the fast forwards
    (no hooks; a :class:`~compose_lens.model.tl.Weights` will do), for any other on the
    bridge's hooks. A model whose forward overflows is refused first (:func:`check_forward`)."""
    check_forward(loaded)
    return loaded if capabilities.supports(loaded.config.model, "tables") else with_bridge(loaded)


def check_forward(loaded: Subject, per_pool: int = 8) -> None:
    """Refuse, in one line, a model whose logits on a few sequences of each pool are not finite:
    its weights are finite (:func:`check_weights`) but its forward overflows float32, and every
    analysis (probes, grids, tables) would read NaN activations as numbers or fail inside."""
    tokens = concat_batches(make_pools(loaded.split, per_pool))[0].tokens
    safety.check_finite_logits(loaded.forward.logits(tokens), loaded.source)


def load_model(spec: str | Path, split_file: str | Path | None = None, device: str = "cpu",
               bridge: bool = True) -> Subject:
    """Load what ``spec`` names (see the module docstring) with its split, in eval mode."""
    spec_str = str(spec)
    path = PAPER_MODEL_DIR if spec_str == "paper" else Path(spec_str)
    if spec_str == "paper" and not (path / WEIGHTS_FILE).exists():
        raise ComposeLensError("the paper model is not installed; train it with `make paper-model`")
    if not path.exists():
        raise ComposeLensError(f"{spec_str}: no such file or directory; give a run or checkpoint "
                               f"directory, a .safetensors or .pth file, or 'paper'")
    if path.suffix == ".pth":
        if split_file is None and (path.parent / SPLIT_FILE).exists():
            split_file = path.parent / SPLIT_FILE
        split = Split.load(split_file) if split_file else Split.from_task(RunConfig().task)
        model, config = load_reference_pth(path, RunConfig(task=split.task), bridge)
        return Subject(tl.to_device(model, device), config, split, str(path))
    weights = None
    if path.suffix == ".safetensors":
        path, weights = path.parent, path  # the file named, with the config.json beside it
    model, config = load_model_dir(path, device, weights, bridge)
    split = Split.load(split_file, config.task) if split_file else Split.from_task(config.task)
    return Subject(model, config.__class__(task=split.task, model=config.model, train=config.train),
                  split, str(path))


def load_checkpoint(source: str | Path, step: int | None = None, split_file: str | Path | None = None,
                    device: str = "cpu") -> Subject:
    """The model of ``source`` at checkpoint ``step`` (the last one if None), with the run's
    configuration and split, in eval mode."""
    checkpoints, config, split = find_checkpoints(source, split_file)
    chosen = checkpoints[-1] if step is None else select_checkpoints(checkpoints, [step])[0]
    model = tl.boot(config.model, device, config.task)
    load_weights(model, config, read_state(chosen, config), str(chosen.path))
    return Subject(model.eval(), config, split, f"{chosen.path} (step {chosen.step})")


def final_model(run_dir: str | Path, split_file=None, device: str = "cpu") -> tuple[Subject, str]:
    """A run's final model (``model.safetensors``), the study's ``final.pth``, else the last checkpoint,
    on ``device``, and a word on which one it is."""
    run_dir = Path(run_dir)
    if (run_dir / WEIGHTS_FILE).exists():
        own = run_dir / SPLIT_FILE
        return load_model(run_dir, split_file or (own if own.exists() else None), device=device), "final"
    if (run_dir / STUDY_FINAL).exists():
        return load_model(run_dir / STUDY_FINAL, split_file, device=device), STUDY_FINAL
    steps = [c.step for c in find_checkpoints(run_dir, split_file)[0]]
    return load_checkpoint(run_dir, steps[-1], split_file, device), f"step {steps[-1]} (run not finished)"


def load_subject(spec: "str | Path | Any", task: "str | Path | TaskDeclaration | None" = None,
                 split_file: str | Path | None = None, device: str = "cpu", bridge: bool = True) -> Subject:
    """The subject ``spec`` names: a researcher's TransformerBridge (``task`` declares its task), a
    directory of a TransformerLens model (its ``config.json`` holds the TransformerLens config), or
    anything :func:`load_model` reads. ``task`` is a declaration or its file.
    Arguments of the wrong type are refused at the door (:class:`~compose_lens.core.errors.ArgumentTypeError`)."""
    _check_arguments(spec, task, split_file, device, bridge)
    declaration = task if task is None or isinstance(task, TaskDeclaration) else TaskDeclaration.load(task)
    if not isinstance(spec, (str, os.PathLike)):  # a model object
        if declaration is None:
            raise ComposeLensError(f"a {type(spec).__name__} model needs its task: pass task=TaskDeclaration(...) "
                                   f"or the path of a task file")
        return from_model(spec, declaration, device=device)
    path = Path(spec)
    if path.is_dir() and is_transformerlens_dir(path):
        declaration = declaration or _task_in(path)
        state, cfg = read_transformerlens_dir(path)
        weights = path / WEIGHTS_FILE
        origin = Origin(str(weights), file_sha256(weights), json.dumps(declaration.to_dict(), sort_keys=True))
        return _subject_of(cfg, state, declaration, str(path), device, bridge, split_file, origin)
    if declaration is not None:
        raise ComposeLensError(f"{spec}: a compose-lens model carries its own task; --task is for a "
                               f"TransformerLens model directory trained outside compose-lens")
    return load_model(spec, split_file, device, bridge)


def _check_arguments(spec: Any, task: Any, split_file: Any, device: Any, bridge: Any) -> None:
    """:func:`load_subject`'s arguments, each of a type it reads (one line naming the argument and the fix)."""
    if not isinstance(spec, (str, os.PathLike)) and not (hasattr(spec, "cfg") and hasattr(spec, "state_dict")):
        raise ArgumentTypeError(f"spec={spec!r} is {_a(spec)}: give 'paper', the path of a run, checkpoint or "
                                f"model directory, or a TransformerLens model (a TransformerBridge)")
    if task is not None and not isinstance(task, (str, os.PathLike, TaskDeclaration)):
        raise ArgumentTypeError(f"task={task!r} is {_a(task)}: give a TaskDeclaration or the path of a JSON or "
                                f"TOML task file" + (" (a dict: TaskDeclaration.from_dict(task))"
                                                     if isinstance(task, dict) else ""))
    if split_file is not None and not isinstance(split_file, (str, os.PathLike)):
        raise ArgumentTypeError(f"split_file={split_file!r} is {_a(split_file)}: give the path of a split.json")
    if not isinstance(device, str):
        raise ArgumentTypeError(f"device={device!r} is {_a(device)}: give 'cpu', 'cuda' or 'cuda:N'")
    if not isinstance(bridge, bool):
        raise ArgumentTypeError(f"bridge={bridge!r} is {_a(bridge)}: give True or False")


def _a(value: Any) -> str:
    """``value``'s type as a sentence says it: "an int", "a dict"."""
    name = type(value).__name__
    return f"{'an' if name[:1] in 'aeiou' else 'a'} {name}"


def weights_digest(state: dict[str, torch.Tensor]) -> str:
    """The sha256 of weights as they are in memory: each name and shape, then its bytes, in the names' order."""
    digest = hashlib.sha256()
    for key in sorted(state):
        digest.update(f"{key}{tuple(state[key].shape)}".encode())
        digest.update(state[key].detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()


def from_model(model: Any, declaration: TaskDeclaration, source: str = "a TransformerLens model",
               device: str = "cpu") -> Subject:
    """The subject of a researcher's ``TransformerBridge`` (or any module with a TransformerLens
    ``cfg`` and the native bridge's state dict) trained on the declared task."""
    cfg = getattr(model, "cfg", None)
    if cfg is None or not hasattr(model, "state_dict"):
        raise ComposeLensError(f"{type(model).__name__}: not a TransformerLens model (no cfg / state_dict)")
    config = {name: getattr(cfg, name, None) for name in (*TL_FIELDS, "positional_embedding_type")}
    state = {k: v.detach().to("cpu", torch.float32) for k, v in model.state_dict().items()}
    origin = Origin(f"a {type(model).__name__} object in Python ({source})", weights_digest(state),
                    json.dumps(declaration.to_dict(), sort_keys=True))
    return _subject_of(config, state, declaration, source, device, True, origin=origin)


def _subject_of(cfg: dict[str, Any], state: dict[str, torch.Tensor], declaration: TaskDeclaration, source: str,
                device: str, bridge: bool, split_file: str | Path | None = None,
                origin: Origin | None = None) -> Subject:
    config, state, given = study_coordinates(cfg, state, declaration, source)
    config = dataclasses.replace(config, origin=origin)
    model = model_of(config, state, source, bridge, device)
    split = Split.load(split_file, config.task) if split_file else declaration.split()
    return Subject(model, config, split, source, declaration, given)


def _task_in(path: Path) -> TaskDeclaration:
    """The task file beside a model's weights (``task.json`` or ``task.toml``, the name in any case); two
    that declare different tasks are refused, since either would silently win."""
    found = sorted(p for p in path.iterdir() if p.name.lower() in TASK_FILES and p.is_file())
    if not found:
        raise DeclarationError(f"{path}: a TransformerLens model needs its task declared: give --task FILE "
                               f"or put task.json beside its weights (docs/own-model.md)")
    declarations = [TaskDeclaration.load(p) for p in found]
    if any(d != declarations[0] for d in declarations[1:]):
        raise DeclarationError(f"{path}: holds {' and '.join(p.name for p in found)}, which declare different "
                               f"tasks; keep the one the model was trained on")
    return declarations[0]


MODEL_CARD = "MODEL_CARD.md"


def export_transformerlens(subject: Subject, directory: Path) -> list[str]:
    """Write ``subject`` into ``directory`` as a model plain TransformerLens loads, with no compose-lens:
    ``config.json`` (the ``TransformerBridgeConfig`` fields), ``model.safetensors`` (the bridge's state
    dict), ``task.json`` (the declaration :func:`load_subject` reads back) and ``MODEL_CARD.md``. Returns
    the files written. The model is in its own layout (:func:`compose_lens.data.declaration.user_coordinates`:
    a researcher's model in their token ids, positions and output classes, every row as it was read).
    Where the export cannot be exact (no declaration, rows compose-lens does not hold, a split no
    declaration gives), nothing is written and one line says why."""
    if subject.declaration is None:
        raise ComposeLensError(f"{subject.source}: cannot be exported as a plain TransformerLens model: its task "
                               f"is a variant, which has no declaration yet")
    state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in tl.parameters(subject.model).items()}
    tl_config, user_state = user_coordinates(subject.config.model, state, subject.declaration,
                                             subject.user_weights, subject.source)
    declaration = _declaring(subject.declaration, subject.split, subject.source)
    directory.mkdir(parents=True, exist_ok=True)
    write_json_atomic(directory / CONFIG_FILE, tl_config)
    with atomic_path(directory / WEIGHTS_FILE) as tmp:
        write_safetensors({k: v.contiguous() for k, v in user_state.items()}, tmp, {"format": "pt"})
    declaration.write(directory / TASK_FILES[0])
    results = read_results(subject.source) if Path(subject.source).is_dir() else None
    outcome = (results or {}).get("outcome")  # classify_run's record: {"outcome": ..., "why": ..., ...}
    if isinstance(outcome, dict) and isinstance(outcome.get("outcome"), str):
        outcome = outcome["outcome"] + (f" ({outcome['why']})" if outcome.get("why") else "")
    elif not isinstance(outcome, str):
        outcome = "not recorded (no results.json beside the weights)"
    made = subject.config.origin
    origin = (f"outside compose-lens, no training recipe known: `{made.weights}` (SHA-256 `{made.sha256}`)"
              if made else "by compose-lens (`config.json` of the source holds the recipe)"
              if (results or Path(subject.source, CONFIG_FILE).is_file()) else "not recorded")
    card = f"""# A model of the "Assign and Add" task family, exported by compose-lens {VERSION}

* source: `{subject.source}`
* task: {subject.task.operation} mod {subject.task.modulus}, {subject.task.n_vars} variables, sequences of \
{subject.task.seq_len} tokens (`task.json`, in the model's own token ids)
* outcome: {outcome}
* trained: {origin}
* code: {code_version()}

Load it with TransformerLens alone:

```python
import json
from safetensors.torch import load_file
from transformer_lens.config import TransformerBridgeConfig
from transformer_lens.model_bridge import TransformerBridge
from transformer_lens.model_bridge.sources import native  # registers boot_native

cfg = TransformerBridgeConfig(**json.load(open("config.json")), architecture="TransformerLensNative")
model = TransformerBridge.boot_native(cfg)
model.load_state_dict(load_file("model.safetensors"))
```

or with compose-lens: `compose-lens evaluate THIS_FOLDER` (the task is read from `task.json`).
"""
    safety.write_text_atomic(directory / MODEL_CARD, card)
    return [CONFIG_FILE, WEIGHTS_FILE, TASK_FILES[0], MODEL_CARD]


def _same_split(a: Split, b: Split) -> bool:
    return (torch.equal(a.is_train, b.is_train) and torch.equal(a.two_var_counts, b.two_var_counts)
            and (a.task.left_forbidden, a.task.right_forbidden) == (b.task.left_forbidden, b.task.right_forbidden))


def _declaring(declaration: TaskDeclaration, split: Split, source: str) -> TaskDeclaration:
    """``declaration`` as it gives ``split`` (the split the subject was read with: a ``--split`` file may
    differ from the declared one): itself, or with the held-out pairs and forbidden slots written out;
    refused where no declaration gives that split (its 2-var row counts are not the procedure's)."""
    if declaration.split_file is None and _same_split(declaration.split(), split):
        return declaration
    task = split.task  # a split file's split (its file is not exported), or a --split file's: written out
    explicit = dataclasses.replace(declaration, split_file=None, f=None, r=task.r, seed=task.seed,
                                   heldout_pairs=tuple(map(tuple, split.heldout_pairs.tolist())),
                                   left_forbidden=task.left_forbidden, right_forbidden=task.right_forbidden)
    if _same_split(explicit.split(), split):
        return explicit
    raise ComposeLensError(f"{source}: cannot be exported with its split: its 2-var rows per pair are not what "
                           f"r={task.r} gives for its held-out pairs, and task.json cannot declare them")
