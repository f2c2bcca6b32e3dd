"""Is it faster to train K sweep points as one batched model than as separate processes?

A sweep trains many copies of the same small model that differ only in their data
(f, r, seed) and initial weights. Two ways to spend the machine on them:

* **separate processes** (what ``compose-lens sweep`` does): W workers of T torch
  threads each, W * T = cores, every worker training one point at a time;
* **one batched model**: the K points' weights stacked along a leading axis and the
  fast-path forward mapped over it with ``torch.func.vmap``, one AdamW over the
  stacked tensors (AdamW is elementwise, so each slice gets exactly its own update),
  all threads of the machine in that one process.

This script measures the training-step time of both on this machine, in the same
process, and prints the ratio. The batched step here feeds every point the same
token batch: the fast path writes a one-hot in place, which ``vmap`` cannot do when
the tokens differ per point, and a per-point-token version would do the same
arithmetic on the same shapes, so the cost is the same. (Shipping it would need an
out-of-place variant of that one line in ``compose_lens.model.fastpath``.)

(Since issue #31 that line is out of place and ``compose_lens.training.batched`` trains K runs with
their own tokens; ``experiments/bench_batched.py`` times it against K Trainers.)

Run: ``.venv/bin/python experiments/bench_sweep_batched.py [--points 4] [--full]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch.func import vmap

from compose_lens.model import fastpath, tl
from compose_lens.core.config import RunConfig

from compose_lens.data.sampler import TrainingSampler
from compose_lens.data.split import Split


def point_configs(k: int) -> list[RunConfig]:
    return [RunConfig().with_overrides([f"model.init_seed={i}", f"train.seed={i}"]) for i in range(k)]


def separate_step_time(config: RunConfig, steps: int, threads: int) -> float:
    """Seconds per training step of one point in this process (the sweep's worker loop)."""
    torch.set_num_threads(threads)
    model = tl.boot(config.model)
    params = tl.parameters(model)
    opt = torch.optim.AdamW(tl.trainable_parameters(model), lr=1e-3, weight_decay=0.02)
    sampler = TrainingSampler(Split.from_task(config.task), config.train.batch_size, config.train.seed)
    for step in range(steps + 5):
        if step == 5:
            start = time.perf_counter()
        batch = sampler.batch(step)
        loss = F.cross_entropy(fastpath.last_position_logits(params, config.model, batch.tokens), batch.labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return (time.perf_counter() - start) / steps


def batched_step_time(configs: list[RunConfig], steps: int, threads: int) -> float:
    """Seconds per training step of K points as one stacked model (vmap over the weights)."""
    torch.set_num_threads(threads)
    cfg = configs[0].model
    models = [tl.boot(c.model) for c in configs]
    per_model = [tl.parameters(m) for m in models]
    trainable = {name for name, p in per_model[0].items() if p.requires_grad}
    stacked = {k: torch.stack([p[k].detach() for p in per_model]) for k in per_model[0]}
    for k in trainable:
        stacked[k].requires_grad_(True)
    opt = torch.optim.AdamW([stacked[k] for k in sorted(trainable)], lr=1e-3, weight_decay=0.02)
    sampler = TrainingSampler(Split.from_task(configs[0].task), configs[0].train.batch_size, 0)

    def logits(p, tokens):
        return fastpath.last_position_logits(p, cfg, tokens)

    forward = vmap(logits, in_dims=(0, None))
    for step in range(steps + 5):
        if step == 5:
            start = time.perf_counter()
        batch = sampler.batch(step)
        out = forward(stacked, batch.tokens)  # (K, B, classes)
        # the sum of the K mean losses: each slice's gradient is its own point's gradient
        loss = F.cross_entropy(out.flatten(0, 1), batch.labels.repeat(len(configs)), reduction="sum")
        loss = loss / batch.labels.numel()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return (time.perf_counter() - start) / steps


def concurrent_separate(k: int, steps: int, workers: int, threads: int) -> float:
    """Seconds per step-of-all-K when W worker processes each train one point at once."""
    code = ("import json,sys; sys.path.insert(0, 'experiments'); import bench_sweep_batched as b; "
            f"print(json.dumps(b.separate_step_time(b.point_configs(1)[0], {steps}, {threads})))")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": str(threads)}) for _ in range(workers)]
    per_step = [json.loads(p.communicate()[0]) for p in procs]
    # W points advance in parallel; K points need K / W such rounds
    return max(per_step) * k / workers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--points", type=int, default=4)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats; the fastest counts")
    ap.add_argument("--full", action="store_true",
                    help="also all-core timings and W real worker processes (needs an idle machine)")
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    k = args.points
    configs = point_configs(k)
    # The per-core question first, robust to a shared machine: both on one thread, interleaved,
    # best of several repeats. Separate processes use every core fully (one point per core), so
    # batching can only win if K points batched on one thread beat K single steps on one thread.
    single, batched_1t = [], []
    for _ in range(args.repeats):
        single.append(separate_step_time(configs[0], args.steps, 1))
        batched_1t.append(batched_step_time(configs, args.steps, 1))
    one_1t, b_1t = min(single), min(batched_1t)
    print(f"{cores} cores, {k} points, paper model, batch 512, {args.steps} timed steps, "
          f"best of {args.repeats}")
    print(f"one point, 1 thread:                  {one_1t * 1e3:7.1f} ms/step")
    print(f"{k} points batched (vmap), 1 thread:   {b_1t * 1e3:7.1f} ms per step of all {k} "
          f"({b_1t / k * 1e3:.1f} ms per point-step)")
    print(f"per core, batched / one point at a time: {b_1t / (k * one_1t):.2f} (below 1: batching pays)")
    if not args.full:
        return
    one_all = separate_step_time(configs[0], args.steps, cores)
    batched = batched_step_time(configs, args.steps, cores)
    concurrent = concurrent_separate(k, args.steps, cores, 1)
    print(f"one point, {cores} threads:                 {one_all * 1e3:7.1f} ms/step")
    print(f"{k} points as {cores} processes x 1 thread: {concurrent * 1e3:7.1f} ms per step of all {k}")
    print(f"{k} points batched (vmap), {cores} threads:  {batched * 1e3:7.1f} ms per step of all {k}")
    print(f"batched ({cores} threads) / separate processes: {batched / concurrent:.2f} "
          f"(below 1: batched is faster)")


if __name__ == "__main__":
    main()
