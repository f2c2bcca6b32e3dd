"""Sweeps: one row per point and seed, restarts that skip and resume, failures that stay local,
the threshold rule, worker sizing, and Ray giving the local backend's numbers."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
import shutil

import pytest
from safetensors.torch import load_file

from compose_lens.cli import main
from compose_lens.core.errors import ComposeLensError
from compose_lens.core.files import temp_beside
from compose_lens.analysis.thresholds import first_step_above, format_thresholds, threshold, thresholds
from compose_lens.sweep import (SweepPoint, check_points, parse_values, plan_workers, read_csv, run_dir_of, run_sweep,
                               sweep_rows)
from compose_lens.training.train import Trainer


def test_sweep_writes_one_row_per_point_and_seed(tiny_config, tmp_path):
    result = run_sweep(tiny_config, "f", [0.6, 0.9], [0, 1], tmp_path, workers=1, threads=1, progress=False)
    rows = read_csv(tmp_path / "results.csv")
    assert [(r["value"], r["seed"]) for r in rows] == [("0.6", "0"), ("0.6", "1"), ("0.9", "0"), ("0.9", "1")]
    assert all(r["status"] == "done" and r["steps"] == "40" for r in rows)
    for r in rows:
        run = json.loads((tmp_path / "runs" / f"f={r['value']}_seed={r['seed']}" / "results.json").read_text())
        assert float(r["zero_var_heldout_accuracy"]) == run["exhaustive"]["zero_var_heldout"]["accuracy"]
        assert float(r["two_var_union_accuracy"]) == run["exhaustive"]["two_var_union"]["accuracy"]
        assert run["config"]["task"]["f"] == float(r["value"])
        assert run["config"]["task"]["seed"] == run["config"]["train"]["seed"] == int(r["seed"])
    assert (result.trained, result.skipped, result.failed) == (4, 0, 0)
    assert (tmp_path / "sweep.png").stat().st_size > 0
    saved = json.loads((tmp_path / "thresholds.json").read_text())
    assert set(saved["thresholds"]) == {"zero_var_heldout", "two_var_union"}


def test_restarted_sweep_skips_finished_points_and_resumes_interrupted_ones(tiny_config, tmp_path):
    run_sweep(tiny_config, "f", [0.9], [0], tmp_path, workers=1, threads=1, progress=False)
    finished = run_dir_of(tmp_path, SweepPoint("f", 0.9, 0)) / "results.json"
    finished_before = finished.read_text()

    # a second point killed at step 25: its last checkpoint is step 20
    point = SweepPoint("f", 0.6, 0)
    interrupted = run_dir_of(tmp_path, point)

    class Killed(Exception):
        pass

    def kill_at_25(trainer):
        if trainer.step == 25:
            raise Killed

    with pytest.raises(Killed):
        Trainer(point.config(tiny_config), interrupted, progress=False).run(on_step=kill_at_25)
    logged_before_kill = (interrupted / "metrics.jsonl").read_text().splitlines()[:2]
    # what a SIGKILL mid-write leaves (issue #30): the sweep's and the point's temporaries, and a
    # user's files of similar names, which are not compose-lens's to remove
    stale = [temp_beside(tmp_path / "results.csv"), temp_beside(interrupted / "resume.safetensors")]
    users = [tmp_path / "results.csv.tmp", temp_beside(tmp_path / "my_notes.txt")]
    for path in stale + users:
        path.write_text("half\n")

    result = run_sweep(tiny_config, "f", [0.6, 0.9], [0], tmp_path, workers=1, threads=1, progress=False)
    assert [p.name for p in stale if p.exists()] == []
    assert [p.read_text() for p in users] == ["half\n"] * 2
    assert (result.trained, result.skipped) == (1, 1)
    assert finished.read_text() == finished_before  # not trained again
    metrics = (interrupted / "metrics.jsonl").read_text().splitlines()
    assert metrics[:2] == logged_before_kill  # steps 10 and 20 kept: resumed, not restarted
    assert [json.loads(m)["step"] for m in metrics] == [10, 20, 30, 40]
    assert {r["status"] for r in result.rows} == {"done"}


def test_a_failing_point_is_recorded_and_the_others_finish(tiny_config, tmp_path):
    # f = 0.05 of 49 pairs leaves 2 training pairs: the split misses numbers, so that run fails
    result = run_sweep(tiny_config, "f", [0.05, 0.9], [0], tmp_path, workers=1, threads=1, progress=False)
    rows = {r["value"]: r for r in read_csv(tmp_path / "results.csv")}
    assert rows["0.05"]["status"] == "failed" and "never use number" in rows["0.05"]["error"]
    assert "\n" not in rows["0.05"]["error"]
    assert rows["0.9"]["status"] == "done" and rows["0.9"]["two_var_union_accuracy"] != ""
    assert result.failed == 1
    assert (run_dir_of(tmp_path, SweepPoint("f", 0.05, 0)) / "error.json").exists()


def test_threshold_is_the_last_upward_crossing_interpolated():
    values = [0.1, 0.2, 0.3, 0.4, 0.5]
    assert threshold(values, [0.0, 0.1, 0.3, 0.7, 0.95], 0.5) == pytest.approx(0.35)
    assert threshold(values, [0.0, 0.1, 0.3, 0.7, 0.95], 0.9) == pytest.approx(0.48)
    # a lucky point below the transition does not decide it
    assert threshold(values, [0.0, 0.6, 0.2, 0.2, 0.8], 0.5) == pytest.approx(0.45)
    # order of the input does not matter; failed (NaN) points are dropped
    assert threshold([0.5, 0.1, 0.3], [1.0, 0.0, float("nan")], 0.5) == pytest.approx(0.3)
    assert threshold(values, [0.9] * 5, 0.5) == 0.1  # at or below the swept range
    assert math.isnan(threshold(values, [0.1] * 5, 0.5))  # above it


def test_thresholds_give_each_seed_and_their_spread():
    rows = []
    for seed, accs in ((0, [0.0, 0.4, 0.6, 1.0]), (1, [0.0, 0.0, 0.4, 0.6])):
        for value, acc in zip([0.1, 0.2, 0.3, 0.4], accs):
            rows.append({"param": "f", "value": str(value), "seed": str(seed),
                         "zero_var_heldout_accuracy": str(acc), "two_var_union_accuracy": ""})
    found = thresholds(rows, metrics=("zero_var_heldout",), levels=(0.5,))["zero_var_heldout"]["0.5"]
    assert found["per_seed"] == {"0": pytest.approx(0.25), "1": pytest.approx(0.35)}
    assert found["mean"] == pytest.approx(0.3) and found["std"] == pytest.approx(0.1 / math.sqrt(2))
    assert (found["min"], found["max"], found["n"]) == (pytest.approx(0.25), pytest.approx(0.35), 2)
    assert found["of_mean_curve"] == pytest.approx(0.3)  # mean curve 0, 0.2, 0.5, 0.8


def test_thresholds_use_only_successful_points_and_say_so():
    """A failed point is no evidence: a sweep whose only success is f = 0.9 reports a bound from
    one point and names the point left out, never "f = 0.9 +- 0"."""
    rows = [{"value": "0.05", "seed": 0, "status": "failed", "zero_var_heldout_accuracy": "",
             "two_var_union_accuracy": ""},
            {"value": "0.5", "seed": 0, "status": "done", "zero_var_heldout_accuracy": "0.2",
             "two_var_union_accuracy": "0.2"},
            {"value": "0.9", "seed": 0, "status": "done", "zero_var_heldout_accuracy": "0.99",
             "two_var_union_accuracy": "0.99"}]
    found = thresholds(rows)["zero_var_heldout"]["0.5"]
    assert found["points_used"] == 2 and found["points_left_out"] == ["0.05 (seed 0, failed)"]
    assert found["per_seed"]["0"] == pytest.approx(0.5 + 0.3 / 0.79 * 0.4)
    lines = format_thresholds(thresholds(rows[:1] + rows[2:]), "f")
    assert "+- 0" not in lines[0] and "<= 0.9" in lines[0] and "one seed" in lines[0]
    assert "failed points left out: 0.05" in lines[0]


def test_workers_times_threads_never_exceed_the_cores():
    for n_points in (1, 3, 32):
        for cores in (1, 2, 8, 16):
            workers, threads = plan_workers(n_points, cores=cores)
            assert workers * threads <= cores and workers <= n_points
    assert plan_workers(32, threads=2, cores=8) == (4, 2)
    with pytest.raises(ComposeLensError, match="oversubscribe"):
        plan_workers(8, workers=4, threads=2, cores=4)


def test_bad_sweep_input_is_one_clear_line(tiny_config):
    with pytest.raises(ComposeLensError, match="point f=1.5_seed=0: f=1.5"):
        check_points(tiny_config, [SweepPoint("f", 1.5, 0)])
    with pytest.raises(ComposeLensError, match="no such setting"):
        check_points(tiny_config, [SweepPoint("learning_speed", 1, 0)])
    with pytest.raises(ComposeLensError, match="the value 0.1 is given twice"):
        parse_values(["0.1", "0.1"])
    assert parse_values(["0.1:0.3:3", "1"]) == [0.1, 0.2, 0.3, 1]
    assert first_step_above([{"step": 10, "p": 0.2}], "p") is None


def test_cli_sweep_in_worker_processes(tiny_config, tmp_path, capsys):
    config = tmp_path / "tiny.json"
    config.write_text(tiny_config.to_json())
    out = tmp_path / "sweep"
    argv = ["sweep", "--config", str(config), "--param", "r", "--values", "0", "1", "--seeds", "3",
            "--steps", "20", "--workers", "2", "--threads", "1", "--out", str(out), "--quiet"]
    assert main(argv) == 0
    rows = read_csv(out / "results.csv")
    assert [(r["value"], r["status"], r["steps"]) for r in rows] == [("0", "done", "20"), ("1", "done", "20")]
    assert "2 points (2 trained" in capsys.readouterr().out
    assert main(argv) == 0  # run again: nothing left to train
    assert "0 trained, 2 already finished" in capsys.readouterr().out
    oversubscribed = [a for a in argv if a != "--quiet"] + ["--workers", "64", "--threads", "64"]
    assert main(oversubscribed) == 2
    assert "oversubscribe" in capsys.readouterr().err


def test_ray_backend_gives_the_local_numbers(tiny_config, tmp_path):
    ray = pytest.importorskip("ray")
    local = run_sweep(tiny_config, "r", [0.0, 1.0], [0], tmp_path / "local", workers=1, threads=1,
                      progress=False)
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    except Exception as exc:  # Ray's own start-up (e.g. its raylet timing out on a loaded machine)
        ray.shutdown()
        pytest.skip(f"a local Ray did not start here: {str(exc).splitlines()[0]}")
    try:
        remote = run_sweep(tiny_config, "r", [0.0, 1.0], [0], tmp_path / "ray", backend="ray", threads=1,
                           progress=False)
    finally:
        ray.shutdown()
    keys = [k for k in local.rows[0] if k not in ("run_dir", "train_wall_time_s")]
    assert [{k: r[k] for k in keys} for r in remote.rows] == [{k: r[k] for k in keys} for r in local.rows]
    for a, b in zip(local.rows, remote.rows):
        wa = load_file(f"{a['run_dir']}/model.safetensors")
        wb = load_file(f"{b['run_dir']}/model.safetensors")
        assert all((wa[k] == wb[k]).all() for k in wa)


def test_ray_points_ask_for_gpus_and_train_on_the_one_ray_gives(tiny_config, tmp_path):
    """--gpus-per-point: each Ray task asks for that share of a GPU, and the point is pinned to the
    GPU Ray assigns (CUDA_VISIBLE_DEVICES = ray.get_gpu_ids()). Ray's resource mechanism stands in
    for the GPUs here: this Ray is told the node has two (num_gpus=2) and hands out their ids as
    it would real ones; the points themselves train on the CPU."""
    ray = pytest.importorskip("ray")
    try:
        ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    except Exception as exc:  # Ray's own start-up (e.g. its raylet timing out on a loaded machine)
        ray.shutdown()
        pytest.skip(f"a local Ray did not start here: {str(exc).splitlines()[0]}")
    try:
        with pytest.raises(ComposeLensError, match="has 2 GPU"):
            run_sweep(tiny_config, "r", [0.0], [0], tmp_path / "too_many", backend="ray", threads=1,
                      gpus_per_point=4, progress=False)
        result = run_sweep(tiny_config, "r", [0.0, 1.0], [0], tmp_path / "ray", backend="ray", threads=1,
                           gpus_per_point=0.5, progress=False)
    finally:
        ray.shutdown()
    assert {r["status"] for r in result.rows} == {"done"}
    for name, outcome in result.outcomes.items():
        placement = outcome["placement"]
        assert len(placement["gpu_ids"]) == 1 and placement["gpu_ids"][0] in {"0", "1"}, name
        assert placement["cuda_visible_devices"] == placement["gpu_ids"][0], name
    assert json.loads((tmp_path / "ray" / "sweep.json").read_text())["gpus_per_point"] == 0.5


def test_a_gpu_request_the_backend_cannot_honour_is_refused(tiny_config, tmp_path):
    from compose_lens.sweep import check_gpus_per_point

    configs = {SweepPoint("r", 0.0, 0): tiny_config}
    for gpus, backend, says in ((0.5, "local", "is for --backend ray"), (1.5, "ray", "whole number"),
                                (-1, "ray", "use 0")):
        with pytest.raises(ComposeLensError, match=says):
            check_gpus_per_point(gpus, backend, configs)
    pinned = {SweepPoint("r", 0.0, 0): tiny_config.with_overrides(["device=cuda:1"])}
    with pytest.raises(ComposeLensError, match="Ray picks the GPU"):
        check_gpus_per_point(0.5, "ray", pinned)
    check_gpus_per_point(0.25, "ray", configs)  # a share of a GPU per point is fine
    with pytest.raises(ComposeLensError, match="is for --backend ray"):
        run_sweep(tiny_config, "r", [0.0], [0], tmp_path / "s", gpus_per_point=1, progress=False)
    assert not (tmp_path / "s").exists()  # refused before anything is written


def test_a_point_held_by_another_process_is_left_alone(tiny_config, tmp_path):
    import fcntl

    from compose_lens.sweep import train_point

    point = SweepPoint("f", 0.9, 0)
    run_dir = run_dir_of(tmp_path, point)
    run_dir.parent.mkdir(parents=True)
    with open(run_dir.with_name(run_dir.name + ".lock"), "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        outcome = train_point(point.config(tiny_config).to_dict(), str(run_dir), threads=1)
    assert outcome["status"] == "failed" and "another process" in outcome["error"]
    assert not (run_dir / "results.json").exists()


KEPT_IN_GIT = {"config.json", "metrics.jsonl", "results.json"}  # a point as committed (.gitignore)


def test_a_sweep_restored_from_its_committed_files_counts_every_point_finished(tiny_config, tmp_path):
    """A point directory holding only config.json, metrics.jsonl and results.json (no weights,
    checkpoints, resume state, split or lock) is finished: the same command trains nothing and
    writes the same rows, first-90 % steps included."""
    first = run_sweep(tiny_config, "f", [0.6, 0.9], [0], tmp_path, workers=1, threads=1, progress=False)
    for entry in (tmp_path / "runs").iterdir():
        if entry.is_dir():
            for item in entry.iterdir():
                if item.name not in KEPT_IN_GIT:
                    shutil.rmtree(item) if item.is_dir() else item.unlink()
        else:
            entry.unlink()  # the .lock beside each point
    assert {p.name for d in (tmp_path / "runs").iterdir() for p in d.iterdir()} == KEPT_IN_GIT
    again = run_sweep(tiny_config, "f", [0.6, 0.9], [0], tmp_path, workers=1, threads=1, progress=False)
    assert (again.trained, again.skipped, again.failed) == (0, 2, 0)
    keys = [k for k in first.rows[0] if k != "run_dir"]
    assert [{k: r[k] for k in keys} for r in again.rows] == [{k: r[k] for k in keys} for r in first.rows]


def test_sweep_rows_reads_every_pass_into_one_out(tiny_config, tmp_path):
    """A dense pass into the same --out keeps the coarse pass in results.csv, thresholds.json and
    sweep_rows: every point directory is read, whichever command trained it."""
    run_sweep(tiny_config, "f", [0.9], [0], tmp_path, workers=1, threads=1, progress=False)
    run_sweep(tiny_config, "f", [0.6], [0], tmp_path, workers=1, threads=1, progress=False)
    assert [r["value"] for r in read_csv(tmp_path / "results.csv")] == ["0.6", "0.9"]
    assert json.loads((tmp_path / "thresholds.json").read_text())["thresholds"]
    rows = sweep_rows(tmp_path)
    assert [(r["value"], r["status"]) for r in rows] == [("0.6", "done"), ("0.9", "done")]
    assert all(r["threads"] == 1 and r["steps"] == 40 for r in rows)


_ORPHAN_SCRIPT = """
import multiprocessing, sys, time
from concurrent.futures import ProcessPoolExecutor
from compose_lens import sweep

def report_pid():
    import os
    return os.getpid()

if __name__ == "__main__":
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                               initializer=sweep._init_worker, initargs=(1,))
    print(pool.submit(report_pid).result(), flush=True)
    time.sleep(60)
"""


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its new parent to reap it has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_sweep_leaves_no_worker_behind(tmp_path):
    """Killing the sweep process alone ends its pool workers (they used to go on and spin)."""
    script = tmp_path / "orphan.py"
    script.write_text(_ORPHAN_SCRIPT)
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    worker = int(parent.stdout.readline())
    assert _alive(worker)  # the worker lives while its sweep does
    parent.kill()
    parent.wait()
    for _ in range(100):
        if not _alive(worker):
            return
        time.sleep(0.1)
    os.kill(worker, signal.SIGKILL)
    pytest.fail("the pool worker outlived its killed sweep by 10 s")


def test_overwrite_starts_a_sweep_afresh_and_refuses_a_folder_that_is_not_a_sweeps(tiny_config, tmp_path):
    """``sweep --overwrite``: an earlier sweep over another parameter (which a plain rerun refuses) is replaced,
    its points gone; a folder holding a file no sweep wrote is refused in one line and left as it was."""
    out = tmp_path / "s"
    run_sweep(tiny_config, "f", [0.9], [0], out, workers=1, threads=1, progress=False)
    with pytest.raises(ComposeLensError, match="holds a sweep over f, not r"):
        run_sweep(tiny_config, "r", [1.0], [0], out, workers=1, threads=1, progress=False)
    result = run_sweep(tiny_config, "r", [1.0], [0], out, workers=1, threads=1, progress=False, overwrite=True)
    assert [(float(r["value"]), r["status"]) for r in result.rows] == [(1.0, "done")]
    assert sorted(p.name for p in (out / "runs").iterdir() if p.is_dir()) == ["r=1.0_seed=0"]

    (out / "notes.txt").write_text("mine")
    with pytest.raises(ComposeLensError, match="notes.txt, which compose-lens did not write"):
        run_sweep(tiny_config, "r", [1.0], [0], out, workers=1, threads=1, progress=False, overwrite=True)
    assert (out / "notes.txt").read_text() == "mine" and (out / "runs" / "r=1.0_seed=0").is_dir()
