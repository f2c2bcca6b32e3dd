"""Print the tables of experiments/results/sweeps/README.md from the sweeps' results.csv files.

For each sweep: per value, the seed-mean (and per-seed) final exhaustive accuracies and
the final 2-var add-restricted pool, then the thresholds of compose_lens.sweep's rule.

Run: ``.venv/bin/python experiments/sweep_tables.py experiments/results/sweep_f.csv ...``
"""

from __future__ import annotations

import math
import sys
from collections import defaultdict

from compose_lens.analysis.thresholds import format_thresholds, thresholds
from compose_lens.sweep import read_csv


def _num(raw: str) -> float:
    return float(raw) if raw not in ("", None) else float("nan")


def table(path: str) -> None:
    rows = read_csv(path)
    param = rows[0]["param"]
    columns = ("zero_var_heldout_accuracy", "two_var_union_accuracy", "2var_add_restricted_accuracy",
               "2var_var_restricted_1_accuracy")
    by_value: dict[float, list[dict]] = defaultdict(list)
    for r in rows:
        by_value[float(r["value"])].append(r)
    print(f"\n{path}\n")
    print(f"| {param} | " + " | ".join(c.replace("_accuracy", "") for c in columns) + " | status |")
    print("|---" * (len(columns) + 2) + "|")
    for value in sorted(by_value):
        cells = []
        for c in columns:
            accs = [_num(r[c]) for r in by_value[value]]
            finite = [a for a in accs if not math.isnan(a)]
            mean = sum(finite) / len(finite) if finite else float("nan")
            cells.append(f"{mean:.3f} ({', '.join(f'{a:.2f}' for a in accs)})")
        status = ", ".join(sorted({r["status"] for r in by_value[value]}))
        print(f"| {value:g} | " + " | ".join(cells) + f" | {status} |")
    print()
    for line in format_thresholds(thresholds(rows), param):
        print("- " + line)
    extra = thresholds(rows, metrics=("2var_add_restricted",))
    for line in format_thresholds(extra, param):
        print("- (pool) " + line)


if __name__ == "__main__":
    for csv_path in sys.argv[1:]:
        table(csv_path)
