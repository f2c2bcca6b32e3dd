"""How much the drawn prompt pairs move the paper model's separation score (docs/modularity.md, (a)).

    python experiments/modularity_intervals.py            # experiments/results/modularity/separation_intervals.csv

The separation of binding and addition (:func:`compose_lens.registry.modularity.measures.separation`) is read
from EAP-IG attributions over two sets of prompt pairs; its 95 % bootstrap interval resamples both
sets and recomputes the two profiles from each pair's own attribution. This measures it on the
shipped paper model (``load_model("paper")``) with few pairs and few integration steps and with the
pairs and steps the modularity grid uses (:data:`SETTINGS`), one row each: pairs, steps, seed, the
separation, its interval and the two skills' logit effects. Each row takes about a second on one
CPU thread.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
import torch

from compose_lens.registry.modularity import measures as modularity
from compose_lens.core.files import write_json_atomic
from compose_lens.core.provenance import provenance
from compose_lens.training.subject import load_model

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "experiments" / "results" / "modularity" / "separation_intervals.csv"
# (pairs per set, EAP-IG steps): few, and what modularity_grid.py measures with (n_pairs=120, steps=8)
SETTINGS = ((20, 4), (120, 8))


def measure(model: str = "paper", settings=SETTINGS, seed: int = 0) -> pd.DataFrame:
    loaded = load_model(model, bridge=False)
    rows = []
    for n_pairs, steps in settings:
        found = modularity.separation(loaded, n_pairs=n_pairs, seed=seed,
                                      steps=steps)
        if found["separation"] == modularity.INCONCLUSIVE:
            rows.append({"model": model, "pairs": n_pairs, "steps": steps, "seed": seed,
                         "separation": found["separation"], "why": found["why"]})
            continue
        low, high = found["separation_ci95"]
        rows.append({"model": model, "pairs": n_pairs, "steps": steps, "seed": seed,
                     "separation": found["separation"], "low": low, "high": high,
                     "binding_effect": found["binding_effect"], "adding_effect": found["adding_effect"],
                     "why": None})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help="the CSV to write (a provenance JSON goes beside it)")
    args = parser.parse_args(argv)
    if args.out.is_dir():
        print(f"modularity_intervals: error: --out {args.out}: is a folder; name the CSV to write", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    table = measure()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False)
    write_json_atomic(args.out.with_suffix(".provenance.json"),
                      provenance(seed=0, source="paper", command=["python", *sys.argv]))
    print(table.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
