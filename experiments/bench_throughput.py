"""Benchmark: core-minutes per training run at the study's setting, fp32 and bf16, alone and stacked.

The science here is counted in trajectories, so the number that matters is what one run costs in
core time. This measures it the way :class:`compose_lens.training.batched.BatchedTrainer` trains: K runs of
the study's setting (seeds 0..K-1) in one process, one thread, their weights stacked and the forward
mapped over the stack, in fp32 and under CPU bf16 autocast (``precision=bf16``: fp32 master weights
and optimizer state, the products in bf16 where the processor has bf16 units). Per configuration:

* the median seconds of one stacked training step (``BatchedTrainer.train_step``), measured in
  interleaved rounds so every configuration sees the same machine load;
* the evaluation a run pays besides (its pools every ``eval_every`` steps, one run at a time as the
  trainer does), which stacking does not share;
* core-minutes per run over ``--steps`` steps (default the study's budget of 30,000):
  ``threads x (step / K + evaluation / eval_every) x steps / 60``;
* where a step's time goes (``torch.profiler`` over a few steps): the share of the step in matrix
  products, in the optimizer, and in the rest (the other kernels, autograd's bookkeeping), and the
  operators that take the most self time.

Nothing is written into a run (the K runs live in a temporary folder); the table is printed and
written to ``experiments/results/bench/throughput.json`` with the processor it was measured on.

    python experiments/bench_throughput.py [--ks 1 4 8 16] [--rounds 5] [--steps 30000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from compose_lens.training.batched import BatchedTrainer, stacked
from compose_lens.core.config import RunConfig
from compose_lens.core.cores import processor

OUT = Path(__file__).resolve().parents[1] / "experiments" / "results" / "bench" / "throughput.json"


def trainer(k: int, precision: str, folder: Path, pools: bool = False) -> BatchedTrainer:
    """K runs of the study's setting stacked (:func:`compose_lens.training.batched.stacked`, as the sweep's probe
    stacks them), run s with seed s for its split, initial weights and data order, as a sweep's seeds differ;
    their evaluation pools tiny unless ``pools`` (the step does not read them, and the study's pools for every
    run of every configuration would not fit in memory)."""
    return stacked(RunConfig(), k, folder / f"{precision}-k{k}{'-pools' if pools else ''}",
                   [f"precision={precision}", "threads=1", *([] if pools else ["pool_size=16"])],
                   seeds=("task.seed", "model.init_seed", "train.seed"))


PRODUCTS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::matmul", "aten::linear",
            "aten::_efficientzerotensor", "mkldnn")


def profile(t: BatchedTrainer, steps: int = 5) -> dict:
    """Where ``steps`` stacked steps spend their self CPU time: shares in matrix products, in the
    optimizer (AdamW's fused kernel), in the rest, and the five largest operators."""
    from torch.profiler import ProfilerActivity, profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            t.train_step()
    ops = [(e.key, e.self_cpu_time_total) for e in prof.key_averages()]
    total = sum(us for _, us in ops) or 1.0
    products = sum(us for key, us in ops if key in PRODUCTS or "mkldnn" in key)
    optimizer = sum(us for key, us in ops if "adam" in key.lower())
    top = sorted(ops, key=lambda kv: -kv[1])[:5]
    return {"products": round(products / total, 3), "optimizer": round(optimizer / total, 3),
            "rest": round(1 - (products + optimizer) / total, 3),
            "top": [{"op": key, "share": round(us / total, 3)} for key, us in top]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ks", type=int, nargs="+", default=[1, 4, 8, 16], help="how many runs stacked")
    ap.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds of --per-round steps each")
    ap.add_argument("--per-round", type=int, default=6)
    ap.add_argument("--steps", type=int, default=30_000, help="a run's length, for core-minutes per run")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    configs = [(p, k) for p in a.precisions for k in a.ks]
    with tempfile.TemporaryDirectory() as tmp:
        trainers = {c: trainer(c[1], c[0], Path(tmp)) for c in configs}
        try:
            for t in trainers.values():  # warm up
                for _ in range(3):
                    t.train_step()
            times = {c: [] for c in configs}
            for _ in range(a.rounds):
                for c, t in trainers.items():
                    for _ in range(a.per_round):
                        start = time.perf_counter()
                        t.train_step()
                        times[c].append(time.perf_counter() - start)
            profiles = {c: profile(t) for c, t in trainers.items()}
        finally:
            for t in trainers.values():
                t.close()
        evaluation = {}
        for p in a.precisions:  # the study's pools, one run's, as the trainer evaluates them
            alone = trainer(1, p, Path(tmp), pools=True)
            try:
                alone.runs[0].evaluate_pools()
                start = time.perf_counter()
                alone.runs[0].evaluate_pools()
                evaluation[p] = time.perf_counter() - start
            finally:
                alone.close()
    eval_every = RunConfig().train.eval_every
    rows = []
    for (p, k), ts in times.items():
        step = statistics.median(ts)
        per_run = step / k + evaluation[p] / eval_every
        rows.append({"precision": p, "k": k, "step_ms": round(step * 1e3, 2), "step_ms_per_run": round(step / k * 1e3, 2),
                     "evaluation_ms_per_step": round(evaluation[p] / eval_every * 1e3, 2),
                     "core_minutes_per_run": round(per_run * a.steps / 60, 2),
                     "share_products": profiles[(p, k)]["products"], "share_optimizer": profiles[(p, k)]["optimizer"],
                     "share_rest": profiles[(p, k)]["rest"], "top_ops": profiles[(p, k)]["top"]})
    base = next(r for r in rows if r["precision"] == "fp32" and r["k"] == min(a.ks)) if "fp32" in a.precisions else rows[0]
    print(f"{processor()['name']}; 1 thread; torch {torch.__version__}; a run = {a.steps:,} steps, "
          f"evaluation every {eval_every}")
    print(f"{'precision':>9s} {'K':>3s} {'ms/step':>9s} {'ms/step/run':>12s} {'eval ms/step':>13s} "
          f"{'core-min/run':>13s} {'vs fp32 alone':>14s} {'products':>9s} {'optimizer':>10s} {'rest':>6s}  largest op")
    for r in rows:
        print(f"{r['precision']:>9s} {r['k']:3d} {r['step_ms']:9.2f} {r['step_ms_per_run']:12.2f} "
              f"{r['evaluation_ms_per_step']:13.2f} {r['core_minutes_per_run']:13.2f} "
              f"{base['core_minutes_per_run'] / r['core_minutes_per_run']:13.2f}x {r['share_products']:9.2f} "
              f"{r['share_optimizer']:10.2f} {r['share_rest']:6.2f}  {r['top_ops'][0]['op']} {r['top_ops'][0]['share']:.2f}")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"processor": processor(), "torch": torch.__version__, "threads": 1,
                                 "steps_per_run": a.steps, "eval_every": eval_every, "rounds": a.rounds,
                                 "per_round": a.per_round, "rows": rows}, indent=1) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
