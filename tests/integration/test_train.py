"""Training: the answer-only loss learns, runs are reproducible, interruptions resume exactly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from compose_lens.model import tl
from compose_lens.core.errors import ComposeLensError
from compose_lens.core.files import temp_beside
from compose_lens.training.train import Trainer


def weights(run_dir):
    return load_file(str(run_dir / "model.safetensors"))


def test_run_directory_layout_and_learning(tmp_path, tiny_config):
    config = tiny_config.with_overrides(["steps=150", "lr=0.01", "eval_every=50", "checkpoint_every=50"])
    results = Trainer(config, tmp_path / "run", progress=False).run()
    run = tmp_path / "run"
    for name in ("config.json", "metrics.jsonl", "results.json", "model.safetensors", "split.json",
                 "checkpoints/step_000050/model.safetensors", "checkpoints/step_000150/config.json"):
        assert (run / name).exists(), name
    lines = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert [l["step"] for l in lines] == [50, 100, 150]
    assert lines[-1]["train_loss"] < lines[0]["train_loss"]
    assert lines[-1]["0var_train"] > 1.5 / 7  # better than chance (1/7) on the training pairs
    assert set(results["exhaustive"]) == {"zero_var_heldout", "two_var_union"}
    assert results["exhaustive"]["zero_var_heldout"]["total"] == 49 - int(0.8 * 49)


def test_layer1_mlp_and_biases_stay_exactly_zero(tmp_path, tiny_config):
    trainer = Trainer(tiny_config.with_overrides(["steps=20"]), tmp_path / "run", progress=False)
    trainer.run()
    params = tl.parameters(trainer.model)
    for name in tl.absent_names(tiny_config.model):
        assert torch.count_nonzero(params[name]) == 0, name
    assert torch.count_nonzero(params["blocks.1.mlp.in.weight"]) > 0


def test_same_seed_same_weights(tmp_path, tiny_config):
    a = Trainer(tiny_config, tmp_path / "a", progress=False)
    a.run()
    b = Trainer(tiny_config, tmp_path / "b", progress=False)
    b.run()
    wa, wb = weights(tmp_path / "a"), weights(tmp_path / "b")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    c = Trainer(tiny_config.with_overrides(["train.seed=1"]), tmp_path / "c", progress=False)
    c.run()
    assert not torch.equal(wa["embed.weight"], weights(tmp_path / "c")["embed.weight"])


def test_interrupted_run_resumes_to_identical_weights(tmp_path, tiny_config):
    Trainer(tiny_config, tmp_path / "full", progress=False).run()

    def interrupt(trainer):
        if trainer.step == 27:  # between the checkpoints at 20 and 30
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Trainer(tiny_config, tmp_path / "cut", progress=False).run(on_step=interrupt)
    assert not (tmp_path / "cut" / "results.json").exists()
    Trainer(tiny_config, tmp_path / "cut", resume=True, progress=False).run()
    full, cut = weights(tmp_path / "full"), weights(tmp_path / "cut")
    assert all(torch.equal(full[k], cut[k]) for k in full)
    steps = [json.loads(l)["step"] for l in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [10, 20, 30, 40]


def test_a_resume_removes_the_temporaries_a_kill_left_and_only_those(tmp_path, tiny_config):
    """A SIGKILL while a checkpoint, the resume state or the metrics are written leaves their
    ``.NAME.<hex>.tmp`` (no clean-up runs): the resume removes those, in the run and in
    checkpoints/, and keeps a user's ``resume.safetensors.tmp`` and a report's temporary."""
    Trainer(tiny_config, tmp_path / "full", progress=False).run()

    def interrupt(trainer):
        if trainer.step == 27:
            raise KeyboardInterrupt

    run = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        Trainer(tiny_config, run, progress=False).run(on_step=interrupt)
    stale = [temp_beside(run / name) for name in ("resume.safetensors", "metrics.jsonl", "config.json")]
    stale.append(temp_beside(run / "checkpoints" / "step_000030", directory=True))
    (stale[-1] / "model.safetensors").write_bytes(b"\x00half")
    kept = [run / "resume.safetensors.tmp", temp_beside(run / "report.html")]
    for path in kept:
        path.write_text("not the trainer's\n")
    Trainer(tiny_config, run, resume=True, progress=False).run()
    assert [p.name for p in stale if p.exists()] == []
    assert [p.read_text() for p in kept] == ["not the trainer's\n"] * 2
    full, cut = weights(tmp_path / "full"), weights(run)
    assert all(torch.equal(full[k], cut[k]) for k in full)


def test_a_finished_run_trained_on_to_more_steps_ends_with_the_weights_of_one_trained_there(tmp_path, tiny_config):
    Trainer(tiny_config, tmp_path / "full", progress=False).run()  # 40 steps at once
    short = tiny_config.with_overrides(["steps=20"])
    Trainer(short, tmp_path / "run", progress=False).run()
    with pytest.raises(ComposeLensError, match="only a larger"):  # fewer steps: refused, nothing touched
        Trainer(tiny_config.with_overrides(["steps=10"]), tmp_path / "run", resume=True, progress=False)
    results = Trainer(tiny_config, tmp_path / "run", resume=True, progress=False).run()
    run = tmp_path / "run"
    assert results["steps"] == 40 and json.loads((run / "config.json").read_text())["train"]["steps"] == 40
    full, longer = weights(tmp_path / "full"), weights(run)
    assert all(torch.equal(full[k], longer[k]) for k in full)
    assert json.loads((run / "checkpoints" / "step_000020" / "results.json").read_text())["steps"] == 20
    steps = [json.loads(l)["step"] for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [10, 20, 30, 40]


def test_a_run_may_be_trained_on_under_another_stop_rule_and_ends_as_if_trained_there_at_once(tmp_path, tiny_config):
    """A run stopped under one rule (here: a 20-step budget) and continued under another, with a larger
    budget, ends with the weights of a run trained under the second rule at once: the stop rule never
    changes an update. Any other change stays refused."""
    Trainer(tiny_config.with_overrides(["stop_at=generalised"]), tmp_path / "full", progress=False).run()
    Trainer(tiny_config.with_overrides(["steps=20", "stop_at=decided"]), tmp_path / "run", progress=False).run()
    with pytest.raises(ComposeLensError, match="another configuration"):
        Trainer(tiny_config.with_overrides(["stop_at=generalised", "lr=0.5"]), tmp_path / "run", resume=True,
                progress=False)
    Trainer(tiny_config.with_overrides(["stop_at=generalised"]), tmp_path / "run", resume=True, progress=False).run()
    saved = json.loads((tmp_path / "run" / "config.json").read_text())["train"]
    assert (saved["steps"], saved["stop_at"]) == (40, "generalised")
    full, longer = weights(tmp_path / "full"), weights(tmp_path / "run")
    assert all(torch.equal(full[k], longer[k]) for k in full)


def test_existing_run_is_not_overwritten(tmp_path, tiny_config):
    Trainer(tiny_config, tmp_path / "run", progress=False).run()
    before = (tmp_path / "run" / "model.safetensors").read_bytes()
    with pytest.raises(ComposeLensError, match="already holds a run"):
        Trainer(tiny_config, tmp_path / "run", progress=False)
    with pytest.raises(ComposeLensError, match="another configuration"):
        Trainer(tiny_config.with_overrides(["lr=0.5"]), tmp_path / "run", resume=True, progress=False)
    assert (tmp_path / "run" / "model.safetensors").read_bytes() == before


def test_killed_cli_run_resumes(tmp_path, tiny_config):
    """A real SIGKILL mid-run: the checkpoint on disk is whole and the run resumes."""
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "compose_lens.cli", "train", "--out", str(run), "--quiet",
           "--set", "modulus=7", "--set", "n_vars=6", "--set", "f=0.8", "--set", "model.d_model=32",
           "--set", "model.d_head=32", "--set", "model.d_mlp=64", "--set", "steps=1000",
           "--set", "batch_size=64", "--set", "eval_every=100", "--set", "checkpoint_every=100",
           "--set", "pool_size=64", "--set", "threads=1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and not (run / "checkpoints" / "step_000200").exists():
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (run / "results.json").exists()
    resumed = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((run / "results.json").read_text())["steps"] == 1000
    steps = [json.loads(l)["step"] for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(100, 1001, 100))


def test_cli_refuses_bad_arguments(tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "compose_lens.cli", *args], capture_output=True, text=True)

    bad = run("train", "--out", str(tmp_path / "x"), "--set", "f=1.5")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "f=1.5" in bad.stderr
    assert not (tmp_path / "x").exists()
    bad = run("evaluate", str(tmp_path / "nothing"))
    assert bad.returncode == 2 and "no such file" in bad.stderr
    bad = run("train")
    assert bad.returncode == 2 and "--out" in bad.stderr


def test_kill_during_the_first_checkpoint_resumes_to_identical_weights(tmp_path, tiny_config):
    """Killed while writing the first checkpoint: half-written temporaries, no resume state."""
    Trainer(tiny_config, tmp_path / "full", progress=False).run()

    def interrupt(trainer):
        if trainer.step == 7:
            raise KeyboardInterrupt

    for planted in ("checkpoint", "resume", "both", "renamed"):
        run = tmp_path / planted
        with pytest.raises(KeyboardInterrupt):
            Trainer(tiny_config, run, progress=False).run(on_step=interrupt)
        if planted in ("checkpoint", "both"):  # what write_checkpoint stages, as a kill leaves it
            (run / "checkpoints").mkdir(exist_ok=True)
            half = temp_beside(run / "checkpoints" / "step_000010", directory=True)
            (half / "model.safetensors").write_bytes(b"\x00half")
        if planted in ("resume", "both"):
            temp_beside(run / "resume.safetensors").write_bytes(b"\x00half")
        if planted == "renamed":  # the checkpoint renamed into place, the resume state never written
            (run / "checkpoints" / "step_000010").mkdir(parents=True)
            (run / "checkpoints" / "step_000010" / "model.safetensors").write_bytes(b"\x00")
        assert not (run / "resume.safetensors").exists()
        trainer = Trainer(tiny_config, run, resume=True, progress=False)
        assert trainer.restarted
        trainer.run()
        full, cut = weights(tmp_path / "full"), weights(run)
        assert all(torch.equal(full[k], cut[k]) for k in full), planted
        assert [json.loads(l)["step"] for l in (run / "metrics.jsonl").read_text().splitlines()] == [10, 20, 30, 40]
        assert not list(run.rglob("*.tmp"))


def test_overwrite_replaces_only_a_run_with_nothing_foreign(tmp_path, tiny_config):
    run = tmp_path / "run"
    Trainer(tiny_config.with_overrides(["steps=10"]), run, progress=False).run()
    (run / "my_notes.txt").write_text("keep me\n")
    with pytest.raises(ComposeLensError, match="my_notes.txt"):
        Trainer(tiny_config, run, overwrite=True, progress=False)
    assert (run / "my_notes.txt").read_text() == "keep me\n" and (run / "model.safetensors").exists()
    (run / "my_notes.txt").unlink()
    Trainer(tiny_config.with_overrides(["steps=20"]), run, overwrite=True, progress=False).run()
    assert json.loads((run / "results.json").read_text())["steps"] == 20
    foreign = tmp_path / "photos"
    foreign.mkdir()
    (foreign / "cat.jpg").write_bytes(b"\xff\xd8")
    with pytest.raises(ComposeLensError, match="cat.jpg"):
        Trainer(tiny_config, foreign, overwrite=True, progress=False)
    assert (foreign / "cat.jpg").exists()


def test_a_second_trainer_on_a_run_in_use_is_refused(tmp_path, tiny_config, capsys):
    from compose_lens.cli import main

    run = tmp_path / "run"
    first = Trainer(tiny_config, run, progress=False)  # holds the run's lock until it ends
    with pytest.raises(ComposeLensError, match="another compose-lens process is using this run"):
        Trainer(tiny_config, run, resume=True, progress=False)
    config = tmp_path / "tiny.json"
    config.write_text(tiny_config.to_json())
    assert main(["train", "--config", str(config), "--out", str(run), "--overwrite", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "another compose-lens process" in err
    first.run()
    assert (run / "results.json").exists()


def test_a_lock_left_by_a_killed_process_does_not_block(tmp_path, tiny_config):
    run = tmp_path / "run"
    run.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from compose_lens.data.safety import "
                               "DirectoryLock; DirectoryLock(sys.argv[1], 'train', 'busy'); print('held', "
                               "flush=True); time.sleep(120)", str(run)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(ComposeLensError, match="another compose-lens process"):
        Trainer(tiny_config, run, progress=False)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    Trainer(tiny_config.with_overrides(["steps=10"]), run, progress=False).run()  # the kernel dropped the lock
    assert (run / "results.json").exists()


def test_disk_full_while_writing_a_checkpoint_keeps_the_previous_one(tmp_path, tiny_config, monkeypatch):
    import errno

    from compose_lens.training import runs

    Trainer(tiny_config, tmp_path / "full", progress=False).run()
    real_save = runs.save_file

    def full_disk(tensors, path, metadata=None):
        if metadata and metadata.get("step") == "20":
            with open(path, "wb") as handle:
                handle.write(b"\x00" * 10)  # part of the file made it to disk
            raise OSError(errno.ENOSPC, "No space left on device", path)
        return real_save(tensors, path, metadata=metadata)

    monkeypatch.setattr(runs, "save_file", full_disk)
    run = tmp_path / "run"
    with pytest.raises(ComposeLensError) as caught:
        Trainer(tiny_config, run, progress=False).run()
    message = str(caught.value)
    assert "\n" not in message and "No space left on device" in message and "step 10 is kept" in message
    assert not list(run.rglob("*.tmp"))
    assert not (run / "checkpoints" / "step_000020").exists()
    monkeypatch.setattr(runs, "save_file", real_save)
    Trainer(tiny_config, run, resume=True, progress=False).run()
    full, cut = weights(tmp_path / "full"), weights(run)
    assert all(torch.equal(full[k], cut[k]) for k in full)


def test_plain_resume_of_a_split_file_run_keeps_its_split(tmp_path, tiny_config, capsys):
    from compose_lens.cli import main
    from compose_lens.data.split import Split

    split = Split.from_task(tiny_config.task.replace(seed=5))  # not the split the config's seed makes
    split_file = tmp_path / "split.json"
    split.save(split_file)
    config_file = tmp_path / "tiny.json"
    config_file.write_text(tiny_config.to_json())
    base = ["train", "--config", str(config_file), "--split-file", str(split_file), "--quiet"]
    assert main(base + ["--out", str(tmp_path / "full")]) == 0

    def interrupt(trainer):
        if trainer.step == 25:
            raise KeyboardInterrupt

    cut = tmp_path / "cut"
    loaded = Split.load(split_file, tiny_config.task)  # as `train --split-file` loads it
    config = tiny_config.__class__(task=loaded.task, model=tiny_config.model, train=tiny_config.train)
    with pytest.raises(KeyboardInterrupt):
        Trainer(config, cut, split=loaded, progress=False).run(on_step=interrupt)
    assert main(["train", "--out", str(cut), "--resume", "--quiet"]) == 0
    full, resumed = weights(tmp_path / "full"), weights(cut)
    assert all(torch.equal(full[k], resumed[k]) for k in full)
    pairs = [json.loads(f.read_text())["heldout_pairs"] for f in (cut / "split.json", split_file)]
    assert pairs[0] == pairs[1]


def test_evaluate_loads_the_safetensors_file_it_is_given(tmp_path, tiny_config):
    from compose_lens.training.runs import state_dict
    from compose_lens.training.subject import load_model

    run = tmp_path / "run"
    Trainer(tiny_config.with_overrides(["steps=20"]), run, progress=False).run()
    import shutil

    shutil.copy(run / "checkpoints" / "step_000010" / "model.safetensors", run / "other.safetensors")
    loaded = state_dict(load_model(run / "other.safetensors").model)
    other = load_file(str(run / "other.safetensors"))
    final = weights(run)
    assert all(torch.equal(loaded[k], other[k]) for k in other)
    assert not all(torch.equal(loaded[k], final[k]) for k in final)


def test_a_diverging_run_stops_with_one_line(tmp_path, tiny_config):
    with pytest.raises(ComposeLensError, match="diverged"):
        Trainer(tiny_config.with_overrides(["lr=1e30"]), tmp_path / "run", progress=False).run()


def test_compile_only_for_long_runs(tiny_config):
    from compose_lens.training.train import COMPILE_MIN_STEPS, use_compile

    assert not use_compile(tiny_config)  # the tests' short runs stay eager
    long = tiny_config.replace(train=tiny_config.train.replace(steps=COMPILE_MIN_STEPS))
    assert use_compile(long.replace(train=long.train.replace(compile="on")))
    assert not use_compile(long.replace(train=long.train.replace(compile="off")))


def test_a_run_records_the_threads_it_trained_on_once_the_load_has_chosen_them(tiny_config, tmp_path, monkeypatch):
    """With no thread count set, the trainer takes the cores the load leaves once it starts; its provenance
    (``torch_threads``) is read after that choice, so it agrees with ``threads``, the count the run trained on."""
    import torch

    from compose_lens.core import cores
    from compose_lens.training.train import Trainer

    if cores.cpu_count() < 2:
        pytest.skip("one core: the load cannot choose fewer threads than torch starts with")
    monkeypatch.setattr(cores.ThreadGovernor, "first_threads", lambda self, probe_s=0.3: 1)
    before = torch.get_num_threads()
    torch.set_num_threads(cores.cpu_count())  # as a fresh process starts: the trainer's governor decides
    try:
        config = tiny_config.replace(train=tiny_config.train.replace(threads=0, steps=10))
        results = Trainer(config, tmp_path / "run", progress=False).run()
    finally:
        torch.set_num_threads(before)
    assert results["threads"] == 1 and results["torch_threads"] == 1


def test_thread_rule_counts_only_other_processes():
    from compose_lens.core.cores import ThreadGovernor, threads_for

    assert threads_for(2, 0.0) == 2 and threads_for(2, 1.0) == 1 and threads_for(4, 1.2) == 3
    governor = ThreadGovernor()
    assert 1 <= governor.first_threads(0.2) <= governor.cores
