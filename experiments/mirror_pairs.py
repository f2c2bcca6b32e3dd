"""Below f*, the held-out pairs a model solves are those whose mirror it was trained on.

    python experiments/mirror_pairs.py                        # every committed f-sweep run
    python experiments/mirror_pairs.py --model RUN_DIR        # one trained run, pair by pair

Below the generalisation threshold f* the exhaustive 0-var held-out accuracy of the f sweep sits
at about f (f = 0.1: 0.098-0.101). Addition commutes: a held-out pair (x, y) has the answer of its
*mirror* (y, x), and when the training pairs are a uniform fraction f of the p^2 pairs, a share of
about f of the held-out pairs have their mirror in training. A model that memorised the training
pairs and reads its two operands symmetrically answers exactly those.

* Without ``--model`` (committed data only): for each run of ``experiments/results/sweeps/f``, the
  split is rebuilt from its ``config.json`` and the share of held-out pairs whose mirror was
  trained is set beside the run's 0-var held-out accuracy (``mirror_pairs.csv``). A diagonal pair
  (x, x) is its own mirror, so it never has a trained one.
* With ``--model RUN_DIR`` (a run with its weights): each held-out pair's answer, and the accuracy
  on the pairs whose mirror was trained against the accuracy on the others (chance is 1/p), each
  with its Wilson interval.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from compose_lens.core import stats  # noqa: E402
from compose_lens.core.config import RunConfig  # noqa: E402
from compose_lens.data.split import Split  # noqa: E402
from compose_lens.core.files import not_there  # noqa: E402

SWEEP = ROOT / "experiments" / "results" / "sweeps" / "f"


def mirror_trained(split: Split) -> torch.Tensor:
    """(n_heldout,) bool: was the mirror (y, x) of each held-out pair (x, y) a training pair?"""
    x, y = split.heldout_pairs[:, 0], split.heldout_pairs[:, 1]
    return split.is_train[y, x]


def sweep_table(sweep: Path = SWEEP) -> pd.DataFrame:
    """One row per committed sweep run: f, seed, the held-out pairs' mirror-trained share and the
    run's exhaustive 0-var held-out accuracy (with its Wilson interval over the held-out pairs)."""
    rows = []
    for run in sorted((sweep / "runs").glob("*")):
        if not (run / "results.json").exists():
            continue
        config = RunConfig.from_dict(json.loads((run / "config.json").read_text()))
        mirror = mirror_trained(Split.from_task(config.task))
        held = json.loads((run / "results.json").read_text())["exhaustive"]["zero_var_heldout"]
        low, high = stats.wilson_interval(held["correct"], held["total"])
        rows.append({"run": run.name, "f": config.task.f, "seed": config.task.seed,
                     "heldout_pairs": len(mirror), "mirror_trained_share": mirror.float().mean().item(),
                     "zero_var_heldout": held["accuracy"], "ci_low": low, "ci_high": high})
    return pd.DataFrame(rows)


def split_by_mirror(correct: torch.Tensor, mirror: torch.Tensor) -> dict:
    """Accuracy on the held-out pairs whose mirror was trained and on the others, with intervals."""
    out = {}
    for name, rows in (("mirror_trained", mirror), ("mirror_not_trained", ~mirror)):
        rate = stats.Rate.of(int(correct[rows].sum()), int(rows.sum()))
        out[name] = rate.as_dict()
    return out


def per_pair(run_dir: Path) -> dict:
    """A trained run's held-out pairs, answered or not, split by whether the mirror was trained."""
    from compose_lens.data.sampler import make_exhaustive
    from compose_lens.training.evaluate import correct_mask
    from compose_lens.training.subject import final_model

    loaded, which = final_model(run_dir)
    batch = make_exhaustive(loaded.split, "zero_var_heldout")  # rows in split.heldout_pairs' order
    correct = correct_mask(loaded.model, loaded.config.model, batch)
    return {"run": str(run_dir), "model": which, "f": loaded.config.task.f,
            "chance": 1 / loaded.config.task.modulus,
            **split_by_mirror(correct, mirror_trained(loaded.split))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", type=Path, help="a trained run directory: the pair-by-pair reading")
    p.add_argument("--sweep", type=Path, default=SWEEP, help="an f-sweep folder (default: the committed one)")
    p.add_argument("--out", type=Path, help="write the table / JSON here (default: mirror_pairs.csv in --sweep)")
    a = p.parse_args(argv)
    if a.model is not None:
        if not_there(a.model, folder=True):
            print(f"error: --model {a.model}: {not_there(a.model, folder=True)}; give a run directory", file=sys.stderr)
            return 2
        found = per_pair(a.model)
        for name in ("mirror_trained", "mirror_not_trained"):
            r = found[name]
            print(f"held-out pairs, {name.replace('_', ' ')}: {stats.Rate.of(r['k'], r['n']).text()} answered")
        print(f"(chance {found['chance']:.3f}; {found['model']})")
        if a.out:
            a.out.write_text(json.dumps(found, indent=2) + "\n")
        return 0
    if not (a.sweep / "runs").is_dir():
        print(f"error: --sweep {a.sweep}: no runs/ folder; give a compose-lens sweep --out folder", file=sys.stderr)
        return 2
    table = sweep_table(a.sweep)
    out = a.out or a.sweep / "mirror_pairs.csv"
    table.to_csv(out, index=False)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
