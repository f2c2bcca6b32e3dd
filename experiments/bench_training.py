"""Benchmark: a training step the plain TransformerLens way against compose-lens's, in one process.

Every path runs here on the same batches with the same AdamW settings, the
measurements interleaved in rounds so that all see the same machine load (the
machine is often shared: read the ratios, and the load printed with them):

* baseline: the full-sequence TransformerLens forward (``model(tokens)``), fp32,
  cross-entropy at the last position, AdamW step;
* before: the table fast path (:mod:`compose_lens.model.fastpath`), eager, fp32, plus
  the pool evaluation every 100 steps as it was (chunks of 8,192), per step;
* after: the same fast path under ``torch.compile`` (what ``train.compile=auto``
  does for runs of >= 5,000 steps), plus the evaluation by the compiled forward in
  chunks of 1,024, per step (the trainer's way);
* threads: the eager step with 1 thread and with every core;
* other architectures: TransformerLens against :mod:`compose_lens.model.lastpos`
  (the last layer at the last position only), fp32 and CPU bf16 autocast.

Exactness: the largest logit difference of each forward from TransformerLens's,
and a short training trajectory (``--trajectory`` steps from one initialisation)
eager against compiled: the largest loss and weight differences.

    python experiments/bench_training.py [--rounds 6] [--threads 2] [--no-other]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F

from compose_lens.core.config import ModelConfig, RunConfig
from compose_lens.core.cores import ThreadGovernor, cpu_count
from compose_lens.data.sampler import TrainingSampler, concat_batches, make_pools
from compose_lens.data.split import Split
from compose_lens.training.evaluate import answer_logits
from compose_lens.model import fastpath, lastpos, tl

OTHER = {"3 layers, 2 heads, MLP everywhere": dict(n_layers=3, n_heads=2, d_head=64, mlp_blocks=(0, 1, 2)),
         "4 layers, 4 heads, MLP everywhere": dict(n_layers=4, n_heads=4, d_head=32, mlp_blocks=(0, 1, 2, 3))}


def load() -> str:
    return "load average %.2f %.2f %.2f" % os.getloadavg()


def interleaved(paths: dict, batches: list, rounds: int, per_round: dict | None = None) -> dict[str, float]:
    """Median seconds per call of each path, measured in ``rounds`` interleaved rounds.

    ``per_round[name]`` is how many batches a path takes per round (default 4).
    """
    per_round = per_round or {}
    for fn in paths.values():
        fn(batches[0])  # warm up
    times = {name: [] for name in paths}
    for r in range(rounds):
        for name, fn in paths.items():
            for i in range(per_round.get(name, 4)):
                batch = batches[(r * 7 + i) % len(batches)]
                start = time.perf_counter()
                fn(batch)
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def make_step(model, forward, autocast: bool = False):
    """One AdamW training step of ``forward`` (tokens -> logits at the last position)."""
    t = RunConfig().train
    opt = torch.optim.AdamW(tl.trainable_parameters(model), lr=t.lr, betas=(t.beta1, t.beta2),
                            weight_decay=t.weight_decay, fused=True)

    def step(batch):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = forward(batch.tokens)
        loss = F.cross_entropy(logits.float(), batch.labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()
    return step


def with_threads(fn, threads: int):
    def run(batch):
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return fn(batch)
        finally:
            torch.set_num_threads(before)
    return run


def eval_cost(model, config: RunConfig, tokens: torch.Tensor, chunk: int, forward=None, repeats: int = 3) -> float:
    """Seconds of one pool evaluation (the nine pools, one concatenated batch)."""
    answer_logits(model, config.model, tokens, chunk=chunk, forward=forward)  # warm up (compiles)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        answer_logits(model, config.model, tokens, chunk=chunk, forward=forward)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def paper_model(args, batches, split) -> None:
    config = RunConfig()
    model = tl.boot(config.model)
    params = tl.parameters(model)
    eager = lambda tok: fastpath.last_position_logits(params, config.model, tok)  # noqa: E731
    compiled = torch.compile(eager, dynamic=False)
    start = time.perf_counter()
    make_step(model, compiled)(batches[0])
    compile_s = time.perf_counter() - start
    paths = {"baseline": make_step(model, lambda tok: model(tok)[:, -1]),
             "before": make_step(model, eager), "after": make_step(model, compiled),
             "eager, 1 thread": with_threads(make_step(model, eager), 1),
             f"eager, {cpu_count()} threads": with_threads(make_step(model, eager), cpu_count())}
    med = interleaved(paths, batches, args.rounds, {"baseline": 2})
    pools, _ = concat_batches(make_pools(split, config.train.pool_size, config.train.seed))
    per_step_eval = {"before": eval_cost(model, config, pools.tokens, 8192) / config.train.eval_every,
                     "after": eval_cost(model, config, pools.tokens, 1024, compiled) / config.train.eval_every}
    base = med["baseline"]
    print(f"\npaper model, batch {config.train.batch_size}, {torch.get_num_threads()} threads "
          f"({cpu_count()} cores), {load()}; compile took {compile_s:.1f} s")
    print(f"{'path':44s} {'ms/step':>9s} {'speed-up':>9s}")
    print(f"{'baseline: TransformerLens forward, fp32':44s} {base * 1e3:9.2f} {1.0:9.2f}")
    for name in ("before", "after"):
        total = med[name] + per_step_eval[name]
        print(f"{name + ': step':44s} {med[name] * 1e3:9.2f} {base / med[name]:9.2f}")
        print(f"{name + ': step + evaluations (every 100 steps)':44s} {total * 1e3:9.2f} {base / total:9.2f}")
    for name in paths:
        if "thread" in name:
            print(f"{name:44s} {med[name] * 1e3:9.2f} {base / med[name]:9.2f}")
    exactness(config, batches, model, eager, compiled)


def exactness(config, batches, model, eager, compiled) -> None:
    tokens = batches[0].tokens
    with torch.no_grad():
        plain = model(tokens)[:, -1]
        fast, comp = eager(tokens), compiled(tokens)
    print(f"max |logit difference| from TransformerLens (logit scale {plain.abs().max():.1f}): "
          f"eager {(fast - plain).abs().max():.2e}, compiled {(comp - plain).abs().max():.2e}")


def trajectory(steps: int, batches) -> None:
    """Train from one initialisation eager, compiled, and eager with the logits scaled by
    1 + 1e-7 (a rounding-sized change, the floor); compare losses and weights with eager."""
    config = RunConfig()
    runs = {}
    for mode in ("eager", "compiled", "eager, logits x (1 + 1e-7)"):
        model = tl.boot(config.model)
        params = tl.parameters(model)
        forward = lambda tok, p=params: fastpath.last_position_logits(p, config.model, tok)  # noqa: E731
        if mode == "compiled":
            forward = torch.compile(forward, dynamic=False)
        elif mode != "eager":
            forward = lambda tok, f=forward: f(tok) * (1 + 1e-7)  # noqa: E731
        step = make_step(model, forward)
        losses = [step(batches[i % len(batches)]) for i in range(steps)]
        runs[mode] = (losses, {k: v.detach().clone() for k, v in params.items()})
    l0, w0 = runs.pop("eager")
    for mode, (l1, w1) in runs.items():
        dw = max((w0[k] - w1[k]).abs().max().item() for k in w0)
        print(f"trajectory, {steps} steps, eager vs {mode}: max |loss difference| "
              f"{max(abs(a - b) for a, b in zip(l0, l1)):.2e} (final loss {l0[-1]:.4f}), "
              f"max |weight difference| {dw:.2e}")


def other_architectures(args, batches) -> None:
    print(f"\nother architectures (fp32 unless marked), {load()}")
    print(f"{'model':36s} {'TL ms':>8s} {'lastpos ms':>11s} {'speed-up':>9s} {'bf16 ms':>8s} "
          f"{'speed-up':>9s} {'max |dlogit|':>13s}")
    for label, changes in OTHER.items():
        cfg = ModelConfig(**changes)
        model = tl.boot(cfg)
        params = tl.parameters(model)
        fast = lambda tok: lastpos.last_position_logits(params, cfg, tok)  # noqa: E731
        paths = {"tl": make_step(model, lambda tok: model(tok)[:, -1]),
                 "fast": make_step(model, fast), "bf16": make_step(model, fast, autocast=True)}
        med = interleaved(paths, batches, max(2, args.rounds // 2), {"tl": 2, "fast": 2, "bf16": 2})
        with torch.no_grad():
            diff = (fast(batches[0].tokens) - model(batches[0].tokens)[:, -1])
        print(f"{label:36s} {med['tl'] * 1e3:8.1f} {med['fast'] * 1e3:11.1f} {med['tl'] / med['fast']:9.2f} "
              f"{med['bf16'] * 1e3:8.1f} {med['tl'] / med['bf16']:9.2f} {diff.abs().max():13.2e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, default=0, help="0: the training's rule (compose_lens.core.cores)")
    parser.add_argument("--trajectory", type=int, default=100)
    parser.add_argument("--no-other", action="store_true", help="skip the other architectures")
    args = parser.parse_args()
    torch.set_num_threads(args.threads or ThreadGovernor().first_threads())
    split = Split.from_task(RunConfig().task)
    sampler = TrainingSampler(split, RunConfig().train.batch_size, seed=0)
    batches = [sampler.batch(i) for i in range(50)]
    paper_model(args, batches, split)
    trajectory(args.trajectory, batches)
    if not args.no_other:
        other_architectures(args, batches)


if __name__ == "__main__":
    main()
