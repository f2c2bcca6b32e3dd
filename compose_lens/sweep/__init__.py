"""Sweeps: how the final accuracies move with f, r or any other setting (SPEC 6.8).

The study's Figure 3 asks how many addition pairs training must see before the model adds
*held-out* pairs (final 0-var held-out accuracy against f, at r = 1), and how often 2-var
sequences must appear before the model composes variables (final 2-var union accuracy
against r, at f = 0.7). A sweep answers such a question for any setting: one training run
per (value, seed) *point*. A sweep is a directory::

    SWEEP/sweep.json          what was asked: the parameter, values, seeds, base config
    SWEEP/runs/f=0.25_seed=0/ one ordinary run directory per point (see compose_lens.training.train)
    SWEEP/results.csv         one row per point: final exhaustive and pool accuracies, the
                              step at which each of the nine pools first reached 90 %, status, error
    SWEEP/thresholds.json     the threshold estimate per metric and level, per seed and spread
    SWEEP/sweep.png           accuracy against the parameter, one line per seed plus the mean

A sweep seed ``s`` sets all three seeds of a run (``task.seed``: the split; ``train.seed``:
data order and pools; ``model.init_seed``); training is deterministic given these and the
thread count, so a point gives the same numbers on either backend. This module makes the
points, sizes the workers, trains and collects the rows; the thresholds come from
:mod:`compose_lens.analysis.thresholds`, the figure from :func:`compose_lens.views.sweeps.sweep_figure`.

**Faults.** A finished point (``results.json``) is skipped and one with a checkpoint resumes,
so a killed sweep is restarted by running the same command again. A point that raises is
recorded (``error.json``, ``status=failed`` in ``results.csv``) and the others go on. A
training point's process holds a lock on ``runs/POINT.lock`` (never trained by two processes,
say a restarted sweep and an orphaned worker), and the sweep holds one on
``SWEEP/.compose-lens`` until its summary is written (a second sweep into ``--out`` is refused).

**Backends.** ``local``: worker processes with ``workers * threads <= cores`` (a single worker
runs in this process). ``ray``: each point a Ray task asking for ``threads`` CPUs and
``gpus_per_point`` GPUs (:func:`pin_to_ray_gpus`); the run directories must lie on a file
system every node writes. ``slurm``: one job array through submitit
(:mod:`compose_lens.sweep.slurm`). docs/cluster.md says how to use Ray's GPUs and SLURM.
Whichever backend trains them, ``results.csv`` is read from the same run directories.

**Runs per process.** ``runs_per_process`` K > 1 trains up to K compatible points of a worker
as one :class:`compose_lens.training.batched.BatchedTrainer` (``auto``: the K a short probe
finds fastest, recorded in ``sweep.json``): equal to points trained alone up to float
rounding, not bit for bit. Each point keeps its own run directory, lock and resume state; if
the batch fails, each point is trained again alone from its last checkpoint. Meant for a GPU
(``experiments/bench_batched.py``); the default, 1, is the unbatched sweep.
"""

from __future__ import annotations

import contextlib
import csv
import ctypes
import json
import logging
import math
import multiprocessing
import os
import re
import shutil
import signal
import socket
import sys
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import torch
from compose_lens.core import progress as progress_lines
from compose_lens.training import runs
from compose_lens.data import safety
from compose_lens.training.subject import check_device
from compose_lens.training.outcome import classify_run
from compose_lens.core.cores import cpu_count
from compose_lens.analysis.thresholds import (METRICS, THRESHOLD_RULE, first_step_above, format_thresholds, numeric,
                                              thresholds)
from compose_lens.core.config import SWEEP_BACKENDS, RunConfig
from compose_lens.core.errors import ComposeLensError
from compose_lens.core.files import atomic_path, json_safe, load_json, remove_stale_temps, write_json_atomic
from compose_lens.data.sampler import POOL_NAMES
from compose_lens.views.drawing import save
from compose_lens.views.sweeps import sweep_figure
from compose_lens.core.provenance import provenance
from compose_lens.data.safety import check_training_memory
from compose_lens.training.train import Trainer, check_compile

POOLS = POOL_NAMES  # the nine accuracy pools of SPEC section 3
# what a sweep writes at the top of its --out (each through a temporary, see compose_lens.core.files)
SWEEP_NAMES = frozenset({"sweep.json", "results.csv", "results.provenance.json", "thresholds.json"})


# -- the points of a sweep ----------------------------------------------------------------


@dataclass(frozen=True)
class SweepPoint:
    """One training run of a sweep: the swept setting at one value, with one seed."""

    param: str
    value: Any
    seed: int

    @property
    def name(self) -> str:
        """Directory name, e.g. ``f=0.25_seed=0``: one path component, whatever the value holds.

        >>> SweepPoint("device", "cuda/../../x", 0).name
        'device=cuda_.._.._x_seed=0'
        """
        raw = f"{self.param}={format_value(self.value)}_seed={self.seed}"
        return _UNSAFE.sub("_", raw)[:200]

    def config(self, base: RunConfig) -> RunConfig:
        """The base configuration with this point's seeds, then its value (which wins; a
        ``seed`` sweep's value sets all three seeds)."""
        value = json.dumps(self.value)
        seeds = [self.seed] * 3 if self.param != "seed" else [value] * 3
        overrides = [f"task.seed={seeds[0]}", f"train.seed={seeds[1]}", f"model.init_seed={seeds[2]}"]
        if self.param != "seed":
            overrides.append(f"{self.param}={value}")
        return base.with_overrides(overrides)


MAX_POINTS = 10_000  # runs in one sweep: more is a typo in a range, not a study

_UNSAFE = re.compile(r"[^A-Za-z0-9._,=+-]")  # a point's directory name keeps only these


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
            if not (math.isfinite(start) and math.isfinite(stop)):
                raise ComposeLensError(f"--values {item!r}: a range's ends are finite numbers")
            if num > MAX_POINTS:  # refused before a list of them is made (1e8 values took minutes and GBs)
                raise ComposeLensError(f"--values {item!r}: {num:,} values; a sweep trains one run per value "
                                       f"and seed, at most {MAX_POINTS:,} in all: ask for fewer")
            if start == stop:
                raise ComposeLensError(f"--values {item!r}: a range from {parts[0]} to {parts[1]} holds one value; "
                                       f"give two different ends, or the value alone")
            if not math.isfinite(stop - start):  # each end finite, the span not: its values would be inf and NaN
                raise ComposeLensError(f"--values {item!r}: the span from {parts[0]} to {parts[1]} is too wide "
                                       f"for a number; give nearer ends")
            spaced = [round(start + (stop - start) * i / (num - 1), 6) for i in range(num)]
            if len(set(spaced)) < num:  # the 6 decimals a point's name keeps cannot tell them apart
                raise ComposeLensError(f"--values {item!r}: {num} values between {parts[0]} and {parts[1]} are "
                                       f"closer than the 6 decimals a sweep keeps; give fewer values or wider ends")
            out += spaced
            continue
        try:
            out.append(json.loads(item))
        except json.JSONDecodeError:
            out.append(item)
    if not out:
        raise ComposeLensError("--values: give at least one value")
    listed = next((v for v in out if isinstance(v, (list, dict))), None)
    if listed is not None:  # a point's directory name holds one number or word, and its name is its value
        raise ComposeLensError(f"--values {json.dumps(listed)}: a sweep's values are numbers or words, not "
                               f"{'lists' if isinstance(listed, list) else 'objects'}; train each setting "
                               f"with `compose-lens train --set KEY={json.dumps(listed)}` instead")
    shown = [json.dumps(v) for v in out]
    twice = next((v for v in shown if shown.count(v) > 1), None)
    if twice is not None:
        raise ComposeLensError(f"--values: the value {twice} is given twice; give each value once")
    return out


def sweep_points(param: str, values: Sequence[Any], seeds: Sequence[int]) -> list[SweepPoint]:
    """Every (value, seed), values outermost, in the order given."""
    if not seeds:
        raise ComposeLensError("--seeds: give at least one seed")
    if len(set(seeds)) != len(seeds):
        raise ComposeLensError(f"--seeds {list(seeds)}: a seed is repeated")
    if param == "seed" and len(seeds) > 1:
        raise ComposeLensError("--param seed sweeps the seeds themselves: give them as --values, without --seeds")
    if len(values) * len(seeds) > MAX_POINTS:
        raise ComposeLensError(f"--values and --seeds: {len(values):,} values x {len(seeds):,} seeds is more than "
                               f"{MAX_POINTS:,} runs; ask for fewer")
    points = [SweepPoint(param, v, int(s)) for v in values for s in seeds]
    names = [p.name for p in points]
    if len(set(names)) != len(names):
        raise ComposeLensError(f"--values: two values give the same point directory "
                               f"({next(n for n in names if names.count(n) > 1)}); use plainer values")
    return points


def check_points(base: RunConfig, points: Sequence[SweepPoint]) -> dict[SweepPoint, RunConfig]:
    """Every point's configuration, refusing the sweep at once if one cannot be made."""
    configs = {}
    for point in points:
        try:
            configs[point] = point.config(base)
            check_training_memory(configs[point])
            check_compile(configs[point])
        except ComposeLensError as exc:
            raise ComposeLensError(f"point {point.name}: {exc}") from None
    return configs


SUMMARY_FILES = ("sweep.json", "results.csv", "results.provenance.json", "thresholds.json", "sweep.png", "sweep.csv")


def check_replaceable_sweep(out: Path) -> bool:
    """Refuse (one line) an ``out`` that ``sweep --overwrite`` may not replace; True if it holds a sweep to replace."""
    safety.check_parent(out, "sweep")
    return safety.check_replaceable(out, "sweep", True, allowed=frozenset({*SUMMARY_FILES, "runs"}))


def clear_sweep_dir(out: Path) -> None:
    """``sweep --overwrite``: empty an earlier sweep's ``out`` under its lock, only if
    :func:`check_replaceable_sweep` finds nothing but a sweep's own files there."""
    if not check_replaceable_sweep(out):
        return
    with safety.lock_directory(out, "sweep", f"--out {out}: another compose-lens command is running a sweep "
                                             f"into it now; wait for it to end before replacing it"):
        for entry in out.iterdir():
            if entry.name == safety.MARKER:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()


def check_sweep_dir(out: Path, param: str, base: RunConfig) -> None:
    """Refuse an ``--out`` that is not this sweep's directory (a rerun of the same sweep is fine)."""
    safety.check_parent(out, "sweep")
    if out.exists() and not out.is_dir():
        raise ComposeLensError(f"--out {out}: exists and is not a directory")
    if not out.is_dir() or not any(out.iterdir()):
        return
    saved = out / "sweep.json"
    marker = safety.read_marker(out)
    if marker is not None and marker.get("command") == "sweep" and not saved.exists():
        return  # a sweep began here and has not written its record yet: its lock says whether it still runs
    if not saved.is_file() or (marker is not None and marker.get("command") != "sweep"):
        raise ComposeLensError(f"--out {out}: exists and is not a sweep directory; choose another --out")
    before = load_json(saved)
    if not isinstance(before, dict) or not isinstance(before.get("param"), str):
        kind = type(before).__name__.replace("dict", "object without a 'param'")
        raise ComposeLensError(f"--out {out}: its sweep.json is not a sweep's record (a JSON {kind}, not the "
                               f"object a sweep writes); move the folder away or choose another --out")
    if before["param"] != param:
        raise ComposeLensError(f"--out {out}: holds a sweep over {before['param']}, not {param}; rerun it as it "
                               f"was, or choose another --out")
    if before.get("base_config") != base.to_dict():
        raise ComposeLensError(f"--out {out}: holds a sweep over {param} with another base configuration; rerun "
                               f"it as it was, or choose another --out")
    for name in SUMMARY_FILES:  # refused now, not after the points have trained
        if (out / name).exists() and (out / name).is_symlink() or (out / name).exists() and not (out / name).is_file():
            raise ComposeLensError(f"--out {out}: {name} is not a file the sweep wrote (a folder or a link); "
                                   f"move it away, or choose another --out")


# -- sizing the workers to the machine ---------------------------------------------------


def plan_workers(n_points: int, workers: int | None = None, threads: int | None = None,
                 cores: int | None = None) -> tuple[int, int]:
    """(workers, threads per worker) with ``workers * threads <= cores``: by default one worker
    per core (the paper model's small matrices use one core about as well as two), fewer for
    fewer points, the spare cores given to the workers as threads.

    >>> plan_workers(32, cores=2)
    (2, 1)
    >>> plan_workers(1, cores=8)
    (1, 8)
    >>> plan_workers(32, workers=3, cores=8)
    (3, 2)
    """
    cores = cores or cpu_count()
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


def lock_point(directory: Path) -> safety.FileLock:
    """The point's lock, ``POINT.lock`` beside its run directory (which the trainer wants to itself)."""
    return safety.lock_file(directory.with_name(directory.name + ".lock"),
                            f"{directory} is being trained by another process; run the sweep again when it is done")


def _unlocked(exc: Exception) -> dict:
    """The outcome of a point that could not be locked: held by another process, or not lockable."""
    error = safety.os_error_line(exc, "lock the point") if isinstance(exc, OSError) else str(exc)
    return {"status": "failed", "error": error, "wall_s": 0.0}


def train_point(config: dict, run_dir: str, threads: int) -> dict:
    """Train one point to the end in ``run_dir``, resuming from its checkpoint if any. Plain data
    in and out (it runs in a worker); never raises: a failure comes back as ``{"status": "failed",
    "error": ...}`` and is written to ``error.json``."""
    torch.set_num_threads(threads)
    directory = Path(run_dir)
    directory.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    try:  # a worker of an earlier, killed sweep may still be training this point
        lock = lock_point(directory)
    except (ComposeLensError, OSError) as exc:
        return _unlocked(exc)
    with lock:
        (directory / "error.json").unlink(missing_ok=True)
        try:
            Trainer(RunConfig.from_dict(config), directory, resume=True, progress=False).run()
        except Exception as exc:  # one failing point must not stop the sweep
            error = (safety.os_error_line(exc, "train this point") if isinstance(exc, OSError)  # a full disk, said
                     else f"{type(exc).__name__}: {exc}".splitlines()[0])
            try:
                directory.mkdir(parents=True, exist_ok=True)
                write_json_atomic(directory / "error.json", {"error": error, "traceback": traceback.format_exc()})
            except OSError:  # the disk that failed the point: results.csv and stderr still say why
                error += "; its error.json could not be written either"
            return {"status": "failed", "error": error, "wall_s": time.perf_counter() - started}
    return {"status": "done", "error": "", "wall_s": time.perf_counter() - started}


def train_points(configs: list[dict], run_dirs: list[str], threads: int) -> list[dict]:
    """:func:`train_point` for several points trained together (:class:`compose_lens.training.batched.BatchedTrainer`),
    one outcome per point, never raising. A point another process holds is left alone (failed, as
    there); if the batch fails, each point is trained again alone, so the error lands on the point that
    has it."""
    if len(configs) == 1:
        return [train_point(configs[0], run_dirs[0], threads)]
    from compose_lens.training.batched import BatchedTrainer  # imports torch.func

    torch.set_num_threads(threads)
    started = time.perf_counter()
    outcomes: list[dict | None] = [None] * len(configs)
    locks = []
    try:
        for i, run_dir in enumerate(run_dirs):
            directory = Path(run_dir)
            directory.parent.mkdir(parents=True, exist_ok=True)
            try:
                locks.append(lock_point(directory))
            except (ComposeLensError, OSError) as exc:
                outcomes[i] = _unlocked(exc)
                continue
            (directory / "error.json").unlink(missing_ok=True)
        mine = [i for i, o in enumerate(outcomes) if o is None]
        with contextlib.suppress(Exception):  # else train them one by one: the failing point fails alone
            BatchedTrainer([RunConfig.from_dict(configs[i]) for i in mine], [run_dirs[i] for i in mine],
                           resume=True, progress=False).run()
            for i in mine:
                outcomes[i] = {"status": "done", "error": "", "wall_s": time.perf_counter() - started}
    finally:
        for lock in locks:
            lock.release()
    for i, outcome in enumerate(outcomes):
        if outcome is None:
            outcomes[i] = train_point(configs[i], run_dirs[i], threads)
    return outcomes


def chunk_jobs(jobs: list[tuple[SweepPoint, dict, str]], size: int) -> list[list[tuple[SweepPoint, dict, str]]]:
    """The jobs in groups of at most ``size`` that one batched process can train together
    (:func:`compose_lens.training.batched.check_compatible`), in order."""
    if size <= 1:
        return [[job] for job in jobs]
    from compose_lens.training.batched import check_compatible

    chunks: list[list[tuple[SweepPoint, dict, str]]] = []
    for job in jobs:
        config = RunConfig.from_dict(job[1])
        for chunk in chunks:
            if len(chunk) < size:
                try:
                    check_compatible([RunConfig.from_dict(chunk[0][1]), config])
                except ComposeLensError:
                    continue
                chunk.append(job)
                break
        else:
            chunks.append([job])
    return chunks


def _init_worker(threads: int) -> None:
    """A pool worker's ``threads`` torch threads; on Linux, its end when the sweep process ends, however
    it ends (else a worker of a killed sweep trains its queued points, then spins on the dead pipe)."""
    torch.set_num_threads(threads)
    with contextlib.suppress(OSError, AttributeError):  # no prctl: not Linux
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG


# -- reading a finished point ---------------------------------------------------------------


def point_row(point: SweepPoint, run_dir: Path, status: str = "", error: str = "") -> dict:
    """The results.csv row of one point, read from its run directory."""
    row: dict[str, Any] = {"param": point.param, "value": format_value(point.value), "seed": point.seed,
                           "status": status, "error": error, "outcome": "", "steps": "", "train_wall_time_s": "",
                           "threads": "", **{f"{name}_accuracy": "" for name in METRICS + POOLS},  # exhaustive, pools
                           **{f"first_step_90_{pool}": "" for pool in POOLS}}
    results_file = run_dir / "results.json"
    if results_file.exists():
        results = load_json(results_file)
        row.update(status="done", error="", steps=results["steps"],
                   train_wall_time_s=results.get("train_wall_time_s", ""), threads=results.get("threads", ""))
        for metric in METRICS:
            row[f"{metric}_accuracy"] = results["exhaustive"][metric]["accuracy"]
        for pool in POOLS:
            row[f"{pool}_accuracy"] = results.get("pools", {}).get(pool, "")
    elif not status and (run_dir / "error.json").exists():
        row.update(status="failed", error=load_json(run_dir / "error.json")["error"])
    elif not status:
        row["status"] = "pending"
    metrics = runs.read_metrics(run_dir)
    if metrics:  # generalised, stalled or learning (compose_lens.training.outcome)
        row["outcome"] = classify_run(run_dir)["outcome"]
    for pool in POOLS:
        step = first_step_above(metrics, pool)
        row[f"first_step_90_{pool}"] = "" if step is None else step
    row["run_dir"] = str(run_dir)
    return row


def point_of(name: str, param: str) -> SweepPoint | None:
    """The point a run directory's name stands for (None if it is not one of ``param``'s).

    >>> point_of("f=0.25_seed=1", "f")
    SweepPoint(param='f', value=0.25, seed=1)
    >>> point_of("f=0.25_seed=1.lock", "f") is None
    True
    """
    found = re.fullmatch(re.escape(param) + r"=(.+)_seed=(-?\d+)", name)
    if not found:
        return None
    try:
        value = json.loads(found.group(1))
    except json.JSONDecodeError:
        value = found.group(1)
    return SweepPoint(param, value, int(found.group(2)))


def _point_dirs(out: Path, also: Sequence[SweepPoint] = ()) -> list[tuple[SweepPoint, Path]]:
    """Every point directory under ``out/runs`` with its point, and the points ``also`` (their
    directories may not exist yet), sorted by value then seed."""
    param = load_json(out / "sweep.json")["param"]
    runs_dir = out / "runs"
    found = {(p.value, p.seed): (p, d) for d in sorted(runs_dir.iterdir() if runs_dir.is_dir() else [])
             if d.is_dir() and (p := point_of(d.name, param)) is not None}
    for p in also:
        found.setdefault((p.value, p.seed), (p, run_dir_of(out, p)))
    return sorted(found.values(), key=lambda pd_: (numeric(pd_[0].value) is None, numeric(pd_[0].value) or 0.0,
                                                   str(pd_[0].value), pd_[0].seed))


def sweep_rows(out: str | Path) -> list[dict]:
    """The row of every point directory under ``out/runs``, whichever command made it (finished,
    failed or ``pending``), sorted by value then seed: what ``results.csv`` holds after each command."""
    return [point_row(p, d) for p, d in _point_dirs(Path(out))]


def write_csv(rows: Sequence[dict], path: Path) -> None:
    if not rows:
        return
    try:
        with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    except OSError as exc:
        if not exc.filename:  # a write that names no file (a full disk): the file it was for, not "?"
            exc.filename = str(path)
        raise


def read_csv(path: str | Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


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
    outcomes: dict[str, dict] = None  # point name -> what its worker returned (status, error, wall_s, placement)

    def threshold_lines(self, param: str) -> list[str]:
        """The thresholds in words, one line each (:func:`~compose_lens.analysis.thresholds.format_thresholds`)."""
        return format_thresholds(self.thresholds, param)


def run_dir_of(out: Path, point: SweepPoint) -> Path:
    return out / "runs" / point.name


def _chunk_args(chunk: list[tuple[SweepPoint, dict, str]]) -> tuple[list[dict], list[str]]:
    return [config for _, config, _ in chunk], [run_dir for _, _, run_dir in chunk]


def _run_local(chunks: list[list[tuple[SweepPoint, dict, str]]], workers: int, threads: int,
               done: Callable[[SweepPoint, dict], None]) -> None:
    if workers == 1:
        for chunk in chunks:
            for (point, _, _), outcome in zip(chunk, train_points(*_chunk_args(chunk), threads)):
                done(point, outcome)
        return
    # spawn: a fresh interpreter per worker, so no torch thread pool is copied by fork
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_init_worker,
                             initargs=(threads,)) as pool:
        futures = {pool.submit(train_points, *_chunk_args(chunk), threads): chunk for chunk in chunks}
        pending = set(futures)
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                chunk = futures[future]
                try:
                    outcomes = future.result()
                except Exception as exc:  # the worker process itself died
                    outcomes = [{"status": "failed", "error": f"worker died: {type(exc).__name__}: {exc}",
                                 "wall_s": float("nan")}] * len(chunk)
                for (point, _, _), outcome in zip(chunk, outcomes):
                    done(point, outcome)


def _import_ray():
    try:
        import ray  # optional dependency (the ray extra)
    except ImportError:
        raise ComposeLensError("the ray backend needs Ray: pip install 'compose-lens[ray]'") from None
    return ray


def pin_to_ray_gpus(gpu_ids: Sequence) -> dict:
    """Make the GPUs Ray gave this task (``ray.get_gpu_ids()``; none: nothing changes) the only ones
    torch sees here, so ``device=cuda`` is that GPU; return where it runs. Must run before torch
    first uses CUDA in this process (a fresh worker per GPU task, ``max_calls=1``, keeps it so).

    >>> import os; before = os.environ.get("CUDA_VISIBLE_DEVICES")
    >>> pin_to_ray_gpus([3])["cuda_visible_devices"], os.environ["CUDA_VISIBLE_DEVICES"]
    ('3', '3')
    >>> _ = os.environ.pop("CUDA_VISIBLE_DEVICES") if before is None else os.environ.update(CUDA_VISIBLE_DEVICES=before)
    """
    ids = [str(i) for i in gpu_ids]
    if ids:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(ids)
    return {"gpu_ids": ids, "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", "")}


def train_points_on_ray(configs: list[dict], run_dirs: list[str], threads: int) -> list[dict]:
    """:func:`train_points` as a Ray task: pinned to Ray's GPUs first, each outcome saying where it ran."""
    import ray

    placement = pin_to_ray_gpus(ray.get_gpu_ids())
    return [{**outcome, "placement": placement} for outcome in train_points(configs, run_dirs, threads)]


def task_gpus(gpus_per_point: float, points: int) -> float:
    """The GPUs one Ray task asks for: ``gpus_per_point`` for a lone point; for ``points`` stacked
    in one process (one device) that many times it, at most one GPU.

    >>> task_gpus(0.25, 1), task_gpus(0.25, 2), task_gpus(0.5, 4), task_gpus(2, 1), task_gpus(0, 4)
    (0.25, 0.5, 1.0, 2, 0)
    """
    if not gpus_per_point or points == 1:
        return gpus_per_point
    return min(1.0, round(gpus_per_point * points, 4))


def check_gpus_per_point(gpus_per_point: float, backend: str, configs: dict[SweepPoint, RunConfig]) -> None:
    """Refuse a GPU request the backend cannot honour, before anything is written."""
    if gpus_per_point < 0 or gpus_per_point != gpus_per_point:
        raise ComposeLensError(f"--gpus-per-point {gpus_per_point}: use 0 (no GPU), a fraction such as 0.25, "
                               f"or a whole number")
    if not gpus_per_point:
        return
    if backend == "slurm":
        raise ComposeLensError("--gpus-per-point is for --backend ray; on slurm each job gets one GPU when the "
                               "points say device=cuda (--slurm gpus_per_node=N for more), and --runs-per-process "
                               "K shares it among K points")
    if backend != "ray":
        raise ComposeLensError(f"--gpus-per-point is for --backend ray; the {backend} backend trains each point "
                               f"on the device it names (--set device=cuda)")
    if gpus_per_point > 1 and gpus_per_point != int(gpus_per_point):
        raise ComposeLensError(f"--gpus-per-point {gpus_per_point}: Ray shares a GPU only below 1; above 1 give "
                               f"a whole number")
    for point, config in configs.items():
        if config.train.device.startswith("cuda:"):
            raise ComposeLensError(f"point {point.name}: device={config.train.device} with --gpus-per-point; give "
                                   f"device=cuda and Ray picks the GPU")


RAY_CONNECT_TIMEOUT_S = 10  # a cluster's head answers a TCP connection at once; a dead address never does


def check_ray_address(address: str, timeout: float = RAY_CONNECT_TIMEOUT_S) -> None:
    """Refuse, within ``timeout`` seconds, a Ray address where nothing listens (``ray.init`` retries
    a silent head for minutes, ignoring SIGTERM); ``auto`` and ``local`` name no host."""
    if address in ("auto", "local"):
        return
    found = re.fullmatch(r"(?:ray://)?\[?([^\[\]]+?)\]?:(\d+)", address.strip())
    if not found or not 0 < int(found.group(2)) < 65536:
        raise ComposeLensError(f"--address {address}: give the Ray head as HOST:PORT (e.g. 10.0.0.5:6379), "
                               f"ray://HOST:PORT, or auto")
    host, port = found.group(1), int(found.group(2))
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        why = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise ComposeLensError(f"--address {address}: no Ray cluster answers there ({why} within "
                               f"{timeout:g} s); start one with `ray start --head`, or leave --address "
                               f"out to start a local Ray") from None


def connect_ray(address: str | None) -> bool:
    """Join the Ray cluster at ``address`` (a local Ray where None) unless Ray is up in this process
    already; True where it was started here (and is to be shut down here)."""
    ray = _import_ray()
    if ray.is_initialized():
        return False
    sys.stderr.flush()
    saved = os.dup(2)  # Ray's C++ core prints each retry to the process's stderr: not ours to show
    try:
        with open(os.devnull, "w") as quiet:
            os.dup2(quiet.fileno(), 2)
        # Ray follows the level the caller set (the command line's -v / -q): the root logger's, since an
        # earlier ray.init in this process set the "ray" logger's own level to INFO
        level = logging.getLogger().getEffectiveLevel()
        if address:
            ray.init(address=address, log_to_driver=False, logging_level=level)
        else:
            ray.init(num_cpus=cpu_count(), include_dashboard=False, log_to_driver=False, logging_level=level)
    except ConnectionError as exc:
        raise ComposeLensError(f"--address {address}: cannot reach a Ray cluster ({exc})") from None
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    return True


def _run_ray(chunks: list[list[tuple[SweepPoint, dict, str]]], threads: int, address: str | None,
             done: Callable[[SweepPoint, dict], None], gpus_per_point: float = 0) -> None:
    ray = _import_ray()
    started_here = connect_ray(address)
    try:
        asks = [task_gpus(gpus_per_point, len(chunk)) for chunk in chunks]
        have = ray.cluster_resources().get("GPU", 0) if gpus_per_point else 0
        if gpus_per_point and have < max(asks):
            raise ComposeLensError(f"--gpus-per-point {gpus_per_point}: the Ray cluster has {have:g} GPU(s), too "
                                   f"few for a task asking {max(asks):g}; lower it or add GPUs")
        # one remote function per GPU share; a GPU task's worker ends with it (max_calls=1, set here:
        # Ray takes it in ray.remote only)
        remotes = {ask: ray.remote(num_cpus=threads, max_retries=0,
                                   **({"num_gpus": ask, "max_calls": 1} if ask else {}))(train_points_on_ray)
                   for ask in set(asks)}
        refs = {remotes[ask].remote(*_chunk_args(chunk), threads): chunk for chunk, ask in zip(chunks, asks)}
        pending = list(refs)
        while pending:
            finished, pending = ray.wait(pending, num_returns=1)
            for ref in finished:
                chunk = refs[ref]
                try:
                    outcomes = ray.get(ref)
                except Exception as exc:  # the task's worker died
                    outcomes = [{"status": "failed", "error": f"ray task died: {type(exc).__name__}: "
                                                              f"{str(exc).splitlines()[0] if str(exc) else ''}",
                                 "wall_s": float("nan")}] * len(chunk)
                for (point, _, _), outcome in zip(chunk, outcomes):
                    done(point, outcome)
    finally:
        if started_here:
            ray.shutdown()


def _pending(out: Path, points: Sequence[SweepPoint], configs: dict[SweepPoint, RunConfig]
             ) -> tuple[list[tuple[SweepPoint, dict, str]], int]:
    """(jobs to train, number of points already finished); a finished point must match its configuration."""
    jobs, skipped = [], 0
    for point in points:
        run_dir = run_dir_of(out, point)
        if (run_dir / "results.json").exists():
            saved = load_json(run_dir / "results.json").get("config")
            if saved is not None and saved != configs[point].to_dict():
                raise ComposeLensError(f"{run_dir} finished with another configuration than this sweep asks "
                                       f"for; use a new --out or delete that point")
            skipped += 1
        else:
            jobs.append((point, configs[point].to_dict(), str(run_dir)))
    return jobs, skipped


class _Recorder:
    """Records each point's outcome as it arrives, rewriting results.csv (partial results survive a kill)."""

    def __init__(self, out: Path, points: Sequence[SweepPoint], bar):
        self.out, self.points, self.bar = out, points, bar
        self.outcomes: dict[SweepPoint, dict] = {}

    def rows(self) -> list[dict]:
        """This command's points and every other point in ``out/runs`` (earlier passes), as :func:`sweep_rows`."""
        mine = {(p.value, p.seed): point_row(p, run_dir_of(self.out, p), self.outcomes.get(p, {}).get("status", ""),
                                             self.outcomes.get(p, {}).get("error", "")) for p in self.points}
        return [mine.get((p.value, p.seed)) or point_row(p, d) for p, d in _point_dirs(self.out, self.points)]

    def __call__(self, point: SweepPoint, outcome: dict) -> None:
        self.outcomes[point] = outcome
        write_csv(self.rows(), self.out / "results.csv")
        self.bar.update(1)
        if outcome["status"] == "failed":
            self.bar.write(f"point {point.name} failed: {outcome['error']}", file=sys.stderr)


def _write_summary(out: Path, rows: list[dict], param: str, seeds: Sequence[int]) -> dict:
    """results.csv, thresholds.json and (for numeric values) sweep.png; returns the thresholds."""
    record = provenance(param=param, seeds=list(seeds))
    write_csv(rows, out / "results.csv")
    write_json_atomic(out / "results.provenance.json", record)
    found = thresholds(rows)
    write_json_atomic(out / "thresholds.json", {"rule": THRESHOLD_RULE, "param": param,
                                                "thresholds": json_safe(found), "provenance": record})
    if rows and all(numeric(r["value"]) is not None for r in rows):
        save(*sweep_figure(rows, title=f"sweep over {param}, seeds {list(seeds)}"), out / "sweep.png")
    return found


def run_sweep(base: RunConfig, param: str, values: Sequence[Any], seeds: Sequence[int], out: str | Path,
              backend: str = "local", workers: int | None = None, threads: int | None = None,
              address: str | None = None, progress: bool = True, runs_per_process: int | str = 1,
              gpus_per_point: float = 0, slurm: dict | None = None,
              points_per_job: int | None = None, overwrite: bool = False) -> SweepResult:
    """Train every point not yet finished, then write results.csv, thresholds.json and sweep.png
    (``runs_per_process``: points trained together per worker; ``gpus_per_point``: what each Ray
    task asks for; ``slurm``: submitit's executor settings and ``points_per_job`` the points of
    one SLURM job, see :mod:`compose_lens.sweep.slurm`; ``overwrite``: an earlier sweep in ``out`` is
    replaced, not continued, :func:`clear_sweep_dir`). ``runs_per_process="auto"`` (local backend, CPU) takes
    the K that :func:`compose_lens.training.batched.probe` finds fastest for ``base`` in its own precision, and
    sweep.json records the probe."""
    choice = None
    if runs_per_process == "auto":
        if backend != "local":
            raise ComposeLensError(f"--runs-per-process auto probes this machine; with --backend {backend} the "
                                   f"points train elsewhere: give a number")
        if base.train.compile == "on" or base.train.log_to != "none":
            runs_per_process = 1  # what batched training refuses: nothing to probe
        else:
            from compose_lens.training.batched import probe  # imports torch.func

            n_points = len(sweep_points(param, values, seeds))
            choice = probe(base, [k for k in (1, 2, 4, 8, 16) if k <= max(1, n_points)], [base.train.precision])
            runs_per_process = choice["runs_per_process"]
    if runs_per_process < 1:
        raise ComposeLensError(f"--runs-per-process {runs_per_process}: use at least 1")
    if runs_per_process > 1 and base.train.log_to != "none":  # the batched trainer tracks nothing
        raise ComposeLensError(f"log_to={base.train.log_to} with --runs-per-process {runs_per_process}: points "
                               f"trained together are not tracked (their event files would stay empty); use "
                               f"--runs-per-process 1, or log_to=none")
    if backend not in SWEEP_BACKENDS:
        raise ComposeLensError(f"--backend {backend}: use {' or '.join(SWEEP_BACKENDS)}")
    out = Path(out)
    points = sweep_points(param, values, seeds)
    configs = check_points(base, points)
    check_gpus_per_point(gpus_per_point, backend, configs)
    if backend == "local":
        plan_workers(len(points), workers, threads)  # refuse bad --workers/--threads before writing
        for device in sorted({c.train.device for c in configs.values()}):  # (a cluster's nodes may have GPUs this one lacks)
            check_device(device)
    if overwrite:  # emptied only once every check has passed, just before this sweep writes
        check_replaceable_sweep(out)
    else:
        check_sweep_dir(out, param, base)
    if backend == "ray":
        _import_ray()
        if address:
            check_ray_address(address)
    if (slurm or points_per_job is not None) and backend != "slurm":
        raise ComposeLensError(f"--slurm and --points-per-job are for --backend slurm, not {backend}")
    points_per_job = runs_per_process if points_per_job is None else points_per_job
    on_gpu = any(c.train.device.startswith("cuda") for c in configs.values())
    if backend == "slurm":
        from compose_lens.sweep import slurm as slurm_backend

        if points_per_job < 1:
            raise ComposeLensError(f"--points-per-job {points_per_job}: use at least 1")
        slurm_backend.check_options(slurm or {}, threads or 1, on_gpu)
    started = time.perf_counter()
    if not overwrite:  # (what --overwrite replaces is not read)
        _pending(out, points, configs)  # may refuse: before anything is written
    # Ray joined now: a cluster that cannot be reached leaves no half-made sweep (shut down at the end)
    ray_here = backend == "ray" and connect_ray(address)
    if overwrite:
        clear_sweep_dir(out)
    out.mkdir(parents=True, exist_ok=True)
    # the marker is the sweep's lock, held to the end: a second sweep into this --out would train
    # the points the first has not locked yet and rewrite results.csv under it
    lock = safety.lock_directory(out, "sweep", f"--out {out}: another compose-lens command is running a "
                                               f"sweep into it now; wait for it to end (or stop it), or "
                                               f"choose another --out")
    try:
        jobs, skipped = _pending(out, points, configs)  # again: the sweep that held it may have trained some
        remove_stale_temps(out, SWEEP_NAMES)  # a killed sweep's half-written results.csv and the like
        write_json_atomic(out / "sweep.json", {
            "param": param, "values": list(values), "seeds": list(seeds), "backend": backend,
            "runs_per_process": runs_per_process, **({"probe": choice} if choice else {}),
            "gpus_per_point": gpus_per_point,
            **({"slurm": slurm or {}, "points_per_job": points_per_job} if backend == "slurm" else {}),
            "base_config": base.to_dict(), "provenance": provenance(base),
        })
        chunks = chunk_jobs(jobs, runs_per_process)
        if backend in ("ray", "slurm"):  # the cluster places the tasks; each asks for `threads` CPUs
            threads, workers = threads or 1, 0
        else:
            workers, threads = plan_workers(max(1, len(chunks)), workers, threads)
        bar = progress_lines.bar(total=len(points), initial=skipped, wanted=progress, unit="point",
                                 desc=f"sweep {param}")
        together = f", up to {runs_per_process} points per process" if runs_per_process > 1 else ""
        gpus = f" and {gpus_per_point:g} GPU(s)" if gpus_per_point else ""
        bar.set_postfix_str((f"ray: {threads} thread(s){gpus} per task" if backend == "ray"
                             else f"slurm: {threads} thread(s) per job, up to {points_per_job} point(s) per job"
                             if backend == "slurm" else f"local: {workers} worker(s) x {threads} thread(s)")
                            + together)
        recorder = _Recorder(out, points, bar)
        try:
            if jobs and backend == "local":
                _run_local(chunks, workers, threads, recorder)
            elif jobs and backend == "slurm":
                slurm_backend.run_slurm(train_points, chunks, threads, out / "slurm", slurm or {}, points_per_job, on_gpu,
                                        recorder)
            elif jobs:
                _run_ray(chunks, threads, address, recorder, gpus_per_point)
        finally:
            bar.close()
        rows = recorder.rows()
        found = _write_summary(out, rows, param, sorted({int(r["seed"]) for r in rows}))
    finally:
        lock.release()
        if ray_here:
            _import_ray().shutdown()
    failed = sum(1 for o in recorder.outcomes.values() if o["status"] == "failed")
    return SweepResult(out, rows, found, time.perf_counter() - started, len(jobs), skipped, failed,
                       {p.name: o for p, o in recorder.outcomes.items()})


def train_points_in_process(configs: list[dict], run_dirs: list[str], threads: int, env: dict | None = None,
                            nice: int = 0) -> list[dict]:
    """:func:`train_points` in a fresh Python process (``python -m compose_lens.sweep JOB``), niced by ``nice``
    and with ``env`` added to its environment, read before torch starts there (``ATEN_CPU_CAPABILITY``,
    ``OMP_NUM_THREADS``): how the experiments train their runs stacked. Returns the outcomes, or raises
    :class:`ComposeLensError` with the process's last line where it failed."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        job = Path(tmp) / "job.json"
        job.write_text(json.dumps({"configs": configs, "run_dirs": [str(d) for d in run_dirs], "threads": threads}))
        command = [sys.executable, "-m", "compose_lens.sweep", str(job)]
        proc = subprocess.run((["nice", "-n", str(nice)] if nice else []) + command,
                              env={**os.environ, **(env or {})}, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ComposeLensError(f"training {len(configs)} run(s) together failed ({proc.returncode}): "
                               f"{(proc.stderr.strip().splitlines() or [''])[-1]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])

