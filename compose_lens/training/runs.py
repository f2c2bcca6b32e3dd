"""Runs, checkpoints and result files: the one module that reads or writes them.

A **run** is a directory (the SAELens layout: ``model.safetensors`` + ``config.json``)::

    RUN/config.json                       the RunConfig (task, model, train)
    RUN/split.json                        held-out pairs and slot restrictions
    RUN/metrics.jsonl                     one line per evaluation: step, loss, nine pools
    RUN/checkpoints/step_NNNNNN/          model.safetensors + config.json every checkpoint_every steps
    RUN/resume.safetensors                weights + optimizer state of the last checkpoint
    RUN/model.safetensors, config.json    the final model
    RUN/results.json                      final pools, exhaustive accuracies, wall time, provenance
    RUN/results/dynamics.csv, phases.json the training dynamics (written by ``compose-lens dynamics``)

Nothing is ever unpickled: weights are safetensors, and the study's ``.pth`` files are read with
``torch.load(weights_only=True)``, which accepts plain tensors only. Every file is written to a temporary
name and renamed, so a crash leaves the previous version, never half a file. A researcher's own
TransformerLens model directory is read here too (:func:`read_transformerlens_dir`); what the files hold
becomes a model in :mod:`compose_lens.training.subject`.

The **run directory's policy** lives here too, so the trainer is only the loop: :func:`plan_directory`,
:func:`check_resume_split`, :func:`claim_directory`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import stat
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import pandas as pd
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from compose_lens.data import safety
from compose_lens.core.config import RunConfig
from compose_lens.core.errors import ComposeLensError
from compose_lens.core.outputs import ANALYSIS_FILES
from compose_lens.core.files import (atomic_path, load_json, missing_columns, remove_stale_temps, temp_beside, temp_of,
                                write_json_atomic)
from compose_lens.data.split import Split
from compose_lens.model import tl
from compose_lens.data.declaration import TL_FIELDS
from compose_lens.training.phases import measure_phases

WEIGHTS_FILE, CONFIG_FILE, SPLIT_FILE = "model.safetensors", "config.json", "split.json"
TASK_FILES = ("task.json", "task.toml")  # beside a researcher's own TransformerLens model
TL_CONFIG_FILES = ("config.json", "tl_config.json")  # its TransformerLens config, under either name
METRICS_FILE, RESULTS_FILE, RESUME_FILE = "metrics.jsonl", "results.json", "resume.safetensors"
CHECKPOINTS_DIR = "checkpoints"
DYNAMICS_FILE, PHASES_FILE = "dynamics.csv", "phases.json"
STUDY_FINAL = "final.pth"  # the study's final checkpoint in its folder of step_N.pth files
ERROR_FILE = "error.json"  # a sweep point that failed
# what training writes at the top of a run (a resume removes a killed trainer's temporaries of these only)
TRAINER_NAMES = frozenset({CONFIG_FILE, SPLIT_FILE, METRICS_FILE, RESULTS_FILE, RESUME_FILE, WEIGHTS_FILE, ERROR_FILE})
# everything compose-lens may write at the top of a run directory: ``train --overwrite`` refuses anything else
RUN_NAMES = TRAINER_NAMES | {CHECKPOINTS_DIR, "results", "figures", "report.html", "report_problems.txt", safety.MARKER,
                             "tensorboard", "wandb"}  # + compose_lens.core.tracking
FILE, LINK, TREE = "a file", "a symlink", "a folder"
# the report's own figures; the analyses' files are the registered declarations' (compose_lens.core.outputs)
REPORT_FIGURES = ("accuracy_by_variable_count", "progress_measures", "late_refinement", "qk_heatmaps")


def run_layout() -> dict:
    """What compose-lens writes inside a run directory, by name and kind: what ``train --overwrite``
    checks every entry it would delete against (:func:`foreign_in_run`). A key is a regular expression
    matched whole on a name; a value is FILE, LINK (a symlink or a file: W&B's pointer to its latest
    run), TREE (a folder another library lays out: a W&B run) or a folder's layout, checked entry by
    entry. tests/integration/test_report.py holds a reported run to it."""
    figure = "(" + "|".join((*REPORT_FIGURES, *(f for _, figures in ANALYSIS_FILES.values() for f in figures))) + ")"
    analysis = {re.escape(name): {"(" + "|".join(map(re.escape, stems)) + r")\.(csv|json|provenance\.json)": FILE,
                                  "figures": {figure + r"\.(png|svg|pdf|html)": FILE}}  # html: circuit, attention views
                for name, (stems, _) in ANALYSIS_FILES.items() if stems is not None}
    return {
        CHECKPOINTS_DIR: {r"step_\d+": {re.escape(WEIGHTS_FILE): FILE, re.escape(CONFIG_FILE): FILE}},
        "results": {re.escape(DYNAMICS_FILE): FILE, re.escape(PHASES_FILE): FILE, r"dynamics\.png": FILE,
                    r"dynamics\.provenance\.json": FILE,
                    "figures": {r"dynamics\.(png|svg|pdf|csv)": FILE}, re.escape(safety.MARKER): FILE, **analysis},
        "figures": {figure + r"\.(png|csv)": FILE},
        "tensorboard": {r"events\.out\.tfevents\..+": FILE},  # torch's SummaryWriter
        "wandb": {r"(offline-)?run-\d{8}_\d{6}-\w+": TREE, "latest-run": LINK,
                  r"debug(-internal|-cli\..+)?\.log": LINK},  # wandb.init(dir=RUN)
        **{re.escape(name): FILE for name in RUN_NAMES - {CHECKPOINTS_DIR, "results", "figures", "tensorboard",
                                                          "wandb"}},
    }


def foreign_in_run(run_dir: Path) -> str | None:
    """The first entry of ``run_dir``, at any depth, that compose-lens did not write there (by name, or by
    kind: a symlink where it writes a file), as a refusal prints it; None where everything is its own
    (a killed writer's temporaries of an owned name included). No link is followed."""
    return _foreign_below(Path(run_dir), run_layout(), "")


def _foreign_below(folder: Path, layout: dict, prefix: str) -> str | None:
    for entry in sorted(folder.iterdir()):
        stands_for = temp_of(entry.name)
        name = stands_for or entry.name
        if not prefix and stands_for is None and name.endswith(".tmp"):
            name = name[:-4]  # an earlier version's NAME.tmp at the top of a run
        rule = next((r for pattern, r in layout.items() if re.fullmatch(pattern, name)), None)
        kind = LINK if entry.is_symlink() else TREE if entry.is_dir() else FILE if entry.is_file() else "a special file"
        where = prefix + entry.name
        if rule is None:
            return f"{where}, which compose-lens did not write"
        expected = FILE if rule in (FILE, LINK) else TREE
        if kind == LINK and rule == LINK:
            continue
        if kind != expected or (stands_for is not None and kind == LINK):
            return f"{where} ({kind}, where compose-lens writes {expected})"
        if isinstance(rule, dict) and stands_for is None:
            found = _foreign_below(entry, rule, where + "/")
            if found:
                return found
    return None


def foreign_entries(run_dir: Path) -> list[str]:
    """Entries of a run directory that compose-lens does not write there (temporary files aside)."""
    names = []
    for entry in sorted(Path(run_dir).iterdir()):
        base = entry.name[:-4] if entry.name.endswith(".tmp") else entry.name  # an earlier version's
        base = temp_of(entry.name) or base  # a temporary of files.temp_beside
        if base not in RUN_NAMES:
            names.append(entry.name)
    return names


def extends(saved: RunConfig, config: RunConfig, trained: bool = True) -> bool:
    """Whether ``config`` may continue a run started with ``saved``: the same configuration, or (once a
    resume state exists) the same but for a larger ``train.steps`` or another ``train.stop_at``. The
    learning rate is constant, so a run trained to N steps and then to M ends with the weights of one
    trained to M at once; the stop rule decides only where training ends, never a step's update."""
    if saved.to_dict() == config.to_dict():
        return True
    train = dataclasses.replace(saved.train, steps=config.train.steps, stop_at=config.train.stop_at)
    return (trained and config.train.steps >= saved.train.steps
            and dataclasses.replace(saved, train=train).to_dict() == config.to_dict())


def plan_directory(d: Path, config: RunConfig, resume: bool, overwrite: bool) -> str:
    """What training into ``d`` will do with it: ``new``, ``resume``, ``restart`` (resume asked, but no
    resume state was written yet) or ``replace`` (``overwrite``); refused in one line where the directory
    is not a run this configuration may continue or replace. Nothing is done yet."""
    if d.exists() and not d.is_dir():
        raise ComposeLensError(f"--out {d}: exists and is not a directory")
    safety.check_parent(d)
    holds = d.is_dir() and any(e.name != safety.MARKER for e in d.iterdir())
    if not holds:
        return "new"
    foreign = foreign_entries(d)
    if resume:
        if foreign:
            raise ComposeLensError(f"{d}: holds {foreign[0]}, which is not part of a run; "
                                   f"this is not a run directory")
        saved = d / CONFIG_FILE
        trained = (d / RESUME_FILE).exists()
        # new keys at their defaults, so a run of an earlier version still resumes
        if saved.exists() and not extends(RunConfig.from_dict(load_json(saved)), config, trained):
            raise ComposeLensError(f"{d}: the run was started with another configuration; "
                                   f"resume without --config/--set/--split-file (only a larger "
                                   f"--set steps=N, to train it longer, or another --set stop_at=RULE may be "
                                   f"given), or use a new --out")
        if trained and not saved.exists():  # nothing proves what the saved state was trained with
            raise ComposeLensError(f"{d}: its {CONFIG_FILE} is missing, so compose-lens cannot "
                                   f"prove the run was trained with this configuration; copy it back "
                                   f"(every checkpoints/step_N/ keeps one), or start again with --overwrite")
        return "resume" if trained else "restart"
    if foreign and not (d / CONFIG_FILE).exists():
        raise ComposeLensError(f"--out {d}: holds {foreign[0]}, which is not part of a run; "
                               f"choose another --out (an empty or new directory)")
    if not overwrite:
        raise ComposeLensError(f"{d} already holds a run; pass --resume to continue it, "
                               f"--overwrite to replace it, or choose another --out")
    marker = safety.read_marker(d)
    if marker is None and not (d / CONFIG_FILE).exists():
        raise ComposeLensError(f"{d}: not a compose-lens run (no {safety.MARKER} marker, no "
                               f"{CONFIG_FILE}); --overwrite will not delete it: move it away")
    if marker and marker.get("command", "train") != "train":
        raise ComposeLensError(f"{d}: holds the output of `{marker['command']}`, not a run; "
                               f"choose another --out")
    foreign = foreign_in_run(d)
    if foreign:
        raise ComposeLensError(f"{d}: holds {foreign}; --overwrite will not delete it: move it away")
    return "replace"


def check_resume_split(run_dir: Path, config: RunConfig, split: Split | None) -> None:
    """A resumed run goes on with the split it was trained on: its ``split.json``, which must
    exist, and which a split given now must equal (nothing is changed yet)."""
    saved = run_dir / SPLIT_FILE
    if not saved.is_file():
        raise ComposeLensError(f"{run_dir}: its {SPLIT_FILE} is missing, so compose-lens "
                               f"cannot prove which split the run was trained on; copy it back, or "
                               f"start again with --overwrite")
    if split is not None and Split.load(saved, config.task).to_dict() != split.to_dict():
        raise ComposeLensError(f"{run_dir}: the run was trained on another split than the "
                               f"--split-file given; resume without --split-file, or use a new --out")


def claim_directory(d: Path, mode: str) -> safety.DirectoryLock:
    """Lock a run directory for training (held until released or the process ends), then clear
    what a replace or a restart (the ``mode`` of :func:`plan_directory`) starts without."""
    created = not d.exists()
    d.mkdir(parents=True, exist_ok=True)
    busy = (f"{d}: another compose-lens process is using this run now (training it or writing its report); "
            f"wait for it to end (or stop it), or use another --out")
    try:
        lock = safety.lock_directory(d, "train", busy)
    except BaseException:
        if created:  # unless the process that holds the lock has written into it meanwhile
            with contextlib.suppress(OSError):
                d.rmdir()
        raise
    if mode == "replace":
        for entry in d.iterdir():
            if entry.name != safety.MARKER:
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    elif mode == "restart":  # stopped before its first resume state: forget what it wrote
        shutil.rmtree(d / CHECKPOINTS_DIR, ignore_errors=True)
        truncate_metrics(d, None)
    if mode in ("resume", "restart"):  # a SIGKILL mid-write leaves its temporary: the lock makes it stale
        remove_stale_temps(d, TRAINER_NAMES)
        remove_stale_temps(d / CHECKPOINTS_DIR, _RUN_CKPT.match, folders=True)
    lock.write({"command": "train"})
    return lock


def state_dict(model: tl.Model) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in model.state_dict().items()}


_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def write_safetensors(tensors: dict[str, torch.Tensor], path: Path, metadata: dict[str, str]) -> None:
    """``save_file``, with a failed write (a full disk, a read-only folder), which safetensors reports as
    a ``SafetensorError`` naming "(os error N)", raised as the :class:`OSError` the callers catch. The
    file keeps the permissions ``path`` was made with (:func:`~compose_lens.core.files.atomic_path`, under
    the user's umask), not the 0600 of the file safetensors writes and renames over it."""
    mode = stat.S_IMODE(os.stat(path).st_mode) if os.path.exists(path) else None
    try:
        save_file(tensors, str(path), metadata=metadata)
        if mode is not None:
            os.chmod(path, mode)
    except SafetensorError as exc:
        found = _OS_ERROR.search(str(exc))
        if not found:
            raise
        code = int(found.group(1))
        raise OSError(code, os.strerror(code), str(path)) from None


def save_model(model: tl.Model, config: RunConfig, directory: str | Path, extra: dict | None = None) -> Path:
    """Write ``model.safetensors`` + ``config.json`` into ``directory`` (atomically per file)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with atomic_path(directory / WEIGHTS_FILE) as tmp:  # a full disk leaves no half file
        write_safetensors(state_dict(model), tmp, {"format": "compose-lens", **(extra or {})})
    write_json_atomic(directory / CONFIG_FILE, config.to_dict())
    return directory


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise ComposeLensError(f"{path}: not a readable safetensors file ({exc}); "
                               f"the checkpoint may be truncated: re-save or pick another") from None


def read_pth(path: Path, config: RunConfig) -> dict[str, torch.Tensor]:
    """One of the study's ``HookedTransformer`` state dicts, checked and converted to the bridge layout."""
    try:
        legacy = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as exc:  # torch raises several types for bad files
        raise ComposeLensError(f"{path}: cannot be read as a plain tensor state dict "
                               f"({type(exc).__name__}); only weights-only .pth files are loaded") from None
    if not isinstance(legacy, dict) or "embed.W_E" not in legacy:
        raise ComposeLensError(f"{path}: not a HookedTransformer state dict (no embed.W_E)")
    for key, value in legacy.items():  # a weights-only pickle may still hold strings, lists, bool weights
        parameter = isinstance(key, str) and key.rsplit(".", 1)[-1].startswith(("W_", "b_"))  # not a buffer (mask)
        if not isinstance(key, str) or not isinstance(value, torch.Tensor) or (
                parameter and (value.dtype == torch.bool or value.is_complex())):
            what = (str(value.dtype).removeprefix("torch.") + " tensor" if isinstance(value, torch.Tensor)
                    else type(value).__name__)
            problem = (f"has the key {key!r}, not a parameter name" if not isinstance(key, str)
                       else f"{key!r} holds a {what}, not a tensor of real numbers")
            raise ComposeLensError(f"{path}: {problem}; this is not one of the study's checkpoints")
    mlp0 = [k for k in ("blocks.0.mlp.W_in", "blocks.0.mlp.W_out") if k in legacy]
    if any(legacy[k].abs().max() > 0 for k in mlp0):
        raise ComposeLensError(f"{path}: the layer-1 MLP (blocks.0.mlp) is not zero; the study's "
                               f"model has no MLP there, so this is not one of its checkpoints")
    try:
        return tl.convert_legacy_state_dict(legacy, config.model)
    except ValueError as exc:
        raise ComposeLensError(f"{path}: {exc}") from None


def transformerlens_config(path: Path) -> Path | None:
    """The TransformerLens config of a model directory: the first of :data:`TL_CONFIG_FILES` there that holds
    TransformerLens fields (``d_model``), not a compose-lens run's sections (task / model / train); None
    where there is none, or no weights beside it."""
    if not (path / WEIGHTS_FILE).is_file():
        return None
    for name in TL_CONFIG_FILES:
        try:
            data = load_json(path / name) if (path / name).is_file() else None
        except ComposeLensError:
            continue
        if isinstance(data, dict) and "d_model" in data and "model" not in data:
            return path / name
    return None


def is_transformerlens_dir(path: Path) -> bool:
    """Does ``path`` hold a TransformerLens model (:func:`transformerlens_config`), not a compose-lens run?"""
    return transformerlens_config(path) is not None


def read_transformerlens_dir(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The state dict and TransformerLens config of a model directory."""
    config = transformerlens_config(path)
    cfg = load_json(config)
    missing = [k for k in TL_FIELDS if k not in cfg and k != "normalization_type"]
    if missing:
        raise ComposeLensError(f"{config}: missing TransformerLens field(s) {', '.join(missing)}")
    return read_safetensors(path / WEIGHTS_FILE), cfg


def file_sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


@dataclass(frozen=True)
class Checkpoint:
    """One saved model of a training run: its step and where its weights are."""

    step: int
    path: Path
    kind: str  # "safetensors" (a compose-lens checkpoint directory) or "pth" (the study's)


_RUN_CKPT = re.compile(r"^step_(\d+)$")
_PTH_CKPT = re.compile(r"^step_(\d+)\.pth$")


def checkpoint_name(step: int) -> str:
    return f"step_{step:06d}"


def find_checkpoints(source: str | Path, split_file: str | Path | None = None
                     ) -> tuple[list[Checkpoint], RunConfig, Split]:
    """The checkpoints of ``source`` in step order, with the run's configuration and split, for the
    training-dynamics analyses. ``source`` is a run directory, its ``checkpoints`` folder, or a folder of
    the study's ``step_N.pth`` files with a ``split.json`` (``final.pth`` has no step and is left out)."""
    source = Path(source)
    if not source.is_dir():
        raise ComposeLensError(f"{source}: not a directory; give a run directory or a folder of "
                               f"step_N.pth checkpoints")
    pth = sorted((int(m.group(1)), p) for p in source.iterdir() if (m := _PTH_CKPT.match(p.name)))
    if pth:
        split_path = split_file or (source / SPLIT_FILE)
        if not Path(split_path).exists():
            raise ComposeLensError(f"{source}: the study's checkpoints need their split.json; "
                                   f"pass --split FILE")
        split = Split.load(split_path)
        return [Checkpoint(s, p, "pth") for s, p in pth], RunConfig(task=split.task), split
    run_dir = source.parent if source.name == CHECKPOINTS_DIR else source
    ckpt_dir = run_dir / CHECKPOINTS_DIR
    if not ckpt_dir.is_dir():
        if is_transformerlens_dir(run_dir):
            raise ComposeLensError(f"{source}: a model trained outside compose-lens holds one model, not a run's "
                                   f"checkpoints; the analyses of a training run (dynamics, early-jump, llc) "
                                   f"read a compose-lens run or a folder of the study's step_N.pth "
                                   f"files (docs/own-model.md)")
        raise ComposeLensError(f"{source}: no checkpoints/ folder and no step_N.pth files here")
    found = sorted((int(m.group(1)), p) for p in ckpt_dir.iterdir()
                   if (m := _RUN_CKPT.match(p.name)) and (p / WEIGHTS_FILE).exists())
    if not found:
        raise ComposeLensError(f"{ckpt_dir}: no step_NNNNNN/{WEIGHTS_FILE} checkpoints yet")
    config_file = run_dir / CONFIG_FILE
    if not config_file.exists():
        config_file = found[0][1] / CONFIG_FILE
    config = RunConfig.from_dict(load_json(config_file))
    if split_file is None and (run_dir / SPLIT_FILE).exists():
        split_file = run_dir / SPLIT_FILE
    split = Split.load(split_file, config.task) if split_file else Split.from_task(config.task)
    config = RunConfig(task=split.task, model=config.model, train=config.train)
    return [Checkpoint(s, p, "safetensors") for s, p in found], config, split


def checkpoints_without_weights(source: str | Path) -> list[Path]:
    """The ``checkpoints/step_NNNNNN/`` folders of a run that hold no ``model.safetensors`` (a copy
    cut short, a file deleted): :func:`find_checkpoints` leaves them out, and a command that reads
    every checkpoint says so rather than skip a step without a word."""
    source = Path(source)
    folder = source if source.name == CHECKPOINTS_DIR else source / CHECKPOINTS_DIR
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if _RUN_CKPT.match(p.name) and p.is_dir()
                  and not (p / WEIGHTS_FILE).is_file())


def select_checkpoints(checkpoints: list[Checkpoint], steps: Sequence[int] | None = None,
                       stride: int = 1) -> list[Checkpoint]:
    """Keep the listed steps (all if None), then every ``stride``-th one (the last always kept)."""
    if steps:
        wanted = set(int(s) for s in steps)
        missing = sorted(wanted - {c.step for c in checkpoints})
        if missing:
            raise ComposeLensError(f"no checkpoint at step(s) {missing[:5]}; available: "
                                   f"{[c.step for c in checkpoints][:10]}...")
        checkpoints = [c for c in checkpoints if c.step in wanted]
    if stride > 1:
        kept = checkpoints[::stride]
        if kept[-1] is not checkpoints[-1]:
            kept.append(checkpoints[-1])
        checkpoints = kept
    return checkpoints


def read_state(checkpoint: Checkpoint, config: RunConfig) -> dict[str, torch.Tensor]:
    """A checkpoint's weights in the bridge layout (the study's .pth files converted and checked)."""
    if checkpoint.kind == "pth":
        return read_pth(checkpoint.path, config)
    return read_safetensors(checkpoint.path / WEIGHTS_FILE)


def write_checkpoint(model: tl.Model, config: RunConfig, run_dir: Path, step: int) -> Path:
    """Write ``checkpoints/step_NNNNNN/`` whole: into a temporary folder, then renamed."""
    directory = run_dir / CHECKPOINTS_DIR / checkpoint_name(step)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_beside(directory, directory=True)
    try:
        save_model(model, config, tmp, extra={"step": str(step)})
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if directory.exists():
        shutil.rmtree(directory)
    tmp.rename(directory)
    return directory


def save_resume_state(run_dir: Path, model: tl.Model, optimizer: torch.optim.Optimizer,
                      trainable: Sequence[torch.nn.Parameter], step: int, elapsed: float) -> None:
    """Weights and AdamW state of the last checkpoint in ``resume.safetensors``."""
    tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    for i, p in enumerate(trainable):
        for name, value in optimizer.state.get(p, {}).items():
            tensors[f"opt.{i}.{name}"] = torch.as_tensor(value).detach().cpu().reshape(-1).contiguous() \
                if name == "step" else value.detach().cpu().contiguous()
    with atomic_path(run_dir / RESUME_FILE) as tmp:  # the previous resume state stays whole
        write_safetensors(tensors, tmp, {"step": str(step), "elapsed": str(elapsed)})


def load_resume_state(run_dir: Path, model: tl.Model, optimizer: torch.optim.Optimizer,
                      trainable: Sequence[torch.nn.Parameter]) -> tuple[int, float]:
    """Restore what :func:`save_resume_state` wrote; returns (step, elapsed seconds)."""
    path = run_dir / RESUME_FILE
    broken = (f"{path}: the resume state is unreadable or incomplete; the checkpoints are kept: "
              f"start the run again with --overwrite")
    try:
        with safe_open(str(path), "pt") as f:
            meta = f.metadata() or {}
        step, elapsed = int(meta["step"]), float(meta.get("elapsed", 0.0))
    except (SafetensorError, OSError, ValueError, KeyError):
        raise ComposeLensError(broken) from None
    tensors = read_safetensors(path)
    weights = {k[6:]: v for k, v in tensors.items() if k.startswith("model.")}
    if any(v.is_floating_point() and not bool(torch.isfinite(v).all()) for v in tensors.values()):
        raise ComposeLensError(f"{path}: the resume state holds NaN or infinite values; "
                               f"start the run again with --overwrite")
    try:
        model.load_state_dict(weights)
    except RuntimeError:
        raise ComposeLensError(broken) from None
    state = {}
    for i, _ in enumerate(trainable):
        entry = {name: tensors[f"opt.{i}.{name}"] for name in ("exp_avg", "exp_avg_sq", "step")
                 if f"opt.{i}.{name}" in tensors}
        if entry:
            entry["step"] = entry["step"].reshape(())
            state[i] = entry
    try:
        optimizer.load_state_dict({"state": state, "param_groups": optimizer.state_dict()["param_groups"]})
    except (RuntimeError, ValueError, KeyError):
        raise ComposeLensError(broken) from None
    return step, elapsed


def append_metrics(run_dir: Path, line: dict) -> None:
    with open(run_dir / METRICS_FILE, "a") as handle:
        handle.write(json.dumps(line) + "\n")


def read_metrics(run_dir: str | Path) -> list[dict]:
    """The evaluations a run logged, in file order (empty if it logged none yet)."""
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return []
    lines = []
    for line in path.read_text().splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:  # a line cut by a kill mid-append: the step is evaluated again
            continue
    return [line for line in lines if isinstance(line, dict) and "step" in line]


def truncate_metrics(run_dir: Path, last_step: int | None) -> None:
    """Forget the evaluations after ``last_step`` (all of them if None): a resumed run logs them again."""
    path = run_dir / METRICS_FILE
    if not path.exists():
        return
    if last_step is None:
        path.unlink()
        return
    kept = [line for line in read_metrics(run_dir) if line["step"] <= last_step]
    safety.write_text_atomic(path, "".join(json.dumps(line) + "\n" for line in kept))


def read_results(run_dir: str | Path) -> dict | None:
    path = Path(run_dir) / RESULTS_FILE
    return load_json(path) if path.exists() else None


def write_table(table: pd.DataFrame, path: str | Path, provenance: dict | None = None) -> Path:
    """A CSV that ``pandas.read_csv`` reads as it is; the provenance goes to ``NAME.json`` beside it."""
    path = Path(path)
    with atomic_path(path) as tmp:
        table.to_csv(tmp, index=False)
    if provenance is not None:
        write_json_atomic(path.with_suffix(".provenance.json"), provenance)
    return path


def write_document(data: dict, path: str | Path, provenance: dict) -> Path:
    """A JSON result with its provenance under the key ``provenance``."""
    write_json_atomic(path, {**data, "provenance": provenance})
    return Path(path)


def mark_written(out: str | Path, command: str) -> None:
    """Mark ``out`` (a run's ``results/`` folder, written by the report) as written by compose-lens, so that
    ``compose-lens COMMAND --out OUT --update`` may later extend it."""
    out = Path(out)
    write_json_atomic(out / safety.MARKER, {"command": command, "files": sorted(e.name for e in out.iterdir()),
                                            "written_by": "compose-lens"})


def run_phases_measured(table: pd.DataFrame, source: str | Path, settings: dict | None,
                        split_file: str | Path | None = None) -> dict:
    """The run's onsets (:func:`compose_lens.training.phases.measure_phases`) from its evaluated checkpoints:
    intervals from the pools' size (``settings``) and, against every checkpoint ``source`` has, the
    stride flag. The one reading ``dynamics``, the report and ``make reproduce`` print."""
    try:
        available = [c.step for c in find_checkpoints(source, split_file)[0]]
    except (ComposeLensError, OSError):  # the checkpoints are gone (a copied results folder): no stride flag
        available = None
    return measure_phases(table, pool_size=(settings or {}).get("pool_size"), available_steps=available)


def load_dynamics(directory: str | Path) -> tuple[pd.DataFrame, dict]:
    """Read back what the ``dynamics`` analysis wrote (``dynamics.csv`` and ``phases.json``)."""
    directory = Path(directory)
    if not (directory / DYNAMICS_FILE).exists():
        raise ComposeLensError(f"{directory}: no {DYNAMICS_FILE}; run `compose-lens dynamics RUN --out {directory}`")
    return read_dynamics_table(directory / DYNAMICS_FILE), load_json(directory / PHASES_FILE)


def read_dynamics_table(path: Path) -> pd.DataFrame:
    """A ``dynamics.csv``, or one line saying it is damaged (cut short, edited, not a table of steps)."""
    damaged = f"{path}: damaged ({{}}); delete it, or run dynamics with --overwrite instead of --update"
    try:
        table = pd.read_csv(path)
    except (OSError, ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:  # EmptyDataError too
        raise ComposeLensError(damaged.format(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)) from None
    if "step" not in table:
        raise ComposeLensError(damaged.format(f"{missing_columns(table.columns, ['step'])}, so no step numbers"))
    steps = pd.to_numeric(table["step"], errors="coerce")
    if steps.isna().any() or not (steps == steps.round()).all():
        raise ComposeLensError(damaged.format("no whole-number 'step' column"))
    return table


def previous_dynamics(directory: str | Path, settings: dict, source: str | Path,
                      split_file: str | Path | None = None) -> pd.DataFrame | None:
    """The rows of an earlier ``dynamics.csv`` in ``directory`` if they are ``source``'s (the run they
    were made of: :func:`dynamics_of_run`) and were made with ``settings``; another run's are refused,
    never taken as this one's."""
    directory = Path(directory)
    if not (directory / DYNAMICS_FILE).exists() or not (directory / PHASES_FILE).exists():
        return None
    saved = load_json(directory / PHASES_FILE)
    if not dynamics_of_run(saved, source, split_file):
        made_of = saved.get("source") if isinstance(saved, dict) else None
        raise ComposeLensError(f"{directory}: its dynamics are of another run "
                               f"({made_of or 'its phases.json does not say which'}), not {source}; drop --update "
                               f"or use another --out")
    saved = saved.get("settings")
    if saved != settings:
        raise ComposeLensError(f"{directory}: its dynamics were made with other settings ({saved}); "
                               f"drop --update or use another --out")
    return read_dynamics_table(directory / DYNAMICS_FILE)


def dynamics_of_run(phases: Any, source: str | Path, split_file: str | Path | None = None) -> bool:
    """Whether a saved ``phases.json`` (its document ``phases``) was made of the run ``source``: the same
    folder and configuration, as its provenance names them (dynamics kept outside a run outlive it).
    Anything unreadable: not."""
    try:
        config = find_checkpoints(source, split_file)[1]
        return (isinstance(phases, dict) and Path(phases["source"]).resolve() == Path(source).resolve()
                and phases["config"] == json.loads(json.dumps(config.to_dict())))
    except (OSError, ValueError, KeyError, TypeError, ComposeLensError):
        return False
