"""K runs trained in one process (compose_lens.training.batched) equal the same runs trained alone.

**Tolerance.** The batched step is the Trainer's arithmetic on the same tensors except
the mapped forward/backward, where vmap turns each matrix product into a batched one
(``bmm``) that a BLAS may sum in another order. On the project's CPU this tiny model
(d_vocab_out 7) gets every gradient bit-for-bit but the unembedding's, one rounding
off; after 100 steps at lr 1e-3 the weights differ by at most ~4e-7 and the losses
by one or two float32 roundings (~1.2e-7 at 1.9). The floor used here, atol 1e-5 on
the weights and rtol 1e-6 on the losses, sits well above that and five orders of
magnitude below what a wrong data stream or optimizer state gives (weights ~0.8
apart: the negative controls below). Accuracies are compared exactly (a flip would
need two logits within ~1e-7 of each other).
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from compose_lens.training import runs
from compose_lens.training.subject import load_model
from compose_lens.training.batched import BatchedTrainer
from compose_lens.core.errors import ComposeLensError
from compose_lens.training.train import Trainer

K = 4
WEIGHTS = dict(rtol=0.0, atol=1e-5)
LOSS = dict(rtol=1e-6, atol=0.0)


def seeded(config, seed):
    return config.with_overrides([f"task.seed={seed}", f"train.seed={seed}", f"model.init_seed={seed}"])


@pytest.fixture(scope="module")
def configs():
    from compose_lens.core.config import ModelConfig, RunConfig, TaskConfig, TrainConfig

    torch.set_num_threads(1)
    task = TaskConfig(modulus=7, n_vars=6, left_forbidden=("f",), right_forbidden=("a",), f=0.8)
    model = ModelConfig.for_task(task, d_model=32, d_head=32, d_mlp=64)
    train = TrainConfig(steps=100, batch_size=64, eval_every=10, checkpoint_every=20, pool_size=64, threads=1)
    base = RunConfig(task=task, model=model, train=train)
    return [seeded(base, s) for s in range(K)]


@pytest.fixture(scope="module")
def alone(configs, tmp_path_factory):
    """The K runs, each trained alone by a Trainer."""
    root = tmp_path_factory.mktemp("alone")
    torch.set_num_threads(1)
    for k, config in enumerate(configs):
        Trainer(config, root / f"run{k}", progress=False).run()
    return [root / f"run{k}" for k in range(K)]


@pytest.fixture(scope="module")
def batched(configs, tmp_path_factory):
    """The same K runs trained together."""
    root = tmp_path_factory.mktemp("batched")
    torch.set_num_threads(1)
    dirs = [root / f"run{k}" for k in range(K)]
    BatchedTrainer(configs, dirs, progress=False).run()
    return dirs


def weights(run_dir):
    return load_file(str(run_dir / "model.safetensors"))


def metrics(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def assert_same_run(a, b):
    """Run directory ``b`` holds the run of ``a``: files, weights, every metric, results."""
    names = lambda d: sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.name != ".compose-lens")  # noqa: E731
    assert names(a) == names(b)
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for name in wa:
        torch.testing.assert_close(wb[name], wa[name], **WEIGHTS, msg=lambda m: f"{name}: {m}")
    for step in ("step_000020", "step_000100"):
        ca = load_file(str(a / "checkpoints" / step / "model.safetensors"))
        cb = load_file(str(b / "checkpoints" / step / "model.safetensors"))
        for name in ca:
            torch.testing.assert_close(cb[name], ca[name], **WEIGHTS)
    ma, mb = metrics(a), metrics(b)
    assert [m["step"] for m in ma] == [m["step"] for m in mb] == list(range(10, 101, 10))
    for la, lb in zip(ma, mb):
        assert la.keys() == lb.keys()
        torch.testing.assert_close(lb["train_loss"], la["train_loss"], **LOSS)
        assert {k: v for k, v in la.items() if k not in ("train_loss", "elapsed_s")} == \
               {k: v for k, v in lb.items() if k not in ("train_loss", "elapsed_s")}
    ra, rb = runs.read_results(a), runs.read_results(b)
    assert ra.keys() == rb.keys()
    assert (ra["steps"], ra["pools"], ra["exhaustive"], ra["outcome"]) == \
           (rb["steps"], rb["pools"], rb["exhaustive"], rb["outcome"])
    assert (a / "config.json").read_text() == (b / "config.json").read_text()
    assert (a / "split.json").read_text() == (b / "split.json").read_text()


def test_batched_runs_equal_runs_trained_alone(alone, batched):
    for a, b in zip(alone, batched):
        assert_same_run(a, b)


@pytest.mark.skipif(not __import__("compose_lens.core.cores", fromlist=["x"]).has_bf16_units(),
                    reason="this CPU has no bf16 units (AMX, AVX-512 BF16)")
def test_batched_bf16_runs_equal_bf16_runs_trained_alone(configs, tmp_path):
    """Under bf16 autocast (fp32 master weights and optimizer state) the stacked runs write what each
    writes alone in bf16, to the same tolerance as in fp32; a run stacked in bf16 is not the fp32 run."""
    torch.set_num_threads(1)
    bf16 = [c.with_overrides(["precision=bf16"]) for c in configs[:2]]
    for k, config in enumerate(bf16):
        Trainer(config, tmp_path / f"alone{k}", progress=False).run()
    BatchedTrainer(bf16, [tmp_path / f"batched{k}" for k in range(2)], progress=False).run()
    for k in range(2):
        assert_same_run(tmp_path / f"alone{k}", tmp_path / f"batched{k}")
        assert runs.read_results(tmp_path / f"batched{k}")["stacked"] == 2
    fp32 = tmp_path / "fp32"
    Trainer(configs[0], fp32, progress=False).run()
    far = max((weights(fp32)[n] - w).abs().max().item() for n, w in weights(tmp_path / "batched0").items())
    assert far > 100 * WEIGHTS["atol"], "the bf16 run came out as the fp32 run: autocast did not act"


def test_batched_run_directories_are_ordinary_runs(batched, configs):
    """Every existing reader takes them: the model, the checkpoints, the resume state."""
    loaded = load_model(batched[1])
    assert loaded.config == configs[1]
    checkpoints, config, _ = runs.find_checkpoints(batched[1])
    assert [c.step for c in checkpoints] == [20, 40, 60, 80, 100] and config == configs[1]
    # a finished batched run resumes alone as a finished Trainer run (nothing left to train)
    results = Trainer(configs[1], batched[1], resume=True, progress=False).run()
    assert results["steps"] == 100


def test_swapped_seeds_do_not_pass_for_equal(alone, batched):
    """Negative control: the comparison tells the runs apart (run k against run k + 1)."""
    for k in range(K):
        with pytest.raises(AssertionError):
            assert_same_run(alone[(k + 1) % K], batched[k])


def test_shared_data_stream_or_optimizer_state_breaks_equality(alone, configs, tmp_path):
    """The test above fails if the runs shared one data stream, or one optimizer state."""
    steps = ["steps=40"]
    short = [c.with_overrides(steps) for c in configs]
    alone_short = [tmp_path / f"alone{k}" for k in range(K)]
    for config, d in zip(short, alone_short):
        Trainer(config, d, progress=False).run()

    shared_data = BatchedTrainer(short, [tmp_path / f"data{k}" for k in range(K)], progress=False)
    for run in shared_data.runs[1:]:
        run.sampler = shared_data.runs[0].sampler
    shared_data.run()

    shared_state = BatchedTrainer(short, [tmp_path / f"state{k}" for k in range(K)], progress=False)
    first = shared_state.runs[0]
    for run in shared_state.runs[1:]:
        for own, theirs in zip(run.trainable, first.trainable):
            shared_state.optimizer.state[own] = shared_state.optimizer.state[theirs]
    shared_state.run()

    for k in range(1, K):
        for broken in ("data", "state"):
            a, b = weights(alone_short[k]), weights(tmp_path / f"{broken}{k}")
            assert max((a[n] - b[n]).abs().max().item() for n in a) > 1e-3, (broken, k)
    # run 0 owns the stream the others read (batches are a pure function of the step): still itself
    a, b = weights(alone_short[0]), weights(tmp_path / "data0")
    for name in a:
        torch.testing.assert_close(b[name], a[name], **WEIGHTS)


def test_interrupted_batched_runs_resume(alone, batched, configs, tmp_path):
    """A kill between the K checkpoint writes leaves the runs at different steps: the runs
    behind catch up first, and every run ends as it would have uninterrupted."""
    dirs = [tmp_path / f"run{k}" for k in range(K)]
    trainer = BatchedTrainer(configs, dirs, progress=False)
    original = trainer.runs[2].save_checkpoint

    def dies_at_60():
        if trainer.runs[2].step == 60:
            raise KeyboardInterrupt  # runs 0 and 1 have written step 60, runs 2 and 3 not
        original()

    trainer.runs[2].save_checkpoint = dies_at_60
    with pytest.raises(KeyboardInterrupt):
        trainer.run()
    saved = [int(resume_metadata(d)["step"]) for d in dirs]
    assert saved == [60, 60, 40, 40]
    with pytest.raises(ComposeLensError, match="already holds a run"):
        BatchedTrainer(configs, dirs, progress=False)  # nothing replaced without --resume/--overwrite
    steps_seen = []
    resumed = BatchedTrainer(configs, dirs, resume=True, progress=False)
    resumed.run(on_step=lambda t: steps_seen.append(tuple(r.step for r in t.runs)))
    assert steps_seen[0] == (60, 60, 41, 41)  # the two runs behind train alone first
    assert steps_seen[19] == (60, 60, 60, 60) and steps_seen[20] == (61, 61, 61, 61)
    for a, b in zip(alone, dirs):
        assert_same_run(a, b)


def resume_metadata(run_dir):
    from safetensors import safe_open

    with safe_open(str(run_dir / runs.RESUME_FILE), "pt") as f:
        return f.metadata()


def test_incompatible_runs_are_refused_before_any_directory_is_touched(configs, tmp_path):
    for change, word in ((["lr=0.01"], "train.lr"), (["batch_size=32"], "train.batch_size"),
                         (["model.d_mlp=32"], "same model"), (["compile=on"], "compile=on")):
        with pytest.raises(ComposeLensError, match=word):
            BatchedTrainer([configs[0], configs[1].with_overrides(change)], [tmp_path / "a", tmp_path / "b"],
                           progress=False)
        assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    with pytest.raises(ComposeLensError, match="same directory"):
        BatchedTrainer(configs[:2], [tmp_path / "a", tmp_path / "a"], progress=False)
    with pytest.raises(ComposeLensError, match="transformerlens"):
        BatchedTrainer([c.with_overrides(["fast_path=off"]) for c in configs[:2]],
                       [tmp_path / "a", tmp_path / "b"], progress=False)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    # a run refused after the runs before it were set up leaves their directories unlocked
    Trainer(configs[1].with_overrides(["steps=1", "eval_every=1"]), tmp_path / "b", progress=False).run()
    with pytest.raises(ComposeLensError, match="already holds a run"):
        BatchedTrainer(configs[:2], [tmp_path / "a", tmp_path / "b"], progress=False)
    Trainer(configs[0].with_overrides(["steps=1", "eval_every=1"]), tmp_path / "a", overwrite=True,
            progress=False).run()


# -- compose-lens sweep --runs-per-process -----------------------------------------------------


def test_sweep_trains_points_together_to_the_numbers_of_points_trained_alone(tiny_config, tmp_path):
    from compose_lens.sweep import SweepPoint, chunk_jobs, read_csv, run_dir_of, run_sweep

    one = run_sweep(tiny_config, "f", [0.6, 0.9], [0, 1], tmp_path / "one", workers=1, threads=1, progress=False)
    two = run_sweep(tiny_config, "f", [0.6, 0.9], [0, 1], tmp_path / "two", workers=1, threads=1, progress=False,
                    runs_per_process=2)
    assert (two.trained, two.failed) == (4, 0)
    assert json.loads((tmp_path / "two" / "sweep.json").read_text())["runs_per_process"] == 2
    rows_one, rows_two = read_csv(tmp_path / "one" / "results.csv"), read_csv(tmp_path / "two" / "results.csv")
    drop = ("train_wall_time_s", "run_dir")
    assert [{k: v for k, v in r.items() if k not in drop} for r in rows_one] == \
           [{k: v for k, v in r.items() if k not in drop} for r in rows_two]
    for value in (0.6, 0.9):
        for seed in (0, 1):
            point = SweepPoint("f", value, seed)
            a, b = weights(run_dir_of(tmp_path / "one", point)), weights(run_dir_of(tmp_path / "two", point))
            for name in a:
                torch.testing.assert_close(b[name], a[name], **WEIGHTS)
    # points that cannot share a model are never put together
    jobs = [(SweepPoint("lr", lr, 0), SweepPoint("lr", lr, 0).config(tiny_config).to_dict(), str(tmp_path / str(lr)))
            for lr in (0.001, 0.01)]
    assert [len(c) for c in chunk_jobs(jobs, 4)] == [1, 1]
    assert one.failed == 0


def test_sweep_runs_per_process_auto_trains_with_the_k_its_probe_chose(tiny_config, tmp_path):
    from compose_lens.sweep import run_sweep

    result = run_sweep(tiny_config, "f", [0.6, 0.9], [0], tmp_path / "auto", workers=1, threads=1, progress=False,
                       runs_per_process="auto")
    assert (result.trained, result.failed) == (2, 0)
    sweep = json.loads((tmp_path / "auto" / "sweep.json").read_text())
    probe = sweep["probe"]
    assert sorted(c["k"] for c in probe["candidates"]) == [1, 2]  # no stack larger than the sweep's 2 points
    assert {c["precision"] for c in probe["candidates"]} == {tiny_config.train.precision}  # K alone is chosen
    assert sweep["runs_per_process"] == probe["runs_per_process"]
    stacked = {runs.read_results(d)["stacked"] for d in (tmp_path / "auto" / "runs").iterdir() if (d / "results.json").exists()}
    assert stacked == {probe["runs_per_process"]}
    with pytest.raises(ComposeLensError, match="probes this machine"):
        run_sweep(tiny_config, "f", [0.6], [0], tmp_path / "ray", backend="ray", runs_per_process="auto")


def test_a_failing_point_of_a_batch_fails_alone(tiny_config, tmp_path):
    from compose_lens.sweep import read_csv, run_sweep

    # f = 0.05 of 49 pairs leaves 2 training pairs: the split misses numbers, so that run fails
    result = run_sweep(tiny_config, "f", [0.05, 0.9], [0], tmp_path, workers=1, threads=1, progress=False,
                       runs_per_process=2)
    rows = {r["value"]: r for r in read_csv(tmp_path / "results.csv")}
    assert rows["0.05"]["status"] == "failed" and "never use number" in rows["0.05"]["error"]
    assert rows["0.9"]["status"] == "done" and result.failed == 1
