"""Training: the recipe of SPEC section 5, resumable, with a run directory.

Cross-entropy at the last position over the p number classes, AdamW (lr 1e-3,
betas 0.9 / 0.999, weight decay 0.02, constant rate), batch 512 of fresh
sequences every step. Every ``eval_every`` steps the nine pool accuracies go to
``metrics.jsonl``; every ``checkpoint_every`` steps a checkpoint is written.

A run is a directory (its files are read and written by :mod:`compose_lens.runs`):
``config.json``, ``split.json``, ``metrics.jsonl``, ``checkpoints/step_NNNNNN/``,
``resume.safetensors``, the final ``model.safetensors`` and ``results.json``.
Every file is written to a temporary name and renamed, so an interruption never
leaves half a checkpoint. Batches are a pure function of (seed, step)
(:class:`~compose_lens.data.sampler.TrainingSampler`) and the optimizer state is saved
with the weights, so a resumed run ends with exactly the weights of an
uninterrupted one. The training forward is the fastest exact one
(:func:`compose_lens.model.fastpath.forward_kind`): the table forward for the paper
model, the last-layer-at-the-last-position forward for other architectures without
normalisation, the TransformerLens forward otherwise.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from compose_lens import runs
from compose_lens.config import ComposeLensError, RunConfig, load_json, write_json_atomic
from compose_lens.cores import ThreadGovernor, cpu_count
from compose_lens.data.sampler import TrainingSampler, make_pools
from compose_lens.data.split import Split
from compose_lens.evaluate import exhaustive_accuracies, pool_accuracies
from compose_lens.model import fastpath, tl, weights
from compose_lens.provenance import provenance


def use_fast_path(config: RunConfig) -> bool:
    mode = config.train.fast_path
    if mode == "on" and not weights.is_paper_architecture(config.model):
        raise ComposeLensError("fast_path=on, but the fast path does not cover this model "
                               "(it needs 2 layers, 1 head, an MLP in layer 1 only, no norm, "
                               "frozen biases); use fast_path=auto")
    return mode == "on" or (mode == "auto" and weights.is_paper_architecture(config.model))


COMPILE_MIN_STEPS = 5_000


def use_compile(config: RunConfig) -> bool:
    """Whether to ``torch.compile`` the training forward (and so its backward).

    Inductor fuses the fast path's small kernels into a few loops: ~1.3x per step on
    CPU, for a one-off compile of ~25-50 s on 2 cores (~3 s once its cache in
    /tmp/torchinductor_$USER is warm). ``auto`` compiles runs of at least
    ``COMPILE_MIN_STEPS`` steps, where the compile pays for itself, and never the
    short runs of the tests. The TransformerLens forward (hooks) is never compiled.
    """
    mode = config.train.compile
    if mode == "auto" and not any(shutil.which(cxx) for cxx in ("g++", "c++", "clang++")):
        return False  # inductor writes C++ on CPU: no compiler, no compiling
    return mode == "on" or (mode == "auto" and config.train.steps >= COMPILE_MIN_STEPS)


def autocast_context(config: RunConfig):
    device_type = "cuda" if config.train.device.startswith("cuda") else "cpu"
    precision = config.train.precision
    if precision == "bf16" or (precision == "auto" and device_type == "cuda"):
        return torch.autocast(device_type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


class Trainer:
    """One training run in one directory. ``run()`` trains to the end or raises."""

    def __init__(self, config: RunConfig, run_dir: str | Path, split: Split | None = None,
                 resume: bool = False, overwrite: bool = False, progress: bool = True):
        self.config = config
        self.run_dir = Path(run_dir)
        self.progress = progress
        self._prepare_directory(resume, overwrite)
        self.split = split or Split.from_task(config.task)
        t = config.train
        # threads: as configured, else the cores nobody else uses (compose_lens.cores), asked
        # again at every evaluation; a count the caller set already (sweep workers) is kept
        self.governor = ThreadGovernor() if not t.threads and torch.get_num_threads() == cpu_count() else None
        torch.set_num_threads(t.threads or torch.get_num_threads())
        self.device = torch.device(t.device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ComposeLensError("device=cuda, but torch sees no GPU here; use --set device=cpu")
        self.sampler = TrainingSampler(self.split, t.batch_size, t.seed)
        self.pools = make_pools(self.split, t.pool_size, t.seed)
        self.model = tl.boot(config.model, str(self.device))
        self.params = tl.parameters(self.model)
        self.trainable = tl.trainable_parameters(self.model)
        # the fused kernel does the same update in one pass (about 1 ms of a 12 ms step on CPU)
        self.optimizer = torch.optim.AdamW(self.trainable, lr=t.lr, betas=(t.beta1, t.beta2),
                                           weight_decay=t.weight_decay, fused=True)
        self.fast = use_fast_path(config)
        self.forward_kind = fastpath.forward_kind(config.model, "on" if self.fast else t.fast_path)
        self.forward = fastpath.answer_forward(self.model, config.model, self.forward_kind)
        self.compiled = use_compile(config) and self.forward_kind != "transformerlens"
        if self.compiled:
            self.forward = torch.compile(self.forward, dynamic=False)
        self.provenance = provenance(config, t.seed)  # read now: the tree may change while the run trains
        self.step = 0
        self.elapsed = 0.0
        if self.governor is not None:
            torch.set_num_threads(self.governor.first_threads())
        if self.resuming:
            self._load_resume_state()
        else:
            write_json_atomic(self.run_dir / runs.CONFIG_FILE, config.to_dict())
            self.split.save(self.run_dir / runs.SPLIT_FILE)

    # -- the run directory ----------------------------------------------------------

    def _prepare_directory(self, resume: bool, overwrite: bool) -> None:
        d = self.run_dir
        exists = d.exists() and any(d.iterdir())
        self.resuming = False
        if exists and resume:
            if not (d / runs.RESUME_FILE).exists():
                if (d / runs.CONFIG_FILE).exists() and not (d / runs.CHECKPOINTS_DIR).exists():
                    # stopped before the first checkpoint: start again in place, forgetting
                    # the evaluations logged by the first attempt
                    runs.truncate_metrics(d, None)
                else:
                    raise ComposeLensError(f"{d}: nothing to resume from (no {runs.RESUME_FILE}); "
                                           f"start a new run with --overwrite")
            else:
                saved = RunConfig.from_dict(load_json(d / runs.CONFIG_FILE)).to_dict()  # new keys at their defaults
                if saved != self.config.to_dict():
                    raise ComposeLensError(f"{d}: the run was started with another configuration; "
                                           f"resume without --config/--set, or use a new --out")
                self.resuming = True
        elif exists and not overwrite:
            raise ComposeLensError(f"{d} already holds a run; pass --resume to continue it, "
                                   f"--overwrite to replace it, or choose another --out")
        elif exists and overwrite:
            shutil.rmtree(d)
        d.mkdir(parents=True, exist_ok=True)

    def _load_resume_state(self) -> None:
        self.step, self.elapsed = runs.load_resume_state(self.run_dir, self.model, self.optimizer, self.trainable)
        runs.truncate_metrics(self.run_dir, self.step)  # evaluations after the checkpoint are logged again

    # -- training -------------------------------------------------------------------

    def loss_on(self, tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        with autocast_context(self.config):
            logits = self.forward(tokens)
        return F.cross_entropy(logits.float(), labels)

    def train_step(self) -> float:
        batch = self.sampler.batch(self.step)
        loss = self.loss_on(batch.tokens.to(self.device), batch.labels.to(self.device))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.step += 1
        return loss.item()

    def evaluate_pools(self) -> dict[str, float]:
        if self.governor is not None:
            torch.set_num_threads(self.governor.threads(torch.get_num_threads()))
        # the compiled forward evaluates too (1.5x; the same argmax as eager on every pool row)
        return pool_accuracies(self.model, self.config, self.pools, self.forward if self.compiled else None)

    def save_checkpoint(self) -> None:
        runs.write_checkpoint(self.model, self.config, self.run_dir, self.step)
        runs.save_resume_state(self.run_dir, self.model, self.optimizer, self.trainable, self.step, self.elapsed)

    def run(self, on_step: Callable[["Trainer"], None] | None = None) -> dict:
        """Train to ``steps``; ``on_step`` is called after every step (tests use it to interrupt)."""
        t = self.config.train
        bar = tqdm(total=t.steps, initial=self.step, disable=not self.progress, unit="step",
                   desc="train", dynamic_ncols=True)
        last = {}
        started = time.perf_counter() - self.elapsed
        try:
            while self.step < t.steps:
                loss = self.train_step()
                bar.update(1)
                done = self.step == t.steps
                if self.step % t.eval_every == 0 or done:
                    self.elapsed = time.perf_counter() - started
                    last = {"step": self.step, "train_loss": loss, **self.evaluate_pools(),
                            "elapsed_s": round(self.elapsed, 3)}
                    runs.append_metrics(self.run_dir, last)
                    bar.set_postfix(loss=f"{loss:.3f}", acc0=f"{last['0var_add_restricted']:.2f}",
                                    acc2=f"{last['2var_add_restricted']:.2f}",
                                    r2=f"{last['2var_var_restricted_1']:.2f}")
                if self.step % t.checkpoint_every == 0 or done:
                    self.elapsed = time.perf_counter() - started
                    self.save_checkpoint()
                if on_step is not None:
                    on_step(self)
        finally:
            bar.close()
        self.elapsed = time.perf_counter() - started
        return self.finish(last)

    def finish(self, last_pools: dict) -> dict:
        runs.save_model(self.model, self.config, self.run_dir, extra={"step": str(self.step)})
        results = {
            "steps": self.step,
            "train_wall_time_s": round(self.elapsed, 2),
            "fast_path": self.fast,
            "forward": self.forward_kind,
            "compiled": self.compiled,
            "threads": torch.get_num_threads(),
            "pools": {k: v for k, v in last_pools.items() if k not in ("step", "train_loss", "elapsed_s")},
            "exhaustive": exhaustive_accuracies(self.model, self.config, self.split),
            **self.provenance,
        }
        write_json_atomic(self.run_dir / runs.RESULTS_FILE, results)
        return results


def train(config: RunConfig, run_dir: str | Path, **kwargs) -> dict:
    """Train one run to the end; see :class:`Trainer` for the keyword arguments."""
    progress = kwargs.pop("progress", True)
    split = kwargs.pop("split", None)
    trainer = Trainer(config, run_dir, split=split, progress=progress, **kwargs)
    return trainer.run()
