"""Which logged runs ever read ``diverged``, and did any come back? The evidence for ``stop_at=decided``.

    python experiments/divergence_scan.py                       # runs/ and experiments/results/
    python experiments/divergence_scan.py some/dir other/dir    # any folders holding run directories

Walks every ``metrics.jsonl`` under the folders, and judges each run's loss at every evaluation on the
evaluations up to it (:func:`compose_lens.training.outcome.diverged`, what ``train`` sees while it trains). A run
that reads diverged and later does not *came back*: the longest stretch of diverged readings a run came
back from is what :data:`compose_lens.training.outcome.DIVERGED_STOP_AFTER` must exceed, or ``stop_at=decided``
would stop a run that would have recovered. Prints one row per run that ever read diverged, and a
count; ``--csv`` writes the rows.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from compose_lens.training import outcome

from compose_lens.training import runs  # noqa: E402


def readings(metrics: list[dict]) -> list[bool]:
    """Whether the loss reads diverged at each evaluation, judged on the evaluations up to it."""
    return [outcome.diverged(metrics[:i + 1]) is not None for i in range(len(metrics))]


def came_back_after(flags: list[bool]) -> int:
    """The longest stretch of diverged readings that a later reading was not (0: none came back)."""
    longest, stretch = 0, 0
    for flag in flags:
        if flag:
            stretch += 1
        else:
            longest, stretch = max(longest, stretch), 0
    return longest


def scan(folders: list[Path]) -> tuple[int, pd.DataFrame]:
    """(how many runs were read, one row per run that ever read diverged)."""
    found = sorted({p.resolve().parent for folder in folders for p in folder.rglob("metrics.jsonl") if p.is_file()})
    rows = []
    for run in found:
        metrics = [m for m in runs.read_metrics(run) if isinstance(m.get("train_loss"), (int, float))
                   and not isinstance(m.get("train_loss"), bool) and isinstance(m.get("step"), int)]
        flags = readings(metrics)
        if any(flags):
            name = run.relative_to(ROOT) if run.is_relative_to(ROOT) else run
            rows.append({"run": str(name), "first_diverged_at": metrics[flags.index(True)]["step"],
                         "last_step": metrics[-1]["step"], "last_loss": metrics[-1]["train_loss"],
                         "came_back_after": came_back_after(flags), "diverged_at_end": flags[-1]})
    return len(found), pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folders", nargs="*", type=Path, default=[ROOT / "runs", ROOT / "experiments" / "results"])
    parser.add_argument("--csv", type=Path, default=None, help="write the rows here")
    args = parser.parse_args(argv)

    def refuse(line: str) -> None:  # bad input: one line, exit 2, as the command line's
        print(f"divergence_scan: error: {line}", file=sys.stderr)
        raise SystemExit(2)

    for folder in args.folders:
        if folder.exists() and not folder.is_dir():
            refuse(f"{folder}: is a file, not a folder; name folders that hold run directories")
    if args.csv is not None and (args.csv.is_dir() or not args.csv.parent.is_dir()):
        refuse(f"--csv {args.csv}: {'is a folder' if args.csv.is_dir() else 'its folder does not exist'}; "
               f"give a file name in an existing folder")
    missing = [str(f) for f in args.folders if not f.is_dir()]
    if len(missing) == len(args.folders):
        refuse(f"no folder to scan ({', '.join(missing)}); name folders that hold runs")
    n, frame = scan([f for f in args.folders if f.is_dir()])
    if len(frame):
        print(frame.to_string(index=False))
        if args.csv:
            frame.to_csv(args.csv, index=False)
    back = int((frame["came_back_after"] > 0).sum()) if len(frame) else 0
    longest = int(frame["came_back_after"].max()) if len(frame) else 0
    print(f"{n} runs, {len(frame)} ever read diverged, {back} came back (after at most {longest} readings in a row); "
          f"stop_at=decided stops after {outcome.DIVERGED_STOP_AFTER}")


if __name__ == "__main__":
    main()
