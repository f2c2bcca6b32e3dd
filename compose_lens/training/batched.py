"""K training runs in one process: stacked weights, one mapped forward, one AdamW.

A sweep trains many copies of one small architecture that differ only in their seeds and task settings
(f, r, ...). :class:`BatchedTrainer` trains K such runs together:

* **Each run is an ordinary** :class:`~compose_lens.training.train.Trainer` **that never steps.** It
  checks, locks and writes its own directory through the Trainer's own calls, boots its own weights
  (``model.init_seed``), owns its data stream and pools, and loads its resume state. So a batched run
  directory is a run directory: every tool reads it, and ``Trainer(..., resume=True)`` continues it alone.
* **The step is batched.** Every step the K runs' own tensors are stacked inside the graph
  (``torch.stack``: a copy, small beside the step, whose backward hands each run its slice of the
  gradient), and the fast forward (``ANSWERS[kind]`` of :data:`compose_lens.model.forward.ANSWERS`, a pure
  function of a parameter dict) is mapped over the stack and the K token batches with ``torch.func.vmap``. The table
  forward's one in-place write (the last-position one-hot) was made out of place for it, with the same
  0 / 1 entries; the TransformerLens forward (hooks) does not map, and is refused. The cross-entropy is
  taken per run outside vmap, as ``Trainer.loss_on`` takes it (under vmap its mean rounds differently),
  and the K losses summed: d(sum)/d(loss_k) is exactly 1, so each run gets its own gradient.
* **One fused AdamW over all K runs' own tensors**, sharing each run's optimizer-state dicts (what
  ``save_resume_state`` writes is each run's own state). AdamW is elementwise, so this is K separate
  optimizers. It is *not* run over stacked (K, ...) tensors: on this project's CPU (AVX-512) the fused
  kernel on a stacked tensor differs in the last bit from the same kernel on the K slices (which
  elements fall in its vectorised body and which in its scalar tail depends on the length); foreach and
  for-loop AdamW agree stacked or not, but not with the Trainer's fused kernel.

**How close to K separate Trainers.** Everything but the mapped forward/backward is the Trainer's own
arithmetic. vmap turns each matrix product into a ``bmm``, which a BLAS may sum in another order: on
this project's CPU every gradient of one paper-size step came out bit-for-bit; at the tests' tiny size,
after 100 steps, the weights differ by < 5e-7, the losses by a few roundings and the accuracies not at
all (tests/integration/test_batched.py). Two batched runs of the same K runs are bit-for-bit the same.

**Runs at different steps.** Every step trains the runs furthest behind, as one stack: runs resumed from
different checkpoints catch up first; a run that ends (``steps``, or ``stop_at``) leaves the stack.

**What must agree:** the model configuration but ``init_seed``, the sequence length and
:data:`SHARED_TRAIN`; seeds, f, r, ``steps``, ``eval_every``, ``checkpoint_every``, ``pool_size`` and
``stop_at`` may differ. **Not as a Trainer:** training is never compiled (``compile=on`` is refused;
``results.json`` says ``compiled: false``), and ``elapsed_s`` / ``train_wall_time_s`` are the batched
process's wall time. Pools and the exhaustive sets are evaluated one run at a time, unbatched.

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
    """K runs, each in its own directory, trained in this process (see the module doc). ``configs``,
    ``run_dirs`` and ``splits`` (None: each run's own) are parallel lists; ``resume`` and ``overwrite``
    apply to every run as to a Trainer. ``run()`` returns the K ``results.json`` documents in order."""

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
        t = first.config.train  # one fused AdamW sharing each run's own state dicts (the module doc)
        self.optimizer = torch.optim.AdamW([p for run in self.runs for p in run.trainable], lr=learning_rate(t),
                                           betas=(t.beta1, t.beta2), weight_decay=t.weight_decay, fused=True)
        for run in self.runs:
            for p in run.trainable:
                self.optimizer.state[p] = run.optimizer.state[p]
        self.group: list[int] = []  # the runs the next step trains
        self._frozen: dict[str, torch.Tensor] = {}

    def close(self) -> None:
        for run in self.runs:
            run.close()

    def train_step(self) -> list[float]:
        """One step of every run in ``self.group``; returns their losses in that order."""
        members = [self.runs[k] for k in self.group]
        stacked = {name: torch.stack([run.params[name] for run in members]) for name in self.names}
        stacked.update(self._frozen)
        batches = [run.sampler.batch(run.step) for run in members]
        device = members[0].device
        tokens = torch.stack([b.tokens for b in batches]).to(device)
        with autocast_context(members[0].config):
            logits = self.mapped(stacked, tokens)  # (K, B, d_vocab_out)
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

        def finish(k: int) -> None:
            run = self.runs[k]
            run.elapsed = time.perf_counter() - started[k]
            results[k], finished[k] = run.finish(last[k]), True
            run.close()
        try:
            for k, run in enumerate(self.runs):  # resumed at its end (killed while finishing)
                if run.step >= run.config.train.steps:
                    finish(k)
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
                        finish(k)
                if on_step is not None:
                    on_step(self)
            return results
        finally:
            bar.close()
            self.close()


# a smaller stack within this share of the fastest is preferred: less memory, less waiting for a run left behind
PROBE_TOLERANCE = 0.05


def probe(config: RunConfig, ks: Sequence[int] = (1, 4, 8, 16), precisions: Sequence[str] | None = None,
          steps: int = 3) -> dict:
    """Which stack size K and precision train ``config``'s runs in the least time a run, on this processor
    (``sweep --runs-per-process auto``, ``experiments/stall_rate.py --stack auto``).

    Every candidate is K runs of ``config`` (seeds 0..K-1, tiny pools, in a temporary folder): one step to
    warm up, then the median of ``steps`` timed steps a run. ``precisions`` default to fp32, and bf16 too
    where the CPU has bf16 units; pass the run's own to choose K alone. Returns ``{"precision",
    "runs_per_process", "processor", "candidates": [{"precision", "k", "ms_per_run_step"}, ...],
    "chosen_by": "probe"}``, what the caller records beside its runs (the choice: :func:`pick`).
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
    """K runs of ``config`` with ``overrides`` in one trainer whose steps move them all, their files in
    ``folder``; run s has s for each setting in ``seeds``. What :func:`probe` and
    ``experiments/bench_throughput.py`` time."""
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
