"""The study, re-run on each task variant (issue #26): accuracy per pool, at a p = 11 proxy or at p = 59.

    python experiments/variants.py                 # p = 11, 3000 steps per variant, one thread, one at a time
    python experiments/variants.py --quick         # p = 7, 40 steps, tiny widths: checks the script runs
    python experiments/variants.py --seeds 0 1 2   # more seeds (default: 0)
    python experiments/variants.py --scale study --variants reassign noise longer --seeds 0 1 2
                                                   # p = 59, the study's recipe, stopped once decided:
                                                   # writes experiments/results/variants/study.csv
    python experiments/variants.py --scale study --variants chain --seeds 0
                                                   # adds chain seed 0 to it (bf16: STUDY_EXTRA); the
                                                   # CSV keeps the rows of every other variant and seed

Trains the paper architecture (d_model 128, one head, d_mlp 512, MLP in the last block) at a
small modulus on the study's task and on each variant of docs/variants.md, with
:class:`compose_lens.training.train.Trainer` (the ``compose-lens train`` loop):

==========  ==========================================================  ======
variant     task settings                                               layers
==========  ==========================================================  ======
study       the study's task                                            2
reassign    ``reassign_rate=0.5``                                       2
noise       ``noise_rate=0.5``                                          2
longer      ``seq_len=32``, ``max_assignments=12``                      2
chain       ``chain_rate=0.5`` (two hops need a third layer; lastpos)   3
==========  ==========================================================  ======

and writes one row per (variant, seed, pool) to ``experiments/results/variants/accuracy.csv``
(``--quick``: ``accuracy_quick.csv``): the final accuracy on each of the task's pools (the
nine and the variant's own, ``pool_size`` sequences each) and on the two exhaustive sets,
with the run's outcome (:mod:`compose_lens.training.outcome`) and wall time. Runs live in
``runs/variants[_quick]/<variant>_seed=<s>`` and are reused when finished (``results.json``).

This is a proxy, not the study: a modulus of 11 rather than 59 and a few thousand steps
rather than 30,000, on a shared CPU. It says whether each variant's pools are learnable by
the same recipe at a small scale, not what the circuit does at p = 59.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pandas as pd
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results" / "variants"

VARIANTS = {  # name: RunConfig overrides (the task settings and, for chains, the depth)
    "study": [],
    "reassign": ["reassign_rate=0.5"],
    "noise": ["noise_rate=0.5"],
    "longer": ["seq_len=32", "max_assignments=12"],
    "chain": ["chain_rate=0.5", "n_layers=3"],
}


# chains at p = 59: the 3-layer model trains on the last-position forward, 196 ms a step in fp32 on one
# AMD EPYC core; bf16 autocast took 1.86x less (measured side by side), and on the study's task it
# stalled no more often than fp32 as far as the seeds tell (1 of 9 seeds against 2 of 14, docs/stalls.md)
STUDY_EXTRA = {"chain": ["precision=bf16"]}


def base_overrides(scale: str) -> list[str]:
    if scale == "study":  # the study's task size and recipe; stop once generalised or surely stalled
        return ["steps=30000", "stop_at=decided", "threads=1"]
    if scale == "quick":
        return ["modulus=7", "n_vars=6", 'left_forbidden=["f"]', 'right_forbidden=["a"]', "f=0.8", "steps=40",
                "eval_every=20", "checkpoint_every=20", "pool_size=50", "batch_size=64", "threads=1",
                "model.d_model=16", "model.d_head=16", "model.d_mlp=32"]
    return ["modulus=11", "steps=3000", "eval_every=500", "checkpoint_every=1000", "pool_size=500",
            "batch_size=256", "threads=1"]


def run_variant(name: str, seed: int, scale: str, work: Path) -> dict:
    """Train one variant (or reuse its finished run) and return its results.json."""
    from compose_lens.core.config import RunConfig
    from compose_lens.training.train import Trainer

    run = work / f"{name}_seed={seed}"
    if (run / "results.json").exists():
        return json.loads((run / "results.json").read_text())
    overrides = base_overrides(scale) + VARIANTS[name] + (STUDY_EXTRA.get(name, []) if scale == "study" else [])
    if name == "longer" and scale == "quick":
        overrides = [o for o in overrides if not o.startswith("max_assignments")] + ["max_assignments=6"]
    config = RunConfig().with_overrides(overrides + [f"train.seed={seed}", f"task.seed={seed}",
                                                     f"model.init_seed={seed}"])
    # an interrupted run resumes from its last checkpoint
    return Trainer(config, run, progress=False, resume=run.exists()).run()


def rows_of(name: str, seed: int, results: dict) -> list[dict]:
    config = results["config"]
    settings = {k: config["task"].get(k, 0.0) for k in ("reassign_rate", "noise_rate", "chain_rate")}
    common = {"variant": name, "seed": seed, "modulus": config["task"]["modulus"], **settings,
              "seq_len": config["task"]["seq_len"], "max_assignments": config["task"]["max_assignments"],
              "n_layers": config["model"]["n_layers"], "steps": results["steps"], "forward": results["forward"],
              "precision": config["train"].get("precision", "auto"),
              "outcome": results["outcome"]["outcome"], "train_wall_time_s": results["train_wall_time_s"],
              # the three phases' onsets (compose_lens.training.phases on the logged pools; empty: not reached)
              **{f"onset_{phase}": step for phase, step in results["outcome"].get("onsets", {}).items()}}
    out = [{**common, "pool": pool, "accuracy": acc, "n": config["train"]["pool_size"]}
           for pool, acc in results["pools"].items()]
    out += [{**common, "pool": set_name, "accuracy": r["accuracy"], "n": r["total"]}
            for set_name, r in results["exhaustive"].items()]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="p = 7, 40 steps: check the script runs")
    parser.add_argument("--scale", choices=("proxy", "study"), default="proxy",
                        help="proxy: p = 11, 3,000 steps (default); study: p = 59, up to 30,000 steps, "
                             "stopped once the headline holds or the stall detector is certain")
    parser.add_argument("--out", type=Path, help="the CSV to write (default: by scale, under "
                                                 "experiments/results/variants/)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    scale = "quick" if args.quick else args.scale
    work = ROOT / "runs" / {"quick": "variants_quick", "proxy": "variants", "study": "variants_study"}[scale]
    work.mkdir(parents=True, exist_ok=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = args.out or RESULTS / {"quick": "accuracy_quick.csv", "proxy": "accuracy.csv",
                                 "study": "study.csv"}[scale]
    jobs = [(name, seed) for seed in args.seeds for name in args.variants]
    # the rows of other (variant, seed) pairs already in the CSV are kept: a study is run in parts
    kept = pd.read_csv(out) if out.exists() else pd.DataFrame(columns=["variant", "seed"])
    kept = kept[[(v, s) not in set(jobs) for v, s in zip(kept["variant"], kept["seed"])]]
    rows = kept.to_dict(orient="records")
    for name, seed in tqdm(jobs, desc="variants", disable=args.quiet):
        start = time.time()
        rows += rows_of(name, seed, run_variant(name, seed, scale, work))
        if not args.quiet:
            tqdm.write(f"{name} seed {seed}: {time.time() - start:.0f} s")
        pd.DataFrame(rows).to_csv(out, index=False)  # after every run: a stopped study keeps what it has
    table = pd.DataFrame(rows)
    wide = table.pivot_table(index="pool", columns="variant", values="accuracy", aggfunc="mean", sort=False)
    print(wide.round(3).to_string())
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
