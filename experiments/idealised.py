"""The theory's idealised transformer beside the real one, at a small-modulus proxy (docs/idealised.md).

    python experiments/idealised.py train --out runs/idealised          # the runs (resumable)
    python experiments/idealised.py compare --out runs/idealised \\
        --results experiments/results/idealised                          # the CSV and figures

**The proxy.** The study's setting (p = 59, 30,000 steps) costs minutes per run on a free
core; this machine shares two cores with many jobs, so the comparison runs at p = 17 (12
variables, the study's f, r and sequence length), ``--steps`` steps (default 3,000),
bf16 autocast, one thread. Every variant has d_model = 192 (d_head 128, d_mlp 512),
the least width at which the disentangled residual's four equal blocks (embeddings,
layer-1 attention, layer-2 attention, layer-2 MLP) hold one-hot orthogonal embeddings of
the 32 tokens and 16 positions; so "paper" here is the paper's architecture and recipe at
that width, not the shipped model.

**The variants.** ``paper`` (learned embeddings, additive residual), ``orthogonal``
(frozen one-hot embeddings), ``disentangled`` (one residual block per writer), ``both``;
seeds set ``task.seed``, ``train.seed`` and ``model.init_seed`` together, as the sweeps do.
The overlap knob: ``orthogonal`` with ``embedding_overlap`` in ``--overlaps``, one seed.

**What ``compare`` writes** (into ``--results``): ``comparison.csv``, one row per run
(final pool accuracies, the exhaustive accuracies, the phase onsets of
:func:`compose_lens.phases.logged_phases`, the stall detector's outcome
(:func:`compose_lens.outcome.classify_run`), the located binder / router / adder
(:func:`compose_lens.analysis.locate.locate`), the previous-token and routing probes, the
MLP's key frequencies); ``gradient_shares.csv``, the share of the associative-memory term
in the gradients of layer-1 QK / OV and layer-2 QK at every checkpoint
(:mod:`compose_lens.analysis.gradient_terms`); ``gradient_shares.png`` (share over
training per variant) and ``gradient_shares_overlap.png`` (share against the overlap knob).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

VARIANTS = {
    "paper": [],
    "orthogonal": ["model.embeddings=orthogonal"],
    "disentangled": ["model.residual=disentangled"],
    "both": ["model.embeddings=orthogonal", "model.residual=disentangled"],
}
PROXY = ["task.modulus=17", "model.d_model=192", "model.d_head=128", "precision=bf16", "threads=1"]


def _common(steps: int, seed: int) -> list[str]:
    return PROXY + [f"steps={steps}", "eval_every=100", f"checkpoint_every={max(steps // 12, 100)}",
                    "pool_size=500", f"task.seed={seed}", f"train.seed={seed}", f"model.init_seed={seed}"]


def run_plan(args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    """(run name, overrides) of the runs ``args.only`` names: the variants seed-major (whatever
    finishes first covers every variant), or the overlap knob's runs (``--overlap-steps`` each)."""
    if args.only == "overlaps":
        seed = args.seeds[0]
        return [(f"overlap{c:g}-s{seed}", _common(args.overlap_steps, seed)
                 + ["model.embeddings=orthogonal", f"model.embedding_overlap={c}"]) for c in args.overlaps]
    return [(f"{name}-s{seed}", _common(args.steps, seed) + changes)
            for seed in args.seeds for name, changes in VARIANTS.items()]


def train(args: argparse.Namespace) -> None:
    from compose_lens.config import RunConfig
    from compose_lens.train import Trainer

    plan = run_plan(args)[args.worker::args.workers]
    for name, overrides in plan:
        run_dir = args.out / name
        if (run_dir / "results.json").exists():
            continue
        config = RunConfig().with_overrides(overrides)
        print(f"training {name}: {' '.join(overrides)}", flush=True)
        Trainer(config, run_dir, resume=run_dir.exists(), progress=False).run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for command in ("train", "compare"):
        p = sub.add_parser(command)
        p.add_argument("--out", type=Path, required=True, help="directory of the runs")
        p.add_argument("--steps", type=int, default=3000)
        p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
        p.add_argument("--overlaps", type=float, nargs="*", default=[0.0, 0.25, 0.5, 0.75])
        p.add_argument("--overlap-steps", type=int, default=1000, help="steps of each overlap run")
    sub.choices["train"].add_argument("--only", choices=("variants", "overlaps"), default="variants")
    sub.choices["train"].add_argument("--worker", type=int, default=0, help="this worker's index")
    sub.choices["train"].add_argument("--workers", type=int, default=1, help="how many workers share the plan")
    sub.choices["compare"].add_argument("--results", type=Path, required=True, help="where the CSV and PNGs go")
    args = parser.parse_args(argv)
    if args.command == "train":
        train(args)
    else:
        compare(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
