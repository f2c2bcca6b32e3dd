"""The local learning coefficient (LLC) of each checkpoint of a run, beside the three phases.

**What it measures.** Near a minimum ``w*`` of the training loss ``L``, singular learning theory
says the volume of weights with loss below ``L(w*) + eps`` shrinks like ``eps^lambda``; the
learning coefficient ``lambda`` is the model's *effective* number of parameters there, halved (a
regular model with d parameters has ``lambda = d / 2``; degenerate directions count less). A model
that has found a simpler solution sits in a flatter, wider basin and has a lower LLC. Lau et al.
(2023) estimate it at ``w*`` by sampling the tempered, localised posterior with SGLD::

    w <- w - (eps / 2) (n_beta grad L_batch(w) + gamma (w - w*)) + N(0, eps)
    LLC = n_beta (E_w[L(w)] - L(w*))

``eps`` is the step size (devinterp's ``lr``), ``gamma`` the pull back towards ``w*``
(``localization``), ``n_beta`` the inverse temperature (default ``B / ln B`` for batch size ``B``,
devinterp's ``default_nbeta``). Grokking studies (devinterp's modular-addition example; Hoogland et
al. 2024, "the developmental landscape of in-context learning") read phase changes as moves of the
LLC: does it mark the study's three phases (addition, assignment, refinement)?

**How it is computed here.** With devinterp 2.0.1's :func:`devinterp.slt.llc.llc`. devinterp
expects a language model (a per-token next-token loss over a dataset of ``input_ids``); the
study's loss is the cross-entropy of the answer at ``=``. So each training
sequence is stored as its 16 tokens followed by its answer, :class:`AnswerModel` returns the answer
logits of the fast forward (:mod:`compose_lens.model.fastpath`; the paper architecture and any
other without normalisation), and :func:`answer_loss` hands devinterp the per-sequence loss spread
over the 16 "token" slots, whose mean is the loss itself. Only the weights the model trains are
sampled (frozen zero biases and the absent layer-1 MLP stay as they are). The sequences are drawn
from the run's training distribution (:class:`~compose_lens.data.sampler.TrainingSampler` on its
split), the same for every checkpoint.

**Is the estimate sound?** Each checkpoint gets :func:`sanity` checks: every loss of every
chain is finite (SGLD did not diverge), the loss trace has levelled off (its last quarter within
``flat_tolerance`` of the quarter before, relative to how far it rose), the chains agree
(standard deviation across chains at most ``chains_tolerance`` of the mean) and the estimate is
positive (a negative one means the checkpoint is not at a local minimum of the sampled loss, or
``eps`` is too small to leave it). A row that fails says which. Settings that pass on the study's
checkpoints are the defaults of :class:`LlcSettings`; a different model may need others (smaller
``eps`` if a trace diverges, larger ``gamma`` if it drifts).
"""

from __future__ import annotations

import math
import re
import tempfile
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence
from unittest import mock

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from compose_lens.core import capabilities
from compose_lens.core import progress as progress_lines
from compose_lens.training import runs
from compose_lens.training.subject import load_model
from compose_lens.core.config import ModelConfig, RunConfig
from compose_lens.core.errors import ComposeLensError
from compose_lens.core.files import load_json
from compose_lens.training.phases import logged_phases
from compose_lens.data.sampler import TrainingSampler
from compose_lens.data.split import Split
from compose_lens.model.forward import Forward
from compose_lens.model import tl

INSTALL_HINT = "pip install devinterp==2.0.1 (or: pip install -e '.[methods]')"


def require_devinterp():
    """devinterp's ``llc``, or one line saying how to install it."""
    try:
        from devinterp.slt import llc as devinterp_llc
    except ImportError:
        raise ComposeLensError(f"the LLC needs devinterp, which is not installed: {INSTALL_HINT}") from None
    return devinterp_llc


@dataclass(frozen=True)
class LlcSettings:
    """SGLD's settings (see the module doc); the estimate depends on every one of them."""

    epsilon: float = 1e-4  # SGLD step size (devinterp: lr)
    gamma: float = 1000.0  # localisation: pull towards the checkpoint (devinterp: localization)
    n_beta: float | None = None  # inverse temperature; None: batch_size / ln(batch_size)
    chains: int = 3
    draws: int = 150
    burnin: int = 0
    batch_size: int = 128
    n_sequences: int = 4096  # training sequences drawn once, shared by every checkpoint and chain
    seed: int = 0
    flat_tolerance: float = 0.2
    chains_tolerance: float = 0.25
    component: str | None = None  # the weights the chains move (component_masks); None: every trained weight

    @property
    def beta(self) -> float:
        return self.n_beta if self.n_beta is not None else self.batch_size / math.log(self.batch_size)

    def check(self) -> None:
        problems = [(self.epsilon > 0, f"epsilon={self.epsilon}: the SGLD step must be positive"),
                    (self.gamma >= 0, f"gamma={self.gamma}: the localisation must be >= 0"),
                    (self.n_beta is None or self.n_beta > 0, f"n_beta={self.n_beta}: must be positive"),
                    (self.chains >= 2, f"chains={self.chains}: at least 2 (their agreement is a sanity check)"),
                    (self.draws >= 8, f"draws={self.draws}: at least 8"),
                    (self.burnin >= 0, f"burnin={self.burnin}: must be >= 0"),
                    (self.batch_size >= 2, f"batch_size={self.batch_size}: at least 2"),
                    (self.n_sequences >= self.batch_size,
                     f"n_sequences={self.n_sequences}: at least one batch ({self.batch_size})")]
        for ok, message in problems:
            if not ok:
                raise ComposeLensError(message)
        if self.component is not None:
            _component_parts(self.component)


def _slot(name: str) -> str:
    return name.replace(".", "__")


_COMPONENT = re.compile(r"blocks\.(\d+)\.(?:head(\d+)|(mlp))")
_HEAD_INPUTS, _HEAD_OUTPUT = ("q", "k", "v"), "o"


def _component_parts(component: str) -> tuple[int, int | None]:
    """(block, head) of ``blocks.L.headH``, (block, None) of ``blocks.L.mlp``; anything else refused."""
    found = _COMPONENT.fullmatch(component)
    if not found:
        raise ComposeLensError(f"component {component!r}: give blocks.L.headH (one attention head) or blocks.L.mlp")
    return int(found.group(1)), None if found.group(3) else int(found.group(2))


def check_component(component: str, cfg: ModelConfig) -> None:
    """Refuse, in one line, a component a model of ``cfg`` does not have."""
    layer, head = _component_parts(component)
    if layer >= cfg.n_layers:
        raise ComposeLensError(f"component {component}: the model has blocks 0..{cfg.n_layers - 1}")
    if head is None and layer not in cfg.mlp_blocks:
        raise ComposeLensError(f"component {component}: blocks.{layer} has no MLP (MLPs in {list(cfg.mlp_blocks)})")
    if head is not None and head >= cfg.n_heads:
        raise ComposeLensError(f"component {component}: the model has heads 0..{cfg.n_heads - 1} per block")


def component_masks(model: AnswerModel, component: str) -> dict[str, torch.Tensor | None]:
    """devinterp's ``param_masks`` that let SGLD move one component's weights only (devinterp 2's weight
    restriction), the rest held at the checkpoint: for ``blocks.L.headH`` its rows of the query, key and value
    weights (and their trained biases) and its columns of the output weight (the shared output bias is
    not the head's); for ``blocks.L.mlp`` every trained weight of that MLP."""
    cfg = model.model_config
    check_component(component, cfg)
    layer, head = _component_parts(component)
    masks: dict[str, torch.Tensor | None] = {}
    for name in model.names:
        if _slot(name) not in model.weights:
            continue  # frozen or absent: never sampled
        parameter, parts = model.weights[_slot(name)], name.split(".")
        if parts[:2] != ["blocks", str(layer)]:
            continue
        if head is None and parts[2] == "mlp":
            masks[f"weights.{_slot(name)}"] = None
        elif head is not None and parts[2] == "attn" and parts[3] in (*_HEAD_INPUTS, _HEAD_OUTPUT):
            if parts[3] == _HEAD_OUTPUT and parts[4] == "bias":
                continue
            mask, own = torch.zeros_like(parameter), slice(head * cfg.d_head, (head + 1) * cfg.d_head)
            if parts[3] == _HEAD_OUTPUT:
                mask[:, own] = 1.0  # (d_model, n_heads d_head): the head's columns
            else:
                mask[own] = 1.0  # (n_heads d_head, ...): the head's rows
            masks[f"weights.{_slot(name)}"] = mask
    if not masks:
        raise ComposeLensError(f"component {component}: none of its weights is trained in this model, so SGLD has "
                               f"nothing to move")
    return masks


class AnswerModel(torch.nn.Module):
    """A model's weights as devinterp samples them: the trained ones as parameters, the frozen ones as
    buffers; ``forward(input_ids)`` reads every column but the last (the answer) and returns the answer logits."""

    def __init__(self, state: dict[str, torch.Tensor], cfg: ModelConfig):
        super().__init__()
        if capabilities.answer_forward(cfg) == "transformerlens":
            raise ComposeLensError("the LLC samples the fast forward, which covers models without normalisation; "
                                   f"this model has normalization_type={cfg.normalization_type!r}")
        self.model_config, self.names = cfg, list(state)  # not "cfg": devinterp would take it for TransformerLens
        frozen = set(tl.absent_names(cfg)) | set(tl.frozen_names(cfg))
        self.weights = torch.nn.ParameterDict({_slot(n): torch.nn.Parameter(t.detach().float().clone())
                                               for n, t in state.items() if n not in frozen})
        for name in self.names:
            if name in frozen:
                self.register_buffer(_slot(name), state[name].detach().float().clone())

    def params(self) -> dict[str, torch.Tensor]:
        return {n: self.weights[_slot(n)] if _slot(n) in self.weights else getattr(self, _slot(n))
                for n in self.names}

    def answer_logits(self, tokens: torch.Tensor) -> torch.Tensor:
        return Forward(tl.Weights(self.params(), self.model_config), self.model_config).answer_forward()(tokens)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.answer_logits(input_ids[:, :-1])


def answer_loss(model: AnswerModel, input_ids: torch.Tensor) -> torch.Tensor:
    """devinterp's per-token loss (batch, seq - 1): the answer cross-entropy in every slot."""
    loss = F.cross_entropy(model(input_ids).float(), input_ids[:, -1], reduction="none")
    return loss.unsqueeze(1).expand(-1, input_ids.shape[1] - 1)


class Sequences(torch.utils.data.Dataset):
    """Rows of ``input_ids`` as devinterp reads them, fetched a batch at a time (a HuggingFace ``Dataset``
    took as long to hand out a batch as the model took to step on it)."""

    def __init__(self, rows: torch.Tensor):
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.rows[index]}

    def __getitems__(self, indices: list[int]) -> list[dict[str, torch.Tensor]]:
        return [{"input_ids": row} for row in self.rows[torch.as_tensor(indices)]]


def training_sequences(split: Split, n: int, seed: int = 0) -> Sequences:
    """``n`` sequences of the training distribution as devinterp's dataset: tokens, then the answer."""
    batch = TrainingSampler(split, n, seed).sample(n, torch.Generator().manual_seed(seed))
    return Sequences(torch.cat([batch.tokens, batch.labels.unsqueeze(1)], dim=1))


def sanity(trace: np.ndarray, per_chain: np.ndarray, init_loss: float, settings: LlcSettings) -> dict:
    """The checks of the module doc on one estimate: ``trace`` (chains, steps) of sampled losses."""
    finite = bool(np.isfinite(trace).all() and np.isfinite(per_chain).all())
    mean = float(np.mean(per_chain)) if finite else float("nan")
    checks = {"finite": finite, "flat": False, "chains_agree": False, "positive": finite and mean > 0}
    if finite:
        quarter = max(1, trace.shape[1] // 4)
        last, before = trace[:, -quarter:].mean(), trace[:, -2 * quarter:-quarter].mean()
        rise = max(last - init_loss, 1e-12)
        checks["flat"] = bool(abs(last - before) <= settings.flat_tolerance * rise)
        checks["chains_agree"] = bool(np.std(per_chain) <= settings.chains_tolerance * abs(mean))
    failed = [name for name, ok in checks.items() if not ok]
    return {**{f"check_{k}": v for k, v in checks.items()}, "healthy": not failed,
            "problems": ", ".join(failed)}


def estimate_llc(state: dict[str, torch.Tensor], config: RunConfig, dataset, settings: LlcSettings,
                 progress: bool = False, device: str = "cpu") -> dict:
    """The LLC of one set of weights of a compose-lens model (see :func:`sample_llc`)."""
    model = AnswerModel(state, config.model)
    masks = None if settings.component is None else component_masks(model, settings.component)
    return sample_llc(model, dataset, answer_loss, settings, progress, device, param_masks=masks)


def sample_llc(model: torch.nn.Module, dataset, loss_fn, settings: LlcSettings, progress: bool = False,
               device: str = "cpu", param_masks: dict | None = None) -> dict:
    """devinterp's SGLD estimate for any module and per-token loss ``loss_fn(model, input_ids)``, the chains
    moving the weights of ``param_masks`` (:func:`component_masks`; None: every parameter): the mean, spread
    and each chain's estimate, the loss trace (chains x steps), the loss at the weights themselves, and
    :func:`sanity`'s verdict."""
    llc = require_devinterp()
    from devinterp.slt import sampler as devinterp_sampler

    settings.check()
    # devinterp draws a bar per chain (kept on screen); ours are gone when done, and drawn only on a terminal
    def bars(*steps, **options):  # devinterp's trange(n, desc=...)
        return progress_lines.bar(range(*steps), wanted=progress, **options)

    with tempfile.TemporaryDirectory(prefix="compose-lens-llc-") as scratch, \
            mock.patch.object(devinterp_sampler, "trange", bars), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "Chain failed": caught below as a non-finite trace
        result = llc.llc(model, dataset, {}, lr=settings.epsilon, n_beta=settings.beta, loss_fn=loss_fn,
                         param_masks=param_masks,
                         localization=settings.gamma, num_chains=settings.chains, num_draws=settings.draws,
                         num_burnin_steps=settings.burnin, batch_size=settings.batch_size,
                         init_seed=settings.seed, device=device, output_path=Path(scratch) / "samples.zarr")
        trace = np.asarray(result["loss_trace"].values, dtype=float)
        per_chain = np.asarray(result["llc_per_chain"].values, dtype=float)
        init_loss = float(result["init_loss"].values)
    return {"llc_mean": float(per_chain.mean()), "llc_std": float(per_chain.std()),
            "llc_per_chain": per_chain.tolist(), "init_loss": init_loss, "trace": trace,
            **sanity(trace, per_chain, init_loss, settings)}


def llc_over_checkpoints(source: str | Path, split_file: str | Path | None = None,
                         settings: LlcSettings = LlcSettings(), steps: Sequence[int] | None = None,
                         stride: int = 1, include_final: bool = True, progress: bool = False,
                         device: str = "cpu") -> tuple[pd.DataFrame, pd.DataFrame]:
    """The LLC of every checkpoint of ``source`` (a run directory or a folder of the study's
    ``step_N.pth``; those of ``steps``, then every ``stride``-th) and of its final model (``final.pth`` or
    ``model.safetensors``), or of one model (anything :func:`compose_lens.training.subject.load_model`
    takes, e.g. ``paper``). Returns the table (one row per checkpoint: step, LLC mean and spread, each
    chain, the training loss, the sanity checks) and the loss traces (step, chain, SGLD step, loss).
    """
    settings.check()
    config, split, entries = _entries(source, split_file, steps, stride, include_final)
    dataset = training_sequences(split, settings.n_sequences, settings.seed)
    rows, traces = [], []
    for step, path, read in progress_lines.bar(entries, desc="llc", wanted=progress):
        found = estimate_llc(read(), config, dataset, settings, progress=False, device=device)
        rows.append({"step": step, "checkpoint": Path(path).name, "llc_mean": found["llc_mean"],
                     "llc_std": found["llc_std"],
                     **{f"llc_chain_{i}": v for i, v in enumerate(found["llc_per_chain"])},
                     "train_loss": found["init_loss"],
                     **{k: found[k] for k in found if k.startswith("check_") or k in ("healthy", "problems")}})
        for chain, losses in enumerate(found["trace"]):
            traces.append(pd.DataFrame({"step": step, "chain": chain, "sgld_step": np.arange(len(losses)),
                                        "loss": losses}))
    return pd.DataFrame(rows), pd.concat(traces, ignore_index=True)


def _entries(source, split_file, steps, stride, include_final):
    """The configuration, split and (step, path, reader) of each set of weights to estimate."""
    path = Path(str(source))
    is_run = path.is_dir() and ((path / runs.CHECKPOINTS_DIR).is_dir() or path.name == runs.CHECKPOINTS_DIR
                                or any(path.glob("step_*.pth")))
    if not is_run:  # one model: anything load_model takes ('paper', a model directory, a .pth, ...)
        loaded = load_model(source, split_file, bridge=False)
        results = runs.read_results(path) if path.is_dir() else None
        step = int((results or {}).get("steps", loaded.config.train.steps))
        state = tl.parameters(loaded.model) if isinstance(loaded.model, tl.Weights) else runs.state_dict(loaded.model)
        return loaded.config, loaded.split, [(step, loaded.source, lambda: state)]
    checkpoints, config, split = runs.find_checkpoints(path, split_file)
    chosen = runs.select_checkpoints(checkpoints, steps, stride)
    entries = [(c.step, c.path, lambda c=c: runs.read_state(c, config)) for c in chosen]
    final = _final_weights(path, config)
    if include_final and final is not None and not _is_a_checkpoint(final, chosen, config):
        entries.append(final)
    return config, split, entries


def _is_a_checkpoint(final, chosen, config: RunConfig) -> bool:
    """Whether the final model is one of the chosen checkpoints (the same step and weights), so it is
    estimated once; the same step with other weights is refused."""
    step, path, read = final
    same = [c for c in chosen if c.step == step]
    if not same:
        return False
    final_state, checkpoint_state = read(), runs.read_state(same[0], config)
    if final_state.keys() == checkpoint_state.keys() and all(
            torch.equal(final_state[k].float(), checkpoint_state[k].float()) for k in final_state):
        return True
    raise ComposeLensError(f"{path}: the final model and {same[0].path} are both step {step} but their weights "
                           f"differ; estimate one of them (--steps, or the model itself as the source)")


def _final_weights(source: Path, config: RunConfig):
    """(step, path, reader) of a run's final model (``final.pth`` or ``model.safetensors``), or None."""
    if (source / runs.STUDY_FINAL).is_file():
        path = source / runs.STUDY_FINAL
        return STUDY_FINAL_STEP, path, lambda: runs.read_pth(path, config)
    if (source / runs.WEIGHTS_FILE).is_file() and source.name != runs.CHECKPOINTS_DIR:
        path = source / runs.WEIGHTS_FILE
        results = runs.read_results(source) or {}
        return int(results.get("steps", config.train.steps)), path, lambda: runs.read_safetensors(path)
    return None


STUDY_FINAL_STEP = 40_000  # the study's final.pth: "the end of the run (40,000 steps)" (its README)


def run_phases(source: str | Path, phases_file: str | Path | None = None) -> tuple[dict | None, str]:
    """The phase onsets to mark beside the LLC, and where they came from: ``phases_file``, else the run's
    ``results/phases.json``, else its ``metrics.jsonl``; None (and why) where there is none of these."""
    source = Path(source)
    if phases_file is not None:
        doc = load_json(phases_file)
        if not isinstance(doc, dict) or not isinstance(doc.get("phases"), dict):
            raise ComposeLensError(f"{phases_file}: not a phases.json (no 'phases' entry); make one with "
                                   f"compose-lens dynamics RUN --out DIR")
        return doc["phases"], str(phases_file)
    own = source / "results" / runs.PHASES_FILE
    if own.is_file():
        return load_json(own)["phases"], str(own)
    if (source / runs.METRICS_FILE).is_file():
        return logged_phases(runs.read_metrics(source)), f"{source / runs.METRICS_FILE} (logged pools)"
    return None, ("no phases: pass --phases with a phases.json of `compose-lens dynamics`"
                  " (the study's checkpoints log no metrics)")


def phase_means(table: pd.DataFrame, phases: dict | None) -> pd.DataFrame:
    """Mean LLC of the checkpoints between consecutive phase onsets: does it move where a phase begins?"""
    if not phases:
        return pd.DataFrame()
    onsets = sorted((p["step"], name) for name, p in phases.items() if p.get("step") is not None)
    edges = [-math.inf] + [s for s, _ in onsets] + [math.inf]
    names = ["start"] + [n for _, n in onsets]
    rows = []
    for (lo, hi), after in zip(zip(edges, edges[1:]), names):
        inside = table[(table["step"] >= lo) & (table["step"] < hi)]
        rows.append({"from": after if after != "start" else "first checkpoint",
                     "first_step": int(inside["step"].min()) if len(inside) else None,
                     "last_step": int(inside["step"].max()) if len(inside) else None,
                     "checkpoints": len(inside), "llc_mean": float(inside["llc_mean"].mean()) if len(inside) else None,
                     "train_loss": float(inside["train_loss"].mean()) if len(inside) else None})
    return pd.DataFrame(rows)


def settings_dict(settings: LlcSettings) -> dict:
    return {**asdict(settings), "n_beta_used": settings.beta}

