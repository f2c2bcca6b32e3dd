"""Benchmark: one training step of the paper model, the plain TransformerLens way vs compose-tl.

Both run in this process on the same batches with the same optimizer settings:

* baseline: the full-sequence TransformerLens forward (``model(tokens)``), fp32,
  cross-entropy at the last position, AdamW step;
* project: the fast path (:mod:`compose_lens.model.fastpath`), fp32, same loss and step;
* project, bf16: the fast path under CPU bf16 autocast (reported, not the default);
* sampler: rendering one batch of 512 fresh training sequences (amortised over
  the block of steps the sampler renders at once), as a share of a fast step.

It prints median step times, the ratio, and the largest logit difference between
the two forwards on the same weights.

    python experiments/bench_training.py [--steps 40] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from compose_lens.model import fastpath, tl
from compose_lens.config import RunConfig

from compose_lens.data.sampler import TrainingSampler
from compose_lens.data.split import Split


def time_steps(step_fn, batches, warmup: int = 5) -> list[float]:
    for b in batches[:warmup]:
        step_fn(b)
    times = []
    for b in batches[warmup:]:
        start = time.perf_counter()
        step_fn(b)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    config = RunConfig()
    split = Split.from_task(config.task)
    sampler = TrainingSampler(split, config.train.batch_size, seed=0)
    batches = [sampler.batch(i) for i in range(args.steps + 5)]
    model = tl.boot(config.model)
    params = tl.parameters(model)
    t = config.train
    opt = torch.optim.AdamW(tl.trainable_parameters(model), lr=t.lr, betas=(t.beta1, t.beta2),
                            weight_decay=t.weight_decay, fused=True)

    def step(logits_fn, autocast=False):
        def run(batch):
            ctx = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else torch.autocast("cpu", enabled=False)
            with ctx:
                logits = logits_fn(batch.tokens)
            loss = F.cross_entropy(logits.float(), batch.labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        return run

    baseline = step(lambda tok: fastpath.plain_last_position_logits(model, tok))
    project = step(lambda tok: fastpath.last_position_logits(params, config.model, tok))
    project_bf16 = step(lambda tok: fastpath.last_position_logits(params, config.model, tok), autocast=True)

    # interleave the measurements so both see the same machine load
    results = {"baseline": [], "project": [], "project_bf16": []}
    for _ in range(2):
        results["baseline"] += time_steps(baseline, batches[: args.steps // 2 + 5])
        results["project"] += time_steps(project, batches)
        results["project_bf16"] += time_steps(project_bf16, batches)

    block = 50
    start = time.perf_counter()
    for i in range(4):
        sampler.render_block(100 + i)
    sample_time = (time.perf_counter() - start) / (4 * block)

    with torch.no_grad():
        tokens = batches[0].tokens
        plain = fastpath.plain_last_position_logits(model, tokens)
        fast = fastpath.last_position_logits(params, config.model, tokens)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            fast_bf16 = fastpath.last_position_logits(params, config.model, tokens).float()

    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"paper model, batch {config.train.batch_size}, {args.threads} threads, "
          f"median of {len(results['project'])} steps")
    print(f"{'path':28s} {'ms/step':>9s} {'speed-up':>9s}")
    print(f"{'baseline (TL forward, fp32)':28s} {med['baseline'] * 1e3:9.2f} {1.0:9.2f}")
    print(f"{'project fast path, fp32':28s} {med['project'] * 1e3:9.2f} {med['baseline'] / med['project']:9.2f}")
    print(f"{'project fast path, bf16':28s} {med['project_bf16'] * 1e3:9.2f} "
          f"{med['baseline'] / med['project_bf16']:9.2f}")
    print(f"sampler: {sample_time * 1e3:.3f} ms per batch of {config.train.batch_size} "
          f"({config.train.batch_size / sample_time:,.0f} sequences/s) = "
          f"{100 * sample_time / med['project']:.1f} % of a fast step, "
          f"{100 * sample_time / med['baseline']:.2f} % of a baseline step")
    print(f"max |logit difference| fast vs TL, fp32: {(fast - plain).abs().max().item():.2e} "
          f"(logit scale {plain.abs().max().item():.1f}); bf16: {(fast_bf16 - plain).abs().max().item():.2e}")


if __name__ == "__main__":
    main()
