"""Training: the recipe of SPEC section 5, resumable, with a run directory.

Cross-entropy at the last position over the p number classes, AdamW (lr 1e-3, betas 0.9 / 0.999,
weight decay 0.02, constant rate), batch 512 of fresh sequences every step. Every ``eval_every`` steps
the nine pool accuracies go to ``metrics.jsonl``; every ``checkpoint_every`` steps a checkpoint is
written. The run directory (:mod:`compose_lens.training.runs`) is written file by file to temporary
names and renamed, so an interruption never leaves half a checkpoint. Batches are a pure function of
(seed, step) (:class:`~compose_lens.data.sampler.TrainingSampler`) and the optimizer state is saved with
the weights, so a resumed run ends with exactly the weights of an uninterrupted one. The training
forward is the fastest exact one (:attr:`compose_lens.model.forward.Forward.kind`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from compose_lens.core import capabilities, progress, tracking
from compose_lens.training import outcome, runs
from compose_lens.data import safety
from compose_lens.data.safety import check_training_memory
from compose_lens.core.config import RunConfig
from compose_lens.core.errors import ComposeLensError
from compose_lens.core.files import write_json_atomic
from compose_lens.core.cores import ThreadGovernor, cpu_count
from compose_lens.data.sampler import TrainingSampler, absent_pools, make_pools
from compose_lens.data.split import Split
from compose_lens.training.evaluate import exhaustive_accuracies, headline_holds, pool_accuracies
from compose_lens.model.forward import Forward
from compose_lens.model import tl
from compose_lens.core.provenance import provenance
from compose_lens.training.subject import Subject, check_device


def use_fast_path(config: RunConfig) -> bool:
    """Whether the run trains on the table forward (``fast_path=on`` where it declines the model:
    a :class:`ComposeLensError` naming why, :func:`compose_lens.core.capabilities.answer_forward`)."""
    return capabilities.answer_forward(config.model, config.train.fast_path) == "tables"


COMPILE_MIN_STEPS = 5_000


def use_compile(config: RunConfig) -> bool:
    """Whether to ``torch.compile`` the training forward (and so its backward): ~1.3x per step on CPU, for
    a one-off compile of ~25-50 s on 2 cores (~3 s with a warm inductor cache), so ``auto`` compiles runs
    of at least ``COMPILE_MIN_STEPS`` steps, never the tests' short runs."""
    mode = config.train.compile
    if mode == "auto" and not any(shutil.which(cxx) for cxx in ("g++", "c++", "clang++")):
        return False  # inductor writes C++ on CPU: no compiler, no compiling
    return mode == "on" or (mode == "auto" and config.train.steps >= COMPILE_MIN_STEPS)


def check_compile(config: RunConfig) -> None:
    """Refuse compile=on where nothing would be compiled: a run on the TransformerLens forward
    (``fast_path=off``, or a model only TransformerLens runs) would record the setting and ignore it."""
    t = config.train
    if t.compile == "on" and t.fast_path != "on" and capabilities.answer_forward(config.model, t.fast_path) \
            == "transformerlens":
        raise ComposeLensError(f"compile=on with fast_path={t.fast_path}: this run trains on the TransformerLens "
                               f"forward, which is never compiled; drop compile=on"
                               + (" or use fast_path=auto" if t.fast_path == "off" else ""))


def autocast_context(config: RunConfig):
    device_type = "cuda" if config.train.device.startswith("cuda") else "cpu"
    precision = config.train.precision
    if precision == "bf16" or (precision == "auto" and device_type == "cuda"):
        return torch.autocast(device_type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


CUBLAS_WORKSPACE = ":4096:8"  # the fixed cuBLAS workspace CUDA's reproducibility notes ask for


def make_deterministic() -> None:
    """``deterministic=true``: make this process's training repeat bit for bit where torch can, to its end.

    On CUDA, kernels that accumulate with atomics and cuBLAS's reduction order (it depends on its
    workspace) vary between runs of one seed: torch's deterministic algorithms are asked for (an op
    without one warns rather than stops the run) and ``CUBLAS_WORKSPACE_CONFIG`` is set unless the
    environment sets it (cuBLAS reads it when it starts). On CPU training is deterministic already.
    """
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True


def learning_rate(t) -> float:
    """The configured rate, or three times it under ``remedy=lr_x3``: the stall remedy. At the
    study's setting a larger step carries the run past the plateau on which layer-2 routing
    otherwise does not form within the budget (experiments/results/stall_rate)."""
    return t.lr * 3 if t.remedy == "lr_x3" else t.lr


class Trainer:
    """One training run in one directory. ``run()`` trains to the end or raises.

    Everything is validated before the directory is touched: the memory, the device, the fast path, what
    the directory holds and what ``resume`` / ``overwrite`` allow
    (:func:`compose_lens.training.runs.plan_directory`). Only then is an old run replaced and the
    directory locked until :meth:`run` returns or raises, or the process ends. ``resume`` continues
    from ``resume.safetensors`` on the run's own ``split.json``; a run killed before its first resume
    state was written starts again from step 0 in place (``self.restarted``), which gives the same
    weights because training is deterministic.
    """

    def __init__(self, config: RunConfig, run_dir: str | Path, split: Split | None = None,
                 resume: bool = False, overwrite: bool = False, progress: bool = True):
        self.config, self.run_dir, self.progress = config, Path(run_dir), progress
        t = config.train
        check_training_memory(config)
        check_device(t.device)
        if t.deterministic:
            make_deterministic()
        tracking.check_available(t.log_to)  # a missing tracker package: one line, nothing touched
        self.fast = use_fast_path(config)
        check_compile(config)
        self.mode = runs.plan_directory(self.run_dir, config, resume, overwrite)
        if self.resuming:
            runs.check_resume_split(self.run_dir, config, split)
        if split is None and self.mode in ("resume", "restart") and (self.run_dir / runs.SPLIT_FILE).exists():
            split = Split.load(self.run_dir / runs.SPLIT_FILE, config.task)
        self.split = split or Split.from_task(config.task)
        absent = absent_pools(self.split)
        if absent:  # a model trained on every pair and slot is analysed (split "none"), not trained here
            raise ComposeLensError(f"the split has no {', '.join(absent)} pool ({next(iter(absent.values()))}); "
                                   f"training tracks every pool: give a split that holds out pairs and forbids operand slots")
        made = not self.run_dir.exists()
        self.lock = runs.claim_directory(self.run_dir, self.mode)
        try:
            self._build()
        except BaseException:
            self.close()
            if made:  # a run that never started (its tracker failed) is not left half-made
                shutil.rmtree(self.run_dir, ignore_errors=True)
            raise

    def _build(self) -> None:
        t = self.config.train
        # threads: as configured, else the cores nobody else uses when the run starts
        # (compose_lens.core.cores), kept for the whole run so it stays repeatable; a count the
        # caller set already (sweep workers) is kept
        self.governor = ThreadGovernor() if not t.threads and torch.get_num_threads() == cpu_count() else None
        torch.set_num_threads(t.threads or torch.get_num_threads())
        self.device = torch.device(t.device)
        self.sampler = TrainingSampler(self.split, t.batch_size, t.seed)
        self.pools = make_pools(self.split, t.pool_size, t.seed)
        self.model = tl.boot(self.config.model, str(self.device))
        # the model being trained, as the analyses take it: Subject.once serves a stop check's exhaustive sets to finish
        self.subject = Subject(self.model, self.config, self.split, str(self.run_dir))
        self.params = tl.parameters(self.model)
        self.trainable = tl.trainable_parameters(self.model)
        # the fused kernel does the same update in one pass (about 1 ms of a 12 ms step on CPU)
        self.optimizer = torch.optim.AdamW(self.trainable, lr=learning_rate(t), betas=(t.beta1, t.beta2),
                                           weight_decay=t.weight_decay, fused=True)
        self.model_forward = Forward(self.model, self.config.model,
                                     True if self.fast else None if t.fast_path == "auto" else False)
        self.forward_kind, self.forward = self.model_forward.kind, self.model_forward.answer_forward()
        self.compiled = use_compile(self.config) and self.forward_kind != "transformerlens"
        self.stacked = 1  # runs trained together in this process (compose_lens.training.batched sets it)
        if self.compiled:
            self.forward = torch.compile(self.forward, dynamic=False)
        self.tracker = tracking.metrics_logger(t.log_to, self.run_dir, self.config.to_dict())
        self.step, self.saved_step, self.elapsed = 0, 0, 0.0
        if self.governor is not None:
            torch.set_num_threads(self.governor.first_threads())
        # read now (the tree may change while the run trains), with the threads the run keeps
        self.provenance = provenance(self.config, t.seed)
        if self.resuming:
            self.step, self.elapsed = runs.load_resume_state(self.run_dir, self.model, self.optimizer, self.trainable)
            self.saved_step = self.step
            runs.truncate_metrics(self.run_dir, self.step)  # evaluations after the checkpoint are logged again
            self._extend()
        else:
            write_json_atomic(self.run_dir / runs.CONFIG_FILE, self.config.to_dict())
            self.split.save(self.run_dir / runs.SPLIT_FILE)

    @property
    def resuming(self) -> bool:
        return self.mode == "resume"

    @property
    def restarted(self) -> bool:
        """True when ``resume`` found no resume state and the run started again from step 0."""
        return self.mode == "restart"

    def close(self) -> None:
        """Release the directory lock (also done when :meth:`run` ends, or the process)."""
        lock = getattr(self, "lock", None)
        if lock is not None:
            lock.release()

    def _extend(self) -> None:
        """A resumed run given a larger ``steps`` (:func:`compose_lens.training.runs.extends`) trains on to it:
        its ``config.json`` takes the new budget, and the ``results.json`` of the budget it finished
        goes beside that step's checkpoint (``checkpoints/step_N/results.json``) until the run ends."""
        saved = RunConfig.from_dict(json.loads((self.run_dir / runs.CONFIG_FILE).read_text()))
        if saved.train.steps == self.config.train.steps:
            return
        finished = self.run_dir / runs.RESULTS_FILE
        if finished.exists():
            step = json.loads(finished.read_text())["steps"]
            kept = self.run_dir / runs.CHECKPOINTS_DIR / runs.checkpoint_name(step) / runs.RESULTS_FILE
            os.replace(finished, kept) if kept.parent.is_dir() else finished.unlink()
        write_json_atomic(self.run_dir / runs.CONFIG_FILE, self.config.to_dict())

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
        # the compiled forward evaluates too (1.5x; the same argmax as eager on every pool row)
        return pool_accuracies(self.model, self.config, self.pools, self.forward if self.compiled else None)

    def save_checkpoint(self) -> None:
        try:
            runs.write_checkpoint(self.model, self.config, self.run_dir, self.step)
            runs.save_resume_state(self.run_dir, self.model, self.optimizer, self.trainable, self.step,
                                   self.elapsed)
        except OSError as exc:
            kept = (f"the checkpoint of step {self.saved_step} is kept" if self.saved_step
                    else "no checkpoint was written yet")
            raise ComposeLensError(safety.os_error_line(
                exc, f"write the checkpoint of step {self.step}",
                f"{kept}: free space (or fix permissions) and continue with --resume")) from None
        self.saved_step = self.step

    def run(self, on_step: Callable[["Trainer"], None] | None = None) -> dict:
        """Train to ``steps``; ``on_step`` is called after every step (tests use it to interrupt)."""
        t = self.config.train
        bar = progress.bar(total=t.steps, initial=self.step, wanted=self.progress, unit="step", desc="train")
        last = {}
        started = time.perf_counter() - self.elapsed
        try:
            while self.step < t.steps:
                last, ended = self.after_step(self.train_step(), started, last, bar)
                if on_step is not None:
                    on_step(self)
                if ended:
                    break
            self.elapsed = time.perf_counter() - started
            return self.finish(last)
        finally:
            bar.close()
            self.tracker.close()
            self.close()

    def after_step(self, loss: float, started: float, last: dict, bar, batched: bool = False) -> tuple[dict, bool]:
        """What follows a step: the divergence check, the evaluation every ``eval_every`` steps (logged, tracked
        and shown on ``bar``), the checkpoint; returns the last evaluation and whether the run has ended (its
        ``steps``, or ``stop_at``). ``batched``: a run of :class:`~compose_lens.training.batched.BatchedTrainer`,
        which names the run in the refusal, tracks nothing and leaves its shared bar's postfix alone."""
        t, where = self.config.train, f"{self.run_dir}: " if batched else ""
        if not math.isfinite(loss):
            raise ComposeLensError(
                f"{where}training diverged at step {self.step} (loss {loss}); lower lr. The run keeps "
                f"its checkpoint of step {self.saved_step}" if self.saved_step else
                f"{where}training diverged at step {self.step} (loss {loss}); lower lr")
        if not batched:
            bar.update(1)
        done = self.step == t.steps
        if self.step % t.eval_every == 0 or done:
            self.elapsed = time.perf_counter() - started
            last = {"step": self.step, "train_loss": loss, **self.evaluate_pools(), "elapsed_s": round(self.elapsed, 3)}
            runs.append_metrics(self.run_dir, last)
            if not batched:
                self.tracker.log(last, learning_rate(t))
            self._watch_for_stall(last, bar)
            if not batched:
                bar.set_postfix(loss=f"{loss:.3f}", acc0=f"{last['0var_add_restricted']:.2f}",
                                acc2=f"{last['2var_add_restricted']:.2f}", r2=f"{last['2var_var_restricted_1']:.2f}")
        stop = self.step % t.eval_every == 0 and self._decided(last)
        if self.step % t.checkpoint_every == 0 or done or stop:
            self.elapsed = time.perf_counter() - started
            self.save_checkpoint()
        return last, done or stop

    def _watch_for_stall(self, logged: dict, bar) -> None:
        """Keep the logged pools, and say once, while training, that the run looks stalled
        (:func:`compose_lens.training.outcome.stall_warning`) or that its loss diverged
        (:func:`compose_lens.training.outcome.diverged`)."""
        if not hasattr(self, "_logged"):
            self._logged = runs.read_metrics(self.run_dir)[:-1]  # a resumed run's earlier evaluations
        self._logged.append(logged)
        spike = None if getattr(self, "divergence_warning", None) else outcome.diverged(self._logged)
        if spike is not None:  # said once
            self.divergence_warning = outcome.divergence_line(spike, self.step)
            bar.write(f"warning: {self.divergence_warning}", file=sys.stderr)
        if getattr(self, "divergence_warning", None) and self.config.train.stop_at == "decided":
            self._diverged_for = outcome.diverged_for(self._logged)  # read by _decided
        warned = getattr(self, "stall_warning", None)
        if self.config.train.stop_at not in ("stalled", "decided") and (warned or self.step < outcome.WARN_AFTER):
            return  # nothing below would use the outcome now
        table = outcome.calibration(self.config.task.f, self.config.task.r, self.config.train.steps)
        self._found = outcome.outcome(self._logged, table=table)  # read again by _decided
        if warned:
            return
        line = outcome.stall_warning(self._logged, table, found=self._found)
        if line:
            self.stall_warning = line
            bar.write(f"warning: {line}; see README 'When a run stalls'", file=sys.stderr)

    _checked_at = -10**9  # the step of the last exhaustive check (at most one every 1,000 steps)

    def _decided(self, pools: dict) -> bool:
        """Whether ``stop_at`` ends the run now: ``stalled`` / ``decided`` once the stall detector is
        certain, ``decided`` once the loss has read diverged at ``DIVERGED_STOP_AFTER`` evaluations in a
        row, ``generalised`` / ``decided`` once the exhaustive headline holds (checked at most every 1,000
        steps, once the held-out 0-var and the three unseen 2-var pools pass it)."""
        stop_at = self.config.train.stop_at
        if stop_at in ("stalled", "decided") and getattr(self, "_found", {}).get("outcome") == "stalled":
            return True
        if stop_at == "decided" and getattr(self, "_diverged_for", 0) >= outcome.DIVERGED_STOP_AFTER:
            return True
        if stop_at not in ("generalised", "decided") or self.step - self._checked_at < 1000:
            return False
        unseen = ("0var_add_restricted", "2var_add_restricted", "2var_var_restricted_1", "2var_var_restricted_2")
        if min(pools.get(k, 0.0) for k in unseen) < outcome.GENERALISED:
            return False
        self._checked_at = self.step
        return headline_holds(exhaustive_accuracies(self.subject), outcome.GENERALISED)

    def finish(self, last_pools: dict) -> dict:
        runs.save_model(self.model, self.config, self.run_dir, extra={"step": str(self.step)})
        results = {
            "steps": self.step, "train_wall_time_s": round(self.elapsed, 2), "fast_path": self.fast,
            "forward": self.forward_kind, "compiled": self.compiled, "stacked": self.stacked,
            "threads": torch.get_num_threads(),
            "pools": {k: v for k, v in last_pools.items() if k not in ("step", "train_loss", "elapsed_s")},
            "exhaustive": exhaustive_accuracies(self.subject),
            **self.provenance,
        }
        results["outcome"] = outcome.outcome(
            runs.read_metrics(self.run_dir), results["exhaustive"], finished=True,
            table=outcome.calibration(self.config.task.f, self.config.task.r, self.config.train.steps))
        write_json_atomic(self.run_dir / runs.RESULTS_FILE, results)
        return results


def train(config: RunConfig, run_dir: str | Path, **kwargs) -> dict:
    """Train one run to the end; see :class:`Trainer` for the keyword arguments."""
    return Trainer(config, run_dir, **kwargs).run()
