"""A sweep on a SLURM cluster: its points as the jobs of one job array, through submitit.

``compose-lens sweep --backend slurm`` runs on the login node (docs/cluster.md says how to use
it). The points still to train are grouped, ``runs_per_process`` compatible points per process
(:func:`compose_lens.sweep.chunk_jobs`) and up to ``points_per_job`` points (whole groups) per
job, trained one group after another; the jobs go to SLURM as **one job array**
(``executor.batch()``), each asking for ``threads`` CPUs and, for ``device=cuda``, one GPU that
all its groups share. ``--slurm KEY=VALUE`` passes any setting of submitit's executor through.
As each job ends its points are recorded as the other backends record them
(:class:`compose_lens.sweep._Recorder`).

A job that is preempted or runs out of time is signalled; submitit asks :class:`PointsJob` for
its ``checkpoint`` and requeues it (up to three time-outs). Nothing needs saving: every run
directory holds its last checkpoint and resume state. submitit's own files (pickled jobs, each
job's stdout and stderr) go to ``SWEEP/slurm/``. ``--slurm cluster=local`` runs the jobs through
submitit's local executor, each a process on this machine (how the tests run the backend).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Sequence

from compose_lens.core.errors import ComposeLensError

CLUSTERS = ("slurm", "local")  # submitit's executors this backend uses; local: processes on this machine
TIMEOUT_MIN = 240  # a job's time limit unless --slurm timeout_min=... says otherwise (submitit's own is 5)


def import_submitit():
    try:
        import submitit  # optional dependency (the slurm extra)
    except ImportError:
        raise ComposeLensError("the slurm backend needs submitit: pip install 'compose-lens[slurm]'") from None
    return submitit


def parse_options(items: Sequence[str] | None) -> dict:
    """``--slurm KEY=VALUE`` items as submitit parameters (values JSON where they parse).

    >>> parse_options(["slurm_partition=gpu", "timeout_min=90", "cluster=local"])
    {'slurm_partition': 'gpu', 'timeout_min': 90, 'cluster': 'local'}
    """
    options: dict = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ComposeLensError(f"--slurm {item!r}: give KEY=VALUE, e.g. --slurm slurm_partition=gpu")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options


class PointsJob:
    """One job of the array: groups of points (configs and run directories, each group trained together
    by ``train``, :func:`compose_lens.sweep.train_points`) one after another; returns one outcome per
    point, in order. Plain data in and out, so submitit can pickle it."""

    def __init__(self, train: Callable[[list[dict], list[str], int], list[dict]],
                 groups: list[tuple[list[dict], list[str]]], threads: int):
        self.train, self.groups, self.threads = train, groups, threads

    def __call__(self) -> list[dict]:
        outcomes = []
        for configs, run_dirs in self.groups:  # a requeued job leaves its finished points as they are
            todo = [i for i, d in enumerate(run_dirs) if not (Path(d) / "results.json").exists()]
            trained = iter(self.train([configs[i] for i in todo], [run_dirs[i] for i in todo], self.threads)
                           if todo else [])
            outcomes += [next(trained) if i in todo else {"status": "done", "error": "", "wall_s": 0.0}
                         for i in range(len(run_dirs))]
        return outcomes

    def checkpoint(self, *args, **kwargs):
        """What submitit calls on preemption or time-out: requeue the same job (module doc)."""
        from submitit.helpers import DelayedSubmission

        return DelayedSubmission(PointsJob(self.train, self.groups, self.threads))


def make_executor(folder: Path, options: dict, threads: int, on_gpu: bool):
    """submitit's executor for these jobs: the defaults, then ``--slurm``'s settings, checked."""
    submitit = import_submitit()
    options = dict(options)
    cluster = options.pop("cluster", "slurm")
    if cluster not in CLUSTERS:
        raise ComposeLensError(f"--slurm cluster={cluster}: use {' or '.join(CLUSTERS)}")
    params = {"name": "compose-lens-sweep", "timeout_min": TIMEOUT_MIN, "cpus_per_task": threads,
              "gpus_per_node": 1 if on_gpu else 0, **options}
    if cluster == "slurm" and shutil.which("sbatch") is None:
        raise ComposeLensError("--backend slurm: no SLURM here (sbatch is not on the PATH); run the sweep on the "
                               "cluster's login node, or try it on this machine with --slurm cluster=local")
    executor = submitit.AutoExecutor(folder=folder, cluster=cluster)
    try:
        executor.update_parameters(**params)
    except (ValueError, NameError, TypeError) as exc:
        raise ComposeLensError(f"--slurm: {str(exc).splitlines()[0]}") from None
    return executor


def check_options(options: dict, threads: int, on_gpu: bool) -> None:
    """Refuse bad ``--slurm`` settings before the sweep writes anything (a throwaway executor)."""
    with tempfile.TemporaryDirectory(prefix="compose-lens-slurm-") as scratch:
        make_executor(Path(scratch), options, threads, on_gpu)


def group_chunks(chunks: list[list], points_per_job: int) -> list[list[list]]:
    """Whole chunks into jobs of at most ``points_per_job`` points (a chunk larger than that is a job).

    >>> [[len(c) for c in job] for job in group_chunks([[1, 2], [3, 4], [5]], 4)]
    [[2, 2], [1]]
    >>> [[len(c) for c in job] for job in group_chunks([[1], [2], [3]], 1)]
    [[1], [1], [1]]
    """
    jobs: list[list[list]] = []
    for chunk in chunks:
        if jobs and sum(map(len, jobs[-1])) + len(chunk) <= points_per_job:
            jobs[-1].append(chunk)
        else:
            jobs.append([chunk])
    return jobs


def run_slurm(train: Callable, chunks: list[list[tuple]], threads: int, folder: Path, options: dict,
              points_per_job: int, on_gpu: bool, done: Callable, poll_s: float | None = None) -> None:
    """Submit the chunks ((point, config, run directory) triples, each trained together by ``train``)
    as one job array, then call ``done(point, outcome)`` for each point as its job ends (a job that
    fails fails each of its points with the job's one-line error)."""
    submitit = import_submitit()
    executor = make_executor(folder, options, threads, on_gpu)
    grouped = group_chunks(chunks, points_per_job)
    with executor.batch():  # one job array: one sbatch, however many jobs
        submitted = [executor.submit(PointsJob(train, [([c for _, c, _ in chunk], [d for _, _, d in chunk])
                                                for chunk in job], threads)) for job in grouped]
    points = {id(job): [point for chunk in group for point, _, _ in chunk] for job, group in zip(submitted, grouped)}
    poll = poll_s if poll_s is not None else (1.0 if executor.cluster == "local" else 30.0)
    for job in submitit.helpers.as_completed(submitted, poll_frequency=poll):
        try:
            outcomes = job.result()
        except Exception as exc:  # the job failed, was cancelled, or ran out of requeues
            lines = [line for line in str(exc).splitlines() if line.strip()]
            outcomes = [{"status": "failed", "error": f"slurm job {job.job_id} failed: "
                                                      f"{type(exc).__name__}: {lines[-1] if lines else ''}",
                         "wall_s": float("nan")}] * len(points[id(job)])
        for point, outcome in zip(points[id(job)], outcomes):
            done(point, {**outcome, "job_id": str(job.job_id)})
