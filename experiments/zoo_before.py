"""The verdict zoo read by whatever compose-lens is importable: the "before" column of docs/zoo.md.

    git worktree add /tmp/before de37067
    PYTHONPATH=/tmp/before python experiments/zoo_before.py --out experiments/results/zoo/before_de37067.csv

Only what both versions have is called (``locate.locate``'s roles, ``same_mlp.same_mlp_report``'s
verdict, ``compose_lens.load_subject``), so the same script reads the zoo with the code before the verdict gates
(de37067) and after; experiments/zoo.py scores the current code. The models are the zoo's
(``experiments/results/zoo/index.csv``): trained ones from their committed folders, planted ones rebuilt
by experiments/zoo_planted.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))

import zoo_planted  # noqa: E402

import compose_lens  # noqa: E402
from compose_lens.analysis import locate  # noqa: E402
from compose_lens.registry.same_mlp import comparisons as same_mlp  # noqa: E402
from compose_lens import load_subject  # noqa: E402


def subject_of(made_by: str, name: str, paper):
    """A zoo model from its index row: a committed folder, or a planted builder's call."""
    if not made_by.startswith("experiments/zoo_planted.py"):
        return load_subject(ROOT / "experiments" / "results" / "zoo" / "models" / name)
    builder, args = made_by.split(" ", 1)[1].split("(", 1)  # builder(paper, arg, ...)
    return zoo_planted.build(builder, paper, *[a.strip() for a in args.rstrip(")").split(",")[1:]])[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--index", type=Path, default=ROOT / "experiments" / "results" / "zoo" / "index.csv")
    a = ap.parse_args(argv)
    index = pd.read_csv(a.index)
    paper = load_subject("paper")
    rows = []
    for row in index.to_dict("records"):
        subject = subject_of(row["made_by"], row["model"], paper)
        found = locate.locate(subject)
        try:
            report = same_mlp.same_mlp_report(subject, n=200)
            verdict, reason = report["verdict"], report["verdict_reason"]
        except compose_lens.ComposeLensError as refused:
            verdict, reason = "refused", str(refused)
        rows.append({"model": row["model"], "class": row["class"],
                     **{k: v for k, v in row.items() if k.startswith("truth_")},
                     **{f"located_{r.role}": r.component or "none" for r in found.roles()},
                     "same_mlp": verdict, "same_mlp_reason": reason,
                     "code_version": compose_lens.code_version()})
        print(f"{row['model']}: {rows[-1]['located_binder']}, {rows[-1]['located_router']}, {rows[-1]['located_adder']}; "
              f"same-MLP {verdict}", flush=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(a.out, index=False)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
