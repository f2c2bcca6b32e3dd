"""Benchmark: the long analysis commands, this tree against an older one, runs interleaved.

    python experiments/bench_analyses.py [--before DIR] [--rounds 3] [--only analyze,evaluate,dynamics]

The commands, as a user types them (each a fresh process, imports included):

* ``compose-lens analyze paper`` (goal: 10 s on 2 idle cores);
* ``compose-lens evaluate paper --exhaustive --json`` (193,580 sequences; goal 5 s);
* ``compose-lens dynamics ../shared/reference`` (the study's 24 checkpoints; goal 0.5 s per
  checkpoint, the figure the command prints itself, imports and start-up excluded).

``--before DIR`` is a checkout of an older commit (``git worktree add /tmp/before a369b47``):
each round runs every command from that tree and from this one, in alternating order, so
both see the same machine load (read the ratios, and the load average printed with them).
The medians of ``--rounds`` are reported. Without ``--before`` only this tree is timed.

``--settle S`` waits, before each run, up to S seconds for the 1-minute load average to
fall under 0.5. The commands choose their threads (and ``analyze`` whether to draw in a
worker) from the load average, so back-to-back runs see their own load and time the
busy-machine path; the goals are for idle cores.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
REFERENCE = HERE.parent / "shared" / "reference"
GOALS = {"analyze": 10.0, "evaluate": 5.0, "dynamics": 0.5}
PER_CHECKPOINT = re.compile(r"\(([\d.]+) s each")


def load() -> str:
    return "load average %.2f %.2f %.2f" % os.getloadavg()


def command(name: str, out: Path) -> list[str]:
    cli = [sys.executable, "-m", "compose_lens.cli"]
    if name == "analyze":
        return cli + ["analyze", "paper", "--out", str(out / "analyze"), "--quiet", "--overwrite"]
    if name == "evaluate":
        return cli + ["evaluate", "paper", "--exhaustive", "--json", "--quiet"]
    return cli + ["dynamics", str(REFERENCE), "--out", str(out / "dynamics"), "--quiet", "--overwrite"]


def settle(limit: float) -> None:
    """Wait up to ``limit`` seconds for the 1-minute load average to fall under 0.5."""
    deadline = time.monotonic() + limit
    while os.getloadavg()[0] >= 0.5 and time.monotonic() < deadline:
        time.sleep(2)


def run(tree: Path, name: str, out: Path) -> float:
    """Seconds of one command run from ``tree`` (dynamics: its own seconds per checkpoint)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    started = time.perf_counter()
    done = subprocess.run(command(name, out), cwd=tree, env=env, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {name} failed:\n{done.stderr[-2000:]}")
    if name == "dynamics":
        return float(PER_CHECKPOINT.search(done.stdout).group(1))
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="a checkout of the commit to compare against")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="analyze,evaluate,dynamics")
    parser.add_argument("--settle", type=float, default=0.0,
                        help="seconds to wait, at most, for a load average under 0.5 before each run")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n]
    if "dynamics" in names and not (REFERENCE / "final.pth").exists():
        print(f"no study checkpoints at {REFERENCE}: dynamics skipped")
        names.remove("dynamics")
    trees = {"after": HERE} | ({"before": args.before.resolve()} if args.before else {})
    times = {(tree, name): [] for tree in trees for name in names}
    print(f"start: {load()}, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = list(trees.items()) if r % 2 == 0 else list(reversed(trees.items()))
            for name in names:
                for label, tree in order:
                    settle(args.settle)
                    times[(label, name)].append(run(tree, name, Path(tmp) / label))
            print(f"round {r + 1}: {load()}")
    print(f"\n{'command':10s} {'unit':18s} " + " ".join(f"{t:>8s}" for t in trees)
          + ("  speed-up" if args.before else "") + "  goal")
    for name in names:
        unit = "s per checkpoint" if name == "dynamics" else "s, whole command"
        med = {t: statistics.median(times[(t, name)]) for t in trees}
        ratio = f"  {med['before'] / med['after']:7.2f}x" if args.before else ""
        mark = "ok" if med["after"] <= GOALS[name] else "OVER"
        print(f"{name:10s} {unit:18s} " + " ".join(f"{med[t]:8.2f}" for t in trees)
              + f"{ratio}  {GOALS[name]} ({mark})")
    print(f"end: {load()}")


if __name__ == "__main__":
    main()
