"""How fast the command line answers: --help, every subcommand's --help, and an argument error.

    python experiments/bench_cli.py [--repeats 3]

Each invocation is a fresh ``python -m compose_lens.cli ...`` process, timed from start to
exit (the median of ``--repeats``). The baseline is what every one of them cost before the
command line imported the library lazily: a process that imports torch and
TransformerLens (``import compose_lens.training.runs``) and exits. The goal is under 1.5 s each on
an idle 2-core machine.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

COMMANDS = ["data", "train", "evaluate", "analyze", "fourier", "attention", "patch", "ablate",
            "dynamics", "report", "sweep"]
GOAL_S = 1.5


def wall(argv: list[str], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run([sys.executable, *argv], capture_output=True, timeout=300)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cli = ["-m", "compose_lens.cli"]
    baseline = wall(["-c", "import compose_lens.training.runs"], args.repeats)
    cases = [("compose-lens --help", cli + ["--help"]),
             *[(f"compose-lens {c} --help", cli + [c, "--help"]) for c in COMMANDS],
             ("argument error: evaluate (no MODEL)", cli + ["evaluate"]),
             ("argument error: patch --corruption bogus", cli + ["patch", "paper", "--out", "x",
                                                                 "--corruption", "bogus"])]
    print(f"baseline (import torch + TransformerLens, then exit): {baseline:.3f} s")
    print(f"{'invocation':44s} {'seconds':>8s} {'x faster':>9s}  goal < {GOAL_S} s")
    worst = 0.0
    for label, argv in cases:
        t = wall(argv, args.repeats)
        worst = max(worst, t)
        print(f"{label:44s} {t:8.3f} {baseline / t:9.1f}  {'ok' if t < GOAL_S else 'OVER'}")
    print(f"slowest: {worst:.3f} s ({'meets' if worst < GOAL_S else 'misses'} the {GOAL_S} s goal)")


if __name__ == "__main__":
    main()
