"""Sweeps: how the final accuracies move with f, r or any other setting (SPEC 6.8).

The study's Figure 3 asks two questions. How many addition pairs must training
see before the model adds *held-out* pairs (final 0-var held-out accuracy against
f, at r = 1)? And how often must 2-var sequences appear before the model composes
variables (final 2-var union accuracy against r, at f = 0.7)? A sweep answers
such a question for any setting: one training run per (value, seed) *point*.

A sweep is a directory::

    SWEEP/sweep.json          what was asked: the parameter, values, seeds, base config
    SWEEP/runs/f=0.25_seed=0/ one ordinary run directory per point (see compose_lens.train)
    SWEEP/results.csv         one row per point: final exhaustive and pool accuracies, the
                              step at which each of the nine pools first reached 90 %, status, error
    SWEEP/thresholds.json     the threshold estimate per metric and level, per seed and spread
    SWEEP/sweep.png           accuracy against the parameter, one line per seed plus the mean

**Seeds.** A sweep seed ``s`` sets all three seeds of a run: the split
(``task.seed``: which pairs are held out), the data order and pools
(``train.seed``) and the initial weights (``model.init_seed``). Training is
deterministic given these and the thread count, so a point gives the same
numbers on either backend.

**The threshold rule** (:func:`threshold`). For one seed, sort the points by
parameter value. The threshold at level L is where the accuracy curve crosses L
for the last time from below: take the smallest value v_i from which on every
accuracy is at least L, and interpolate linearly between (v_{i-1}, a_{i-1}) and
(v_i, a_i). If even the smallest value reaches L the threshold is reported as
that value (it lies at or below the swept range); if the largest value stays
below L it is NaN (above the range). The spread is the mean, standard deviation,
minimum and maximum over seeds; the threshold of the seed-mean curve is given too.
"Last crossing from below" rather than "first value above L" keeps a single
lucky point below the true transition from deciding the estimate.

**Faults.** Points whose ``results.json`` exists are skipped; a point whose
directory holds a checkpoint resumes from it (``Trainer(resume=True)``), so a
killed sweep is restarted by running the same command again. A point that raises
is recorded (``error.json`` in its directory, ``status=failed`` and the message
in ``results.csv``) and the other points go on; the next run of the command tries
it again. While a point trains, its process holds a lock on ``runs/POINT.lock``, so
a point is never trained by two processes at once (say, a restarted sweep and an
orphaned worker of the killed one).

**Backends.** ``local`` runs points in parallel worker processes sized to the
machine: ``workers * threads <= cores``, each worker one torch thread pool of
``threads`` threads (one worker runs in this process). ``ray`` sends the same
function to a Ray cluster (``address``), or to a local Ray it starts, each point
a task asking for ``threads`` CPUs; the run directories must then lie on a file
system every Ray node can write.

**Batched training was measured and not shipped**: see
``experiments/bench_sweep_batched.py`` and ``experiments/results/SWEEPS.md``.

>>> threshold([0.1, 0.2, 0.3, 0.4], [0.0, 0.2, 0.8, 1.0], level=0.5)
0.25
"""

from __future__ import annotations

import csv
import fcntl
import json
import math
import os
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from tqdm.auto import tqdm

from compose_lens.config import ComposeLensError, ConfigError, RunConfig, load_json, write_json_atomic
from compose_lens.sampler import EXHAUSTIVE_NAMES, POOL_NAMES

POOLS = POOL_NAMES  # the nine accuracy pools of SPEC section 3
METRICS = EXHAUSTIVE_NAMES  # the two exhaustive end-of-training evaluations
LEVELS = (0.5, 0.9)
FIRST_PASS_LEVEL = 0.9
BACKENDS = ("local", "ray")


# -- the points of a sweep ----------------------------------------------------------------


@dataclass(frozen=True)
class SweepPoint:
    """One training run of a sweep: the swept setting at one value, with one seed."""

    param: str
    value: Any
    seed: int

    @property
    def name(self) -> str:
        """Directory name, e.g. ``f=0.25_seed=0``."""
        return f"{self.param}={format_value(self.value)}_seed={self.seed}"

    def config(self, base: RunConfig) -> RunConfig:
        """The base configuration with this point's value and seeds."""
        return base.with_overrides([
            f"{self.param}={json.dumps(self.value)}",
            f"task.seed={self.seed}", f"train.seed={self.seed}", f"model.init_seed={self.seed}",
        ])


def format_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def parse_values(raw: Iterable[str]) -> list[Any]:
    """Values as typed on the command line: JSON numbers or strings, or ``start:stop:num``.

    ``0.05:1:20`` means 20 evenly spaced values from 0.05 to 1 inclusive.

    >>> parse_values(["0.1", "0.5", "adam"])
    [0.1, 0.5, 'adam']
    >>> parse_values(["0:1:5"])
    [0.0, 0.25, 0.5, 0.75, 1.0]
    """
    out: list[Any] = []
    for item in raw:
        parts = item.split(":")
        if len(parts) == 3:
            try:
                start, stop, num = float(parts[0]), float(parts[1]), int(parts[2])
            except ValueError:
                raise ComposeLensError(f"--values {item!r}: a range is start:stop:num, e.g. 0.05:1:20") from None
            if num < 2:
                raise ComposeLensError(f"--values {item!r}: a range needs at least 2 values")
            out += [round(start + (stop - start) * i / (num - 1), 6) for i in range(num)]
            continue
        try:
            out.append(json.loads(item))
        except json.JSONDecodeError:
            out.append(item)
    if not out:
        raise ComposeLensError("--values: give at least one value")
    if len({json.dumps(v) for v in out}) != len(out):
        raise ComposeLensError(f"--values {list(raw)}: a value is repeated")
    return out


def sweep_points(param: str, values: Sequence[Any], seeds: Sequence[int]) -> list[SweepPoint]:
    """Every (value, seed), values outermost, in the order given."""
    if not seeds:
        raise ComposeLensError("--seeds: give at least one seed")
    if len(set(seeds)) != len(seeds):
        raise ComposeLensError(f"--seeds {list(seeds)}: a seed is repeated")
    return [SweepPoint(param, v, int(s)) for v in values for s in seeds]


def check_points(base: RunConfig, points: Sequence[SweepPoint]) -> dict[SweepPoint, RunConfig]:
    """Every point's configuration, refusing the sweep at once if one cannot be made."""
    configs = {}
    for point in points:
        try:
            configs[point] = point.config(base)
        except ConfigError as exc:
            raise ComposeLensError(f"point {point.name}: {exc}") from None
    return configs


# -- sizing the workers to the machine ---------------------------------------------------


def available_cores() -> int:
    """CPU cores this process may use (the affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def plan_workers(n_points: int, workers: int | None = None, threads: int | None = None,
                 cores: int | None = None) -> tuple[int, int]:
    """(workers, threads per worker) with ``workers * threads <= cores``.

    By default one worker per core (a point of the paper model uses one core
    about as well as two: its matrices are small), fewer when there are fewer
    points, and the spare cores given to the workers as threads.

    >>> plan_workers(32, cores=2)
    (2, 1)
    >>> plan_workers(1, cores=8)
    (1, 8)
    >>> plan_workers(32, workers=3, cores=8)
    (3, 2)
    """
    cores = cores or available_cores()
    if workers is not None and workers < 1:
        raise ComposeLensError(f"--workers {workers}: use at least 1")
    if threads is not None and threads < 1:
        raise ComposeLensError(f"--threads {threads}: use at least 1")
    workers = workers or (max(1, min(n_points, cores // threads)) if threads else max(1, min(n_points, cores)))
    threads = threads or max(1, cores // workers)
    if workers * threads > cores:
        raise ComposeLensError(f"--workers {workers} x --threads {threads} = {workers * threads} threads "
                               f"on {cores} cores would oversubscribe the machine; lower one of them")
    return workers, threads


# -- one point: train (or resume), or report why not --------------------------------------


def train_point(config: dict, run_dir: str, threads: int) -> dict:
    """Train one point to the end in ``run_dir``, resuming from its checkpoint if any.

    Runs in a worker (a process of the pool, a Ray task, or this process), so it
    takes and returns plain data, and never raises: a failure comes back as
    ``{"status": "failed", "error": ...}`` and is written to ``error.json``.
    """
    import torch

    from compose_lens.train import Trainer

    torch.set_num_threads(threads)
    directory = Path(run_dir)
    directory.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    # the lock sits beside the run directory: the trainer wants that directory to itself
    with open(directory.with_name(directory.name + ".lock"), "w") as lock:
        try:  # a worker of an earlier, killed sweep may still be training this point
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return {"status": "failed", "error": f"{directory} is being trained by another process; "
                                                  f"run the sweep again when it is done", "wall_s": 0.0}
        (directory / "error.json").unlink(missing_ok=True)
        try:
            Trainer(RunConfig.from_dict(config), directory, resume=True, progress=False).run()
        except Exception as exc:  # one failing point must not stop the sweep
            error = f"{type(exc).__name__}: {exc}".splitlines()[0]
            directory.mkdir(parents=True, exist_ok=True)
            write_json_atomic(directory / "error.json", {"error": error, "traceback": traceback.format_exc()})
            return {"status": "failed", "error": error, "wall_s": time.perf_counter() - started}
    return {"status": "done", "error": "", "wall_s": time.perf_counter() - started}


def _init_worker(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


# -- reading a finished point ---------------------------------------------------------------


def first_step_above(metrics: Sequence[dict], pool: str, level: float = FIRST_PASS_LEVEL) -> int | None:
    """The first evaluated step at which ``pool`` reached ``level`` (None if never).

    >>> first_step_above([{"step": 100, "x": 0.5}, {"step": 200, "x": 0.95}], "x")
    200
    """
    for line in sorted(metrics, key=lambda m: m["step"]):
        if line.get(pool, -1.0) >= level:
            return int(line["step"])
    return None


def read_metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def point_row(point: SweepPoint, run_dir: Path, status: str = "", error: str = "") -> dict:
    """The results.csv row of one point, read from its run directory."""
    row: dict[str, Any] = {"param": point.param, "value": format_value(point.value), "seed": point.seed,
                           "status": status, "error": error, "steps": "", "train_wall_time_s": ""}
    for name in METRICS + POOLS:  # final exhaustive accuracies, then final pool accuracies
        row[f"{name}_accuracy"] = ""
    for pool in POOLS:
        row[f"first_step_90_{pool}"] = ""
    results_file = run_dir / "results.json"
    if results_file.exists():
        results = load_json(results_file)
        row.update(status="done", error="", steps=results["steps"],
                   train_wall_time_s=results.get("train_wall_time_s", ""))
        for metric in METRICS:
            row[f"{metric}_accuracy"] = results["exhaustive"][metric]["accuracy"]
        for pool in POOLS:
            row[f"{pool}_accuracy"] = results.get("pools", {}).get(pool, "")
    elif not status and (run_dir / "error.json").exists():
        row.update(status="failed", error=load_json(run_dir / "error.json")["error"])
    elif not status:
        row["status"] = "pending"
    metrics = read_metrics(run_dir)
    for pool in POOLS:
        step = first_step_above(metrics, pool)
        row[f"first_step_90_{pool}"] = "" if step is None else step
    row["run_dir"] = str(run_dir)
    return row


def write_csv(rows: Sequence[dict], path: Path) -> None:
    if not rows:
        return
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(path)


def read_csv(path: str | Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


# -- thresholds --------------------------------------------------------------------------


def threshold(values: Sequence[float], accuracies: Sequence[float], level: float) -> float:
    """Where the accuracy curve crosses ``level`` for the last time from below (module docstring).

    NaN accuracies (failed points) are dropped first.

    >>> threshold([0.1, 0.2, 0.3], [0.95, 0.97, 0.99], level=0.9)  # at or below the range
    0.1
    >>> threshold([0.1, 0.2, 0.3], [0.1, 0.2, 0.3], level=0.9)  # above the range
    nan
    >>> threshold([0.1, 0.2, 0.3, 0.4], [0.1, 0.9, 0.1, 0.9], level=0.5)  # the last crossing
    0.35
    """
    curve = sorted((float(v), float(a)) for v, a in zip(values, accuracies) if not math.isnan(float(a)))
    if not curve or curve[-1][1] < level:
        return float("nan")
    i = len(curve) - 1
    while i > 0 and curve[i - 1][1] >= level:
        i -= 1
    if i == 0:
        return curve[0][0]
    (v0, a0), (v1, a1) = curve[i - 1], curve[i]
    return round(v0 + (level - a0) / (a1 - a0) * (v1 - v0), 10)


def _spread(estimates: Sequence[float]) -> dict[str, float | int]:
    finite = [e for e in estimates if not math.isnan(e)]
    if not finite:
        return {"mean": float("nan"), "std": float("nan"), "min": float("nan"), "max": float("nan"), "n": 0}
    mean = sum(finite) / len(finite)
    std = math.sqrt(sum((e - mean) ** 2 for e in finite) / (len(finite) - 1)) if len(finite) > 1 else 0.0
    return {"mean": mean, "std": std, "min": min(finite), "max": max(finite), "n": len(finite)}


def _accuracy(row: dict, metric: str) -> float:
    raw = row.get(f"{metric}_accuracy", "")
    return float(raw) if raw not in ("", None) else float("nan")


def _numeric(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def thresholds(rows: Sequence[dict], metrics: Sequence[str] = METRICS,
               levels: Sequence[float] = LEVELS) -> dict:
    """Per metric and level: the threshold of each seed, their spread, and that of the mean curve.

    Only numeric parameter values have thresholds; for others this returns ``{}``.
    """
    if not rows or any(_numeric(r["value"]) is None for r in rows):
        return {}
    seeds = sorted({int(r["seed"]) for r in rows})
    values = sorted({float(r["value"]) for r in rows})
    out: dict[str, dict] = {}
    for metric in metrics:
        by_seed = {s: {float(r["value"]): _accuracy(r, metric) for r in rows if int(r["seed"]) == s}
                   for s in seeds}
        mean_curve = []
        for v in values:
            accs = [by_seed[s][v] for s in seeds if v in by_seed[s] and not math.isnan(by_seed[s][v])]
            mean_curve.append(sum(accs) / len(accs) if accs else float("nan"))
        out[metric] = {}
        for level in levels:
            per_seed = {str(s): threshold(list(by_seed[s]), list(by_seed[s].values()), level) for s in seeds}
            out[metric][str(level)] = {
                "per_seed": per_seed,
                **_spread(list(per_seed.values())),
                "of_mean_curve": threshold(values, mean_curve, level),
            }
    return out


# -- the figure ----------------------------------------------------------------------------


def plot_sweep(rows: Sequence[dict], path: Path, title: str = "") -> Path | None:
    """Figure-3 style: each metric against the parameter, one thin line per seed, the mean bold."""
    if not rows or any(_numeric(r["value"]) is None for r in rows):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    param = rows[0]["param"]
    seeds = sorted({int(r["seed"]) for r in rows})
    values = sorted({float(r["value"]) for r in rows})
    labels = {"zero_var_heldout": "0-var held-out accuracy", "two_var_union": "2-var union accuracy"}
    fig, axes = plt.subplots(1, len(METRICS), figsize=(5.2 * len(METRICS), 3.8), squeeze=False)
    for ax, metric in zip(axes[0], METRICS):
        table = {(int(r["seed"]), float(r["value"])): _accuracy(r, metric) for r in rows}
        for s in seeds:
            ys = [table.get((s, v), float("nan")) for v in values]
            ax.plot(values, ys, marker="o", ms=3, lw=1, alpha=0.55, label=f"seed {s}")
        mean = []
        for v in values:
            accs = [table[(s, v)] for s in seeds if (s, v) in table and not math.isnan(table[(s, v)])]
            mean.append(sum(accs) / len(accs) if accs else float("nan"))
        ax.plot(values, mean, color="black", lw=2.2, marker="o", ms=4, label="mean")
        for level in LEVELS:
            ax.axhline(level, color="grey", lw=0.6, ls=":")
        ax.set_xlabel(param)
        ax.set_ylabel(labels.get(metric, metric))
        ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.25)
    axes[0][0].legend(fontsize=8, loc="best")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- running a sweep ---------------------------------------------------------------------


@dataclass
class SweepResult:
    directory: Path
    rows: list[dict]
    thresholds: dict
    wall_s: float
    trained: int
    skipped: int
    failed: int


def run_dir_of(out: Path, point: SweepPoint) -> Path:
    return out / "runs" / point.name


def _check_finished(config: RunConfig, run_dir: Path) -> None:
    saved = load_json(run_dir / "results.json").get("config")
    if saved is not None and saved != config.to_dict():
        raise ComposeLensError(f"{run_dir} finished with another configuration than this sweep asks "
                               f"for; use a new --out or delete that point")


def _run_local(jobs: list[tuple[SweepPoint, dict, str]], workers: int, threads: int,
               done: Callable[[SweepPoint, dict], None]) -> None:
    if workers == 1:
        for point, config, run_dir in jobs:
            done(point, train_point(config, run_dir, threads))
        return
    import multiprocessing

    # spawn: a fresh interpreter per worker, so no torch thread pool is copied by fork
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_init_worker,
                             initargs=(threads,)) as pool:
        futures = {pool.submit(train_point, config, run_dir, threads): point
                   for point, config, run_dir in jobs}
        pending = set(futures)
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                try:
                    outcome = future.result()
                except Exception as exc:  # the worker process itself died
                    outcome = {"status": "failed", "error": f"worker died: {type(exc).__name__}: {exc}",
                               "wall_s": float("nan")}
                done(futures[future], outcome)


def _run_ray(jobs: list[tuple[SweepPoint, dict, str]], threads: int, address: str | None,
             done: Callable[[SweepPoint, dict], None]) -> None:
    try:
        import ray
    except ImportError:
        raise ComposeLensError("the ray backend needs Ray: pip install 'compose-lens[ray]'") from None
    started_here = not ray.is_initialized()
    if started_here:
        try:
            if address:
                ray.init(address=address, log_to_driver=False)
            else:
                ray.init(num_cpus=available_cores(), include_dashboard=False, log_to_driver=False)
        except ConnectionError as exc:
            raise ComposeLensError(f"--address {address}: cannot reach a Ray cluster ({exc})") from None
    try:
        remote = ray.remote(num_cpus=threads, max_retries=0)(train_point)
        refs = {remote.remote(config, run_dir, threads): point for point, config, run_dir in jobs}
        pending = list(refs)
        while pending:
            finished, pending = ray.wait(pending, num_returns=1)
            for ref in finished:
                try:
                    outcome = ray.get(ref)
                except Exception as exc:  # the task's worker died
                    outcome = {"status": "failed", "error": f"ray task died: {type(exc).__name__}: "
                                                            f"{str(exc).splitlines()[0] if str(exc) else ''}",
                               "wall_s": float("nan")}
                done(refs[ref], outcome)
    finally:
        if started_here:
            ray.shutdown()


def run_sweep(base: RunConfig, param: str, values: Sequence[Any], seeds: Sequence[int], out: str | Path,
              backend: str = "local", workers: int | None = None, threads: int | None = None,
              address: str | None = None, progress: bool = True) -> SweepResult:
    """Train every point not yet finished, then write results.csv, thresholds.json and sweep.png."""
    if backend not in BACKENDS:
        raise ComposeLensError(f"--backend {backend}: use {' or '.join(BACKENDS)}")
    out = Path(out)
    points = sweep_points(param, values, seeds)
    configs = check_points(base, points)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "sweep.json", {
        "param": param, "values": list(values), "seeds": list(seeds), "backend": backend,
        "base_config": base.to_dict(),
    })
    started = time.perf_counter()
    jobs, skipped = [], 0
    for point in points:
        run_dir = run_dir_of(out, point)
        if (run_dir / "results.json").exists():
            _check_finished(configs[point], run_dir)
            skipped += 1
        else:
            jobs.append((point, configs[point].to_dict(), str(run_dir)))
    if backend == "ray":  # Ray places the tasks on the cluster's CPUs; a task asks for `threads`
        threads = threads or 1
        workers = 0
    else:
        workers, threads = plan_workers(max(1, len(jobs)), workers, threads)
    outcomes: dict[SweepPoint, dict] = {}

    def rows_now() -> list[dict]:
        return [point_row(p, run_dir_of(out, p), outcomes.get(p, {}).get("status", ""),
                          outcomes.get(p, {}).get("error", "")) for p in points]

    bar = tqdm(total=len(points), initial=skipped, disable=not progress, unit="point", desc=f"sweep {param}",
               dynamic_ncols=True)
    bar.set_postfix_str(f"ray: {threads} thread(s) per task" if backend == "ray"
                        else f"local: {workers} worker(s) x {threads} thread(s)")

    def done(point: SweepPoint, outcome: dict) -> None:
        outcomes[point] = outcome
        write_csv(rows_now(), out / "results.csv")  # partial results survive a kill
        bar.update(1)
        if outcome["status"] == "failed":
            bar.write(f"point {point.name} failed: {outcome['error']}")

    try:
        if jobs and backend == "local":
            _run_local(jobs, workers, threads, done)
        elif jobs:
            _run_ray(jobs, threads, address, done)
    finally:
        bar.close()
    rows = rows_now()
    write_csv(rows, out / "results.csv")
    found = thresholds(rows)
    write_json_atomic(out / "thresholds.json", {"rule": THRESHOLD_RULE, "param": param,
                                                "thresholds": _nan_to_null(found)})
    plot_sweep(rows, out / "sweep.png", title=f"sweep over {param}, seeds {list(seeds)}")
    failed = sum(1 for r in rows if r["status"] == "failed")
    return SweepResult(out, rows, found, time.perf_counter() - started, len(jobs), skipped, failed)


def _nan_to_null(data: Any) -> Any:
    """Strict JSON: NaN (not reached) becomes null."""
    if isinstance(data, dict):
        return {k: _nan_to_null(v) for k, v in data.items()}
    if isinstance(data, float) and math.isnan(data):
        return None
    return data


THRESHOLD_RULE = ("per seed: the smallest swept value from which on every accuracy is >= level, "
                  "linearly interpolated with the value before it; the smallest value if all reach the "
                  "level, NaN if the largest does not")


def format_thresholds(found: dict, param: str) -> list[str]:
    """One line per metric and level; 'not reached' where the accuracy never stays above it."""

    def show(v: float) -> str:
        return "not reached" if math.isnan(v) else f"{v:.3g}"

    lines = []
    for metric, by_level in found.items():
        for level, t in by_level.items():
            seeds = ", ".join(f"seed {s}: {show(v)}" for s, v in t["per_seed"].items())
            head = (f"{param} = {t['mean']:.3g} +- {t['std']:.2g} (range {t['min']:.3g}..{t['max']:.3g}; "
                    if t["n"] else f"{param}: not reached (")
            lines.append(f"{metric} >= {float(level):.0%}: {head}{seeds}; mean curve {show(t['of_mean_curve'])})")
    return lines


# -- the command line ------------------------------------------------------------------------


def _cmd_sweep(args) -> int:
    from compose_lens.cli import run_config_from_args

    base = run_config_from_args(args)
    if args.steps is not None:
        base = base.with_overrides([f"train.steps={args.steps}"])
    if args.address and args.backend != "ray":
        raise ComposeLensError("--address is for --backend ray")
    result = run_sweep(base, args.param, parse_values(args.values), args.seeds, args.out,
                       backend=args.backend, workers=args.workers, threads=args.threads,
                       address=args.address, progress=not args.quiet)
    print(f"sweep over {args.param}: {len(result.rows)} points ({result.trained} trained, "
          f"{result.skipped} already finished, {result.failed} failed) in {result.wall_s:.1f} s")
    for line in format_thresholds(result.thresholds, args.param):
        print("  " + line)
    for row in result.rows:
        if row["status"] == "failed":
            print(f"  failed: {args.param}={row['value']} seed {row['seed']}: {row['error']}")
    print(f"results: {result.directory / 'results.csv'}, {result.directory / 'thresholds.json'}, "
          f"{result.directory / 'sweep.png'}")
    return 1 if result.failed else 0


def register(subparsers) -> None:
    """Add ``compose-lens sweep`` to the command line."""
    p = subparsers.add_parser(
        "sweep", help="train one run per (value, seed) of a setting; accuracy and threshold against it",
        description="Train one run per value x seed of a setting (f, r or any config key), in parallel, "
                    "resumable; write results.csv, thresholds.json and sweep.png. Run the same command "
                    "again to finish an interrupted sweep.")
    p.add_argument("--param", required=True, help="the swept setting: f, r, or any config key (e.g. train.lr)")
    p.add_argument("--values", required=True, nargs="+",
                   help="values (JSON), or start:stop:num for evenly spaced ones, e.g. 0.05:1:20")
    p.add_argument("--seeds", nargs="+", type=int, default=[0],
                   help="seeds; each sets the split, data order and initial weights (default: 0)")
    p.add_argument("--steps", type=int, help="training steps per point (default: the config's)")
    p.add_argument("--config", help="base run config JSON")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a base setting, e.g. --set r=1 --set eval_every=500")
    p.add_argument("--out", required=True, help="sweep directory")
    p.add_argument("--backend", choices=BACKENDS, default="local",
                   help="local: worker processes on this machine; ray: tasks on a Ray cluster")
    p.add_argument("--workers", type=int, help="parallel points (default: one per core)")
    p.add_argument("--threads", type=int, help="torch threads per point (default: cores / workers)")
    p.add_argument("--address", help="Ray cluster address (ray backend; default: start a local Ray)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_sweep)
