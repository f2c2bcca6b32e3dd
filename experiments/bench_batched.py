"""K runs as K separate Trainers against one BatchedTrainer (compose_lens.training.batched), in one process.

Both sides train the same K paper-size runs (seeds 0..K-1, batch 512, the study's
recipe) with their real training steps (``Trainer.train_step`` and
``BatchedTrainer.train_step``: data, forward, backward, fused AdamW), no evaluations
or checkpoints. The separate side steps the K Trainers one after another; the batched
side steps all K at once. Repeats are interleaved and the fastest counts, since the
machine may be shared. Prints the time per run-step (a step of one run) of each and
their ratio.

Run: ``.venv/bin/python experiments/bench_batched.py [--runs 4] [--steps 50] [--threads 1]``
(``--device cuda`` on a GPU machine).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch

from compose_lens.training.batched import BatchedTrainer
from compose_lens.core.config import RunConfig
from compose_lens.training.train import Trainer


def configs(k: int, threads: int, device: str, steps: int) -> list[RunConfig]:
    base = RunConfig().with_overrides([f"threads={threads}", f"device={device}", f"steps={100 * steps}"])
    return [base.with_overrides([f"task.seed={s}", f"train.seed={s}", f"model.init_seed={s}"]) for s in range(k)]


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_separate(trainers: list[Trainer], steps: int, device: str) -> float:
    """Seconds per run-step, K Trainers stepped one after another."""
    sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        for trainer in trainers:
            trainer.train_step()
    sync(device)
    return (time.perf_counter() - start) / (steps * len(trainers))


def time_batched(batched: BatchedTrainer, steps: int, device: str) -> float:
    """Seconds per run-step, the K runs stepped together."""
    sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        batched.train_step()
    sync(device)
    return (time.perf_counter() - start) / (steps * len(batched.runs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--steps", type=int, default=50, help="timed steps per repeat")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats; the fastest counts")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    runs = configs(args.runs, args.threads, args.device, args.steps)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        separate = [Trainer(c, root / f"alone{k}", progress=False) for k, c in enumerate(runs)]
        batched = BatchedTrainer(runs, [root / f"batched{k}" for k in range(args.runs)], progress=False)
        batched.set_group(list(range(args.runs)))
        time_separate(separate, args.warmup, args.device)
        time_batched(batched, args.warmup, args.device)
        alone, together = [], []
        for _ in range(args.repeats):
            alone.append(time_separate(separate, args.steps, args.device))
            together.append(time_batched(batched, args.steps, args.device))
        for trainer in separate:
            trainer.close()
        batched.close()
    a, b = min(alone), min(together)
    try:
        load = "load average %.1f" % os.getloadavg()[0]
    except OSError:
        load = "load unknown"
    print(f"paper model, batch 512, {args.runs} runs, {args.steps} timed steps x {args.repeats} repeats "
          f"(best), device {args.device}, {args.threads} thread(s), {load}")
    print(f"separate Trainers: {a * 1e3:8.2f} ms per run-step   (all repeats: "
          f"{', '.join(f'{x * 1e3:.2f}' for x in alone)})")
    print(f"one BatchedTrainer:{b * 1e3:8.2f} ms per run-step   (all repeats: "
          f"{', '.join(f'{x * 1e3:.2f}' for x in together)})")
    print(f"batched / separate: {b / a:.2f} (below 1: batching pays)")


if __name__ == "__main__":
    main()
