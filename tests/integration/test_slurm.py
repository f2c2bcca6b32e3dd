"""The SLURM backend (compose_lens.sweep.slurm), run through submitit's local executor: the same jobs,
pickling, signals and requeueing as on a cluster, each job a process here. A sweep so gives the
local backend's results.csv; a preempted job is requeued and its point resumes; bad settings are
one line before anything is written."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from compose_lens.cli import main
from compose_lens.core.errors import ComposeLensError
from compose_lens.sweep import SweepPoint, read_csv, run_dir_of, run_sweep, train_points

submitit = pytest.importorskip("submitit")

VARIES = ("run_dir", "train_wall_time_s")  # where a point ran and how long it took


def _same_rows(a: list[dict], b: list[dict]) -> None:
    keys = [k for k in a[0] if k not in VARIES]
    assert [{k: r[k] for k in keys} for r in a] == [{k: r[k] for k in keys} for r in b]


def test_a_slurm_sweep_gives_the_local_results_csv(tiny_config, tmp_path):
    local = run_sweep(tiny_config, "r", [0.0, 1.0], [0], tmp_path / "local", workers=1, threads=1, progress=False)
    slurm = run_sweep(tiny_config, "r", [0.0, 1.0], [0], tmp_path / "slurm", backend="slurm", threads=1,
                      slurm={"cluster": "local", "timeout_min": 10}, points_per_job=1, progress=False)
    assert (slurm.trained, slurm.failed) == (2, 0)
    _same_rows(read_csv(tmp_path / "local" / "results.csv"), read_csv(tmp_path / "slurm" / "results.csv"))
    for a, b in zip(local.rows, slurm.rows):
        wa, wb = load_file(f"{a['run_dir']}/model.safetensors"), load_file(f"{b['run_dir']}/model.safetensors")
        assert all((wa[k] == wb[k]).all() for k in wa)
    jobs = {o["job_id"] for o in slurm.outcomes.values()}
    assert len(jobs) == 2  # one point per job: two jobs of one array
    assert any((tmp_path / "slurm" / "slurm").rglob("*_log.out"))  # submitit's files beside the runs
    saved = json.loads((tmp_path / "slurm" / "sweep.json").read_text())
    assert saved["backend"] == "slurm" and saved["points_per_job"] == 1


def test_cli_slurm_sweep_puts_points_per_job_into_one_job(tiny_config, tmp_path, capsys):
    config = tmp_path / "tiny.json"
    config.write_text(tiny_config.with_overrides(["steps=20"]).to_json())
    out = tmp_path / "sweep"
    argv = ["sweep", "--config", str(config), "--param", "r", "--values", "0", "1", "--threads", "1",
            "--backend", "slurm", "--slurm", "cluster=local", "--points-per-job", "2", "--out", str(out), "--quiet"]
    assert main(argv) == 0
    rows = read_csv(out / "results.csv")
    assert [(r["value"], r["status"], r["steps"]) for r in rows] == [("0", "done", "20"), ("1", "done", "20")]
    assert "2 points (2 trained" in capsys.readouterr().out
    assert len(list((out / "slurm").glob("*_submitted.pkl"))) == 1  # both points in one job
    assert main(argv) == 0  # again: nothing left to submit
    assert "0 trained, 2 already finished" in capsys.readouterr().out


def test_a_timed_out_job_is_requeued_and_its_point_resumes(tiny_config, tmp_path):
    """The scheduler's signal mid-training (what the time limit, or a preemption, sends): submitit
    asks the job for its checkpoint and requeues it; the point goes on from its last checkpoint, so its
    metrics hold each logged step once and the run ends at its step count."""
    from compose_lens.sweep.slurm import PointsJob

    config = tiny_config.with_overrides(["steps=3000", "eval_every=100", "checkpoint_every=100"])
    run_dir = run_dir_of(tmp_path, SweepPoint("r", 0.0, 0))
    executor = submitit.AutoExecutor(folder=tmp_path / "slurm", cluster="local")
    # submitit reads a signal as the time limit's once the job has run min(0.8 x, x - 10 min) of
    # its limit x: with 10 minutes, at once. A timed-out job is requeued only if it can checkpoint.
    executor.update_parameters(timeout_min=10)
    job = executor.submit(PointsJob(train_points, [([config.to_dict()], [str(run_dir)])], threads=1))
    deadline = time.monotonic() + 300
    while not (run_dir / "resume.safetensors").exists() and time.monotonic() < deadline:
        time.sleep(0.2)  # wait for the first checkpoint (not a timing assertion: it only waits)
    assert (run_dir / "resume.safetensors").exists(), job.stderr()
    assert not (run_dir / "results.json").exists(), "the point finished before the signal; give it more steps"
    _signal_job(job, signal.SIGUSR2)  # what SLURM sends a job it preempts, or whose time runs out
    outcomes = job.result()
    assert [o["status"] for o in outcomes] == ["done"]
    log = (job.stderr() or "") + (job.stdout() or "")
    assert "timed-out" in log and "Requeued" in log, log
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(set(steps)) and steps[-1] == 3000
    assert json.loads((run_dir / "results.json").read_text())["steps"] == 3000


def _signal_job(job, signum: int) -> None:
    """Signal the process that runs the job (the local executor's controller starts it as its child,
    as SLURM's step daemon starts a job's task), as the scheduler does."""
    children = Path(f"/proc/{job._process.pid}/task/{job._process.pid}/children")
    if not children.exists():
        pytest.skip("needs Linux's /proc/PID/task/PID/children to find the job's process")
    for pid in children.read_text().split():
        os.kill(int(pid), signum)


def test_bad_slurm_settings_are_one_line_before_anything_is_written(tiny_config, tmp_path, capsys):
    config = tmp_path / "tiny.json"
    config.write_text(tiny_config.to_json())
    base = ["sweep", "--config", str(config), "--param", "r", "--values", "0", "--quiet"]
    cases = [(["--backend", "slurm", "--slurm", "cluster=local", "--slurm", "no_such_setting=1"], "--slurm"),
             (["--backend", "slurm", "--slurm", "cluster=moon"], "cluster=moon"),
             (["--backend", "slurm", "--slurm", "partition"], "KEY=VALUE"),
             (["--backend", "local", "--slurm", "timeout_min=5"], "for --backend slurm"),
             (["--backend", "slurm", "--slurm", "cluster=local", "--gpus-per-point", "1"], "each job gets one GPU"),
             (["--backend", "slurm", "--slurm", "cluster=local", "--points-per-job", "0"], "at least 1")]
    for n, (extra, says) in enumerate(cases):
        out = tmp_path / f"out{n}"
        assert main(base + extra + ["--out", str(out)]) == 2, extra
        err = capsys.readouterr().err
        assert says in err and len(err.strip().splitlines()) == 1, (extra, err)
        assert not out.exists(), extra


def test_without_sbatch_the_slurm_backend_says_so(tiny_config, tmp_path, monkeypatch):
    import shutil

    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)
    with pytest.raises(ComposeLensError, match="sbatch is not on the PATH.*cluster=local"):
        run_sweep(tiny_config, "r", [0.0], [0], tmp_path / "s", backend="slurm", progress=False)
    assert not (tmp_path / "s").exists()
