"""How often the 95 % bootstrap interval of a sweep's threshold holds the true one (synthetic sweeps).

    python experiments/threshold_interval_coverage.py [--seeds 3] [--shift 0.0] [--sweeps 40] [--replicates 100]

Each synthetic sweep has 12 values (0.10 ... 0.65), ``--seeds`` seeds, and accuracies
lo + (hi - lo) / (1 + exp(-(v - x0_seed) / 0.03)) + N(0, 0.03), clipped to [0, 1], with
lo = 0.05, hi = 0.95 and x0_seed = 0.3 + N(0, ``--shift``). It prints the share of sweeps
whose 95 % interval for the 50 % crossing holds the true crossing of the x0 = 0.3 curve,
and the median interval width. The table in ``compose_lens.analysis.thresholds`` came from
``--shift 0`` and ``--shift 0.01`` (about a minute each on one core).
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np

from compose_lens.analysis.thresholds import fit_thresholds

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--seeds", type=int, default=3)
parser.add_argument("--shift", type=float, default=0.0, help="sd of each seed's threshold around 0.3")
parser.add_argument("--sweeps", type=int, default=40)
parser.add_argument("--replicates", type=int, default=100)
args = parser.parse_args()
for name in ("seeds", "sweeps", "replicates"):  # none of them: nothing to fit, or a division by zero (issue #45)
    if getattr(args, name) < 1:
        print(f"error: --{name} {getattr(args, name)}: give at least 1", file=sys.stderr)
        raise SystemExit(2)

values = np.round(np.arange(0.10, 0.70, 0.05), 3)
true = 0.3 + 0.03 * math.log((0.5 - 0.05) / (0.95 - 0.5))
held, widths = 0, []
for sweep in range(args.sweeps):
    rng = np.random.default_rng(1000 + sweep)
    rows = []
    for seed in range(args.seeds):
        x0 = 0.3 + rng.normal(0, args.shift)
        for v in values:
            acc = 0.05 + 0.90 / (1 + math.exp(-(v - x0) / 0.03)) + rng.normal(0, 0.03)
            rows.append({"value": str(v), "seed": str(seed), "status": "done",
                         "zero_var_heldout_accuracy": str(min(max(acc, 0.0), 1.0))})
    found = fit_thresholds(rows, "zero_var_heldout", levels=(0.5,), replicates=args.replicates, rng_seed=sweep)
    low, high = found["levels"]["0.5"]["ci95"]
    held += low is not None and high is not None and low <= true <= high
    widths.append(float("nan") if low is None or high is None else high - low)
print(f"{args.seeds} seeds, shift sd {args.shift}: {held}/{args.sweeps} intervals hold the true crossing "
      f"({held / args.sweeps:.0%}); median width {np.nanmedian(widths):.4f}")
