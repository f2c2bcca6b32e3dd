"""K training runs in one process: stacked weights, one mapped forward, one AdamW.

A sweep trains many copies of one small architecture that differ only in their seeds
and task settings (f, r, ...). :class:`BatchedTrainer` trains K such runs together:

* **Each run is an ordinary** :class:`~compose_lens.training.train.Trainer` **that never steps.**
  It checks and locks its directory, loads or writes ``config.json`` / ``split.json``,
  boots its own initial weights (``model.init_seed``), owns its data stream
  (``TrainingSampler(split, batch_size, train.seed)``) and pools, loads its resume
  state, and writes every file of its run directory through the same calls a
  ``Trainer`` makes (:func:`compose_lens.training.runs.append_metrics`,
  :meth:`~compose_lens.training.train.Trainer.save_checkpoint`,
  :meth:`~compose_lens.training.train.Trainer.finish`). So a batched run directory is a run
  directory: every tool reads it, and ``Trainer(..., resume=True)`` continues it alone.
* **The training step is batched.** The K runs' parameter dicts are stacked along a
  new leading axis and the fast forward
  (:func:`compose_lens.model.fastpath.last_position_logits`, a pure function of a
  parameter dict) is mapped over the stack and the K token batches with
  ``torch.func.vmap``. vmap handles every gather of the table forward (the flat
  index, the ``F.embedding`` row gathers, ``gather``, ``scatter_add``), so no
  hand-written batched products are needed; the forward's one in-place write (the
  last-position one-hot) was made out of place for it, with the same 0 / 1 entries,
  so the unbatched forward did not move by a bit. The last-layer-only forward
  (:mod:`compose_lens.model.lastpos`, other architectures without normalisation) maps
  the same way; the TransformerLens forward (a module with hooks) does not, and is
  refused. The cross-entropy is taken per run outside vmap, exactly as
  ``Trainer.loss_on`` takes it (under vmap its mean rounds differently), and the K
  losses are summed: the derivative of a sum by each term is exactly 1, so each run
  gets its own gradient.
* **The stack is made inside the graph, from the runs' own tensors**, every step
  (``torch.stack``: a copy of the weights, small beside the step). The
  backward of the stack hands each run's tensors their own slice of the gradient.
* **One AdamW over all K runs' tensors**, ``fused=True`` as in the Trainer, sharing
  each run's optimizer-state dicts (so what ``save_resume_state`` writes is each
  run's own state, with no copying). AdamW is elementwise (decoupled weight decay
  ``p *= 1 - lr wd``, the two moments, the bias corrections ``1 - beta^t`` from a
  step count each tensor keeps), so one optimizer over many tensors is K separate
  ones. It is *not* run over stacked (K, ...) tensors: measured on this project's CPU
  (AVX-512), the fused kernel on a stacked tensor differs in the last bit from the
  same kernel on the K slices, because which elements fall in its vectorised body and
  which in its scalar tail depends on the tensor's length (they agree under
  ``ATEN_CPU_CAPABILITY=default``). The foreach and for-loop AdamW give the same bits
  stacked or not, but differ from the Trainer's fused kernel; the fused kernel over
  the runs' own tensors is the one that equals the Trainer exactly.

**How close to K separate Trainers.** Everything but the mapped forward/backward is
the Trainer's own arithmetic on the same tensors. vmap turns each matrix product
into a batched one (``bmm``), which a BLAS may sum in another order: on this
project's CPU every gradient of one paper-size step came out bit-for-bit, and at the
tests' tiny size (d_vocab_out 7) all but the unembedding's, which differs by one
rounding; after 100 tiny steps the weights differ by < 5e-7 and the losses by a few
rounds, the accuracies not at all (tests/integration/test_batched.py holds the
tolerance). Two batched runs of the same K runs are bit-for-bit the same.

**Runs at different steps.** Every step trains the runs that are furthest behind, as
one stack. Runs resumed from different checkpoints (a kill while the K resume states
were being written) therefore catch up first and are then stacked together; a run
that ends (its ``steps``, or ``stop_at``) leaves the stack. As the stack is made from
the runs' own tensors every step, changing who is in it costs nothing and changes
nothing (a smaller stack may round its batched products differently, as above).

**What must agree.** The model configuration (but ``init_seed``), and the training
settings that shape the step: ``batch_size``, ``lr``, ``remedy``, betas,
``weight_decay``, ``device``, ``precision``, ``threads``, ``fast_path`` and the
sequence length. Seeds, the task's f, r, split seed, ``steps``, ``eval_every``,
``checkpoint_every``, ``pool_size`` and ``stop_at`` may differ.

**Not the same as a Trainer:** training is never compiled (``compile=on`` is refused;
``compile=auto`` trains eagerly and ``results.json`` says ``compiled: false``), and
``elapsed_s`` / ``train_wall_time_s`` are the wall time of the batched process, which
all its runs share. Pools and the exhaustive sets are evaluated one run at a time by
the unbatched forward, as a Trainer evaluates them.

>>> from compose_lens.core.config import ModelConfig, RunConfig, TaskConfig
>>> task = TaskConfig(modulus=7, n_vars=6)
>>> a = RunConfig(task=task, model=ModelConfig.for_task(task, d_model=16, d_head=16, d_mlp=32))
>>> check_compatible([a, a.with_overrides(["train.seed=1", "model.init_seed=1", "f=0.5"])])
>>> check_compatible([a, a.with_overrides(["lr=0.01"])])
Traceback (most recent call last):
...
compose_lens.core.errors.ComposeLensError: runs trained together must share train.lr (run 0: 0.001, run 1: 0.01)
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch.func import vmap
from compose_lens.core import capabilities, cores, progress
from compose_lens.data import safety
from compose_lens.core.config import RunConfig
from compose_lens.core.errors import ComposeLensError
from compose_lens.data.split import Split
from compose_lens.model.forward import ANSWERS
from compose_lens.training.train import Trainer, autocast_context, learning_rate, use_fast_path

# Training settings every run of one batched process must share (see the module doc).
SHARED_TRAIN = ("batch_size", "lr", "remedy", "beta1", "beta2", "weight_decay", "device", "precision",
                "threads", "fast_path", "deterministic")


def check_compatible(configs: Sequence[RunConfig]) -> None:
    """Refuse, in one line, runs that cannot share one stacked model and one optimizer."""
    if not configs:
        raise ComposeLensError("batched training needs at least one run")
    first = configs[0]
    model0 = {**first.model.to_dict(), "init_seed": 0}
    for i, config in enumerate(configs[1:], 1):
        if {**config.model.to_dict(), "init_seed": 0} != model0:
            raise ComposeLensError(f"runs trained together must have the same model (run 0 and run {i} "
                                   f"differ beyond model.init_seed)")
        for name in SHARED_TRAIN:
            a, b = getattr(first.train, name), getattr(config.train, name)
            if a != b:
                raise ComposeLensError(f"runs trained together must share train.{name} "
                                       f"(run 0: {a}, run {i}: {b})")
        if config.task.seq_len != first.task.seq_len:
            raise ComposeLensError(f"runs trained together must share task.seq_len (run 0: "
                                   f"{first.task.seq_len}, run {i}: {config.task.seq_len})")
    kind = capabilities.answer_forward(first.model, "on" if use_fast_path(first) else first.train.fast_path)
    if kind not in ANSWERS:
        raise ComposeLensError(f"batched training maps the fast forwards over the runs; this model takes "
                               f"the {kind} forward (set fast_path=auto, or train the runs one by one)")
    for config in configs:
        if config.train.compile == "on":
            raise ComposeLensError("compile=on: batched training is not compiled; use compile=off "
                                   "(or train the runs one by one)")


def check_memory(configs: Sequence[RunConfig]) -> None:
    """The K runs' training estimates together (:func:`compose_lens.data.safety.training_estimate`)."""
    parts: dict[str, int] = {}
    for config in configs:
        for name, size in safety.training_estimate(config).items():
            parts[name] = parts.get(name, 0) + size
    safety.require_memory(parts, f"{len(configs)} runs trained together",
                          "train fewer runs per process, or lower batch_size / pool_size")


class BatchedTrainer:
    """K runs, each in its own directory, trained in this process (see the module doc).

    ``configs``, ``run_dirs`` and ``splits`` (None: each run's own, as for a
    :class:`~compose_lens.training.train.Trainer`) are parallel lists; ``resume`` and
    ``overwrite`` apply to every run as they do to a Trainer. ``run()`` returns the
    K ``results.json`` documents in order.
    """

    def __init__(self, configs: Sequence[RunConfig], run_dirs: Sequence[str | Path],
                 splits: Sequence[Split | None] | None = None, resume: bool = False, overwrite: bool = False,
                 progress: bool = True):
        configs = list(configs)
        run_dirs = [Path(d) for d in run_dirs]
        splits = list(splits) if splits is not None else [None] * len(configs)
        if not (len(configs) == len(run_dirs) == len(splits)):
            raise ComposeLensError("batched training: give one run directory (and split) per configuration")
        if len({d.resolve() for d in run_dirs}) != len(run_dirs):
            raise ComposeLensError("batched training: two runs were given the same directory")
        check_compatible(configs)
        check_memory(configs)
        self.configs, self.run_dirs, self.progress = configs, run_dirs, progress
        self.runs: list[Trainer] = []
        try:
            for config, run_dir, split in zip(configs, run_dirs, splits):
                self.runs.append(Trainer(config, run_dir, split=split, resume=resume, overwrite=overwrite,
                                         progress=False))
            for run in self.runs:  # evaluations by the eager forward, as the batched step is eager
                run.compiled, run.stacked, run.forward = False, len(configs), run.model_forward.answer_forward()
        except BaseException:
            self.close()
            raise
        model_cfg, forward = configs[0].model, ANSWERS[self.runs[0].forward_kind]
        self.mapped = vmap(lambda params, tokens: forward(params, model_cfg, tokens))
        first = self.runs[0]
        trainable = {id(p) for p in first.trainable}
        self.names = [name for name, value in first.params.items() if id(value) in trainable]
        self.frozen_names = [name for name in first.params if name not in self.names]
        # One AdamW over every run's own tensors, sharing each run's own state dicts (so the run's
        # optimizer, which save_resume_state reads, always holds it): the Trainer's fused kernel
        t = first.config.train
        self.optimizer = torch.optim.AdamW([p for run in self.runs for p in run.trainable], lr=learning_rate(t),
                                           betas=(t.beta1, t.beta2), weight_decay=t.weight_decay, fused=True)
        for run in self.runs:
            for p in run.trainable:
                self.optimizer.state[p] = run.optimizer.state[p]
        self.group: list[int] = []  # the runs the next step trains
        self._frozen: dict[str, torch.Tensor] = {}

    def close(self) -> None:
        """Release every run's directory lock."""
        for run in self.runs:
            run.close()

    # -- training -----------------------------------------------------------------------

    def train_step(self) -> list[float]:
        """One step of every run in ``self.group``; returns their losses in that order."""
        members = [self.runs[k] for k in self.group]
        # the runs' own tensors, stacked inside the graph: the backward hands each run its own
        # gradient (a slice, copied), and the optimizer updates each run's tensors as a Trainer does
        stacked = {name: torch.stack([run.params[name] for run in members]) for name in self.names}
        stacked.update(self._frozen)
        batches = [run.sampler.batch(run.step) for run in members]
        device = members[0].device
        tokens = torch.stack([b.tokens for b in batches]).to(device)
        with autocast_context(members[0].config):
            logits = self.mapped(stacked, tokens)  # (K, B, d_vocab_out)
        # per run, as Trainer.loss_on takes it (a cross-entropy under vmap rounds its mean differently)
        losses = torch.stack([F.cross_entropy(logits[i].float(), b.labels.to(device))
                              for i, b in enumerate(batches)])
        self.optimizer.zero_grad(set_to_none=True)
        losses.sum().backward()  # d(sum)/d(loss_k) = 1 exactly: each run gets its own gradient
        self.optimizer.step()  # tensors without a gradient (runs outside the group) are skipped
        for run in members:
            run.step += 1
        return losses.tolist()

    def set_group(self, group: list[int]) -> None:
        """Make the next steps train the runs ``group`` (indices) as one stack (``run`` sets it itself;
        a benchmark or the :func:`probe` sets it to time a step)."""
        self.group = list(group)
        # the frozen (zero, untrained) tensors never change: stacked once per group
        self._frozen = {name: torch.stack([self.runs[k].params[name].detach() for k in group])
                        for name in self.frozen_names}

    def run(self, on_step: Callable[["BatchedTrainer"], None] | None = None) -> list[dict]:
        """Train every run to its end; ``on_step`` is called after every step (tests interrupt with it)."""
        total = sum(run.config.train.steps for run in self.runs)
        bar = progress.bar(total=total, initial=sum(min(run.step, run.config.train.steps) for run in self.runs),
                           wanted=self.progress, unit="step", desc=f"train x{len(self.runs)}")
        now = time.perf_counter()
        started = [now - run.elapsed for run in self.runs]
        results: list[dict | None] = [None] * len(self.runs)
        last: list[dict] = [{} for _ in self.runs]
        finished = [False] * len(self.runs)
        try:
            for k, run in enumerate(self.runs):  # resumed at its end (killed while finishing)
                if run.step >= run.config.train.steps:
                    run.elapsed = time.perf_counter() - started[k]
                    results[k], finished[k] = run.finish({}), True
                    run.close()
            while not all(finished):
                live = [k for k, run in enumerate(self.runs) if not finished[k]]  # the unfinished runs furthest behind
                behind = min(self.runs[k].step for k in live)
                group = [k for k in live if self.runs[k].step == behind]
                if group != self.group:
                    self.set_group(group)
                losses = self.train_step()
                bar.update(len(group))
                for k, loss in zip(group, losses):
                    last[k], ended = self.runs[k].after_step(loss, started[k], last[k], bar, batched=True)
                    if ended:
                        run = self.runs[k]
                        run.elapsed = time.perf_counter() - started[k]
                        results[k], finished[k] = run.finish(last[k]), True
                        run.close()
                if on_step is not None:
                    on_step(self)
            return results
        finally:
            bar.close()
            self.close()


# A smaller stack within this share of the fastest is preferred: less memory, and it waits less often for
# the one run left behind
PROBE_TOLERANCE = 0.05


def probe(config: RunConfig, ks: Sequence[int] = (1, 4, 8, 16), precisions: Sequence[str] | None = None,
          steps: int = 3) -> dict:
    """Which stack size K and precision train ``config``'s runs in the least time a run, on this processor.

    A short probe, as ``sweep --runs-per-process auto`` and ``experiments/stall_rate.py --stack auto``
    make it before they train: for every candidate it sets up K runs of ``config`` (seeds 0..K-1, tiny
    evaluation pools, in a temporary folder), takes one step to warm up, then times ``steps`` stacked
    steps and keeps the median a run-step. ``precisions`` (default: fp32, and bf16 too where the CPU has
    bf16 units, :func:`compose_lens.core.cores.has_bf16_units`) are the ones the choice may take; pass the
    run's own to choose K alone. The smallest K within :data:`PROBE_TOLERANCE` of the fastest wins.

    Returns ``{"precision", "runs_per_process", "processor", "candidates": [{"precision", "k",
    "ms_per_run_step"}, ...], "chosen_by": "probe"}``: what the caller records beside its runs.
    """
    if precisions is None:
        precisions = ["fp32", "bf16"] if config.train.device == "cpu" and cores.has_bf16_units() else ["fp32"]
    candidates = []
    with tempfile.TemporaryDirectory() as tmp:
        for precision in precisions:
            for k in ks:
                trainer = stacked(config, k, Path(tmp) / f"{precision}-{k}",
                                  [f"precision={precision}", "pool_size=16", "log_to=none"])
                try:
                    trainer.train_step()
                    times = []
                    for _ in range(steps):
                        start = time.perf_counter()
                        trainer.train_step()
                        times.append(time.perf_counter() - start)
                finally:
                    trainer.close()
                candidates.append({"precision": precision, "k": k,
                                   "ms_per_run_step": round(statistics.median(times) / k * 1e3, 3)})
    chosen = pick(candidates)
    return {"precision": chosen["precision"], "runs_per_process": chosen["k"], "processor": cores.processor(),
            "candidates": candidates, "chosen_by": "probe"}


def stacked(config: RunConfig, k: int, folder: Path, overrides: Sequence[str] = (),
            seeds: Sequence[str] = ("model.init_seed", "train.seed")) -> BatchedTrainer:
    """K runs of ``config`` with ``overrides`` stacked in one trainer, every run in the group a step moves, their files
    in ``folder``; run s has s for each setting in ``seeds`` (the probe's: initial weights and data order; the bench's
    ``task.seed`` too: its own split). What :func:`probe` times and ``experiments/bench_throughput.py`` measures."""
    configs = [config.with_overrides([*(f"{key}={s}" for key in seeds), *overrides]) for s in range(k)]
    trainer = BatchedTrainer(configs, [folder / f"run-{s}" for s in range(k)], progress=False)
    trainer.set_group(list(range(k)))
    return trainer


def pick(candidates: Sequence[dict]) -> dict:
    """The probe's rule: the smallest K whose time a run-step is within :data:`PROBE_TOLERANCE` of the
    fastest candidate's (then the faster of equal K).

    >>> pick([{"precision": "fp32", "k": 1, "ms_per_run_step": 10.0},
    ...       {"precision": "bf16", "k": 4, "ms_per_run_step": 6.2}, {"precision": "bf16", "k": 16, "ms_per_run_step": 6.0}])
    {'precision': 'bf16', 'k': 4, 'ms_per_run_step': 6.2}
    """
    fastest = min(c["ms_per_run_step"] for c in candidates)
    return min((c for c in candidates if c["ms_per_run_step"] <= fastest * (1 + PROBE_TOLERANCE)),
               key=lambda c: (c["k"], c["ms_per_run_step"]))
