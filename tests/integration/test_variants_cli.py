"""The task variants end to end: `data sample`, `train`, `evaluate` and `sweep` take them through the config.

A p = 7 task with every variant on (reassignment, noise words, chains, a 24-token context)
and a 3-layer model (chains need a third layer; it trains on the lastpos forward), a few
steps each: the settings reach the data, the run's files, the pools and the sweep's points.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from compose_lens.core.config import TaskConfig
from compose_lens.data.task import decode

TASK = {"modulus": 7, "n_vars": 6, "left_forbidden": ["f"], "right_forbidden": ["a"], "f": 0.8}
VARIANTS = {"reassign_rate": 0.5, "noise_rate": 0.3, "chain_rate": 0.5, "seq_len": 24, "max_assignments": 6}
TRAIN = {"steps": 20, "batch_size": 32, "eval_every": 10, "checkpoint_every": 10, "pool_size": 32, "threads": 1}
VARIANT_POOLS = {"reassign_latest", "reassign_first", "reassign_any", "reassign_add_restricted",
                 "chain_train", "chain_add_restricted", "noise_none", "noise_all"}


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "compose_lens.cli", *args], capture_output=True, text=True,
                          timeout=300)


def test_data_sample_takes_set_like_train(tmp_path):
    sets = [f"--set={k}={json.dumps(v)}" for k, v in {**TASK, **VARIANTS}.items()]
    out = cli("data", "sample", "--n", "30", *sets)
    assert out.returncode == 0, out.stderr
    task = TaskConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in {**TASK, **VARIANTS}.items()})
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(rows) == 30 and all(len(r["tokens"]) == 24 for r in rows)
    assert all(decode(task, r["tokens"]).label == r["label"] for r in rows)
    assert any(decode(task, r["tokens"]).n_fillers for r in rows)  # the settings reached the data
    pool = cli("data", "sample", "--n", "5", "--split", "reassign_first", *sets)
    assert pool.returncode == 0, pool.stderr
    for bad, words in ((["--set", "reassign_rate=2"], "reassign_rate=2: "),
                       (["--set", "steps=3"], "not a task setting"),
                       (["--split", "noise_all"], "--split noise_all: use train or one of")):
        refused = cli("data", "sample", "--n", "2", *bad)
        assert refused.returncode == 2 and words in refused.stderr and len(refused.stderr.splitlines()) == 1


@pytest.fixture(scope="module")
def variant_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("variants")
    config = root / "config.json"
    config.write_text(json.dumps({"task": {**TASK, **VARIANTS},
                                  "model": {"n_layers": 3, "d_model": 16, "d_head": 16, "d_mlp": 32},
                                  "train": TRAIN}))
    out = cli("train", "--config", str(config), "--out", str(root / "run"), "--quiet")
    assert out.returncode == 0, out.stderr
    return root


def test_train_and_evaluate_follow_the_variant(variant_run):
    run = variant_run / "run"
    saved = json.loads((run / "config.json").read_text())
    assert {k: saved["task"][k] for k in VARIANTS} == VARIANTS
    assert saved["model"]["d_vocab"] == 7 + 3 + 4 + 6 and saved["model"]["n_ctx"] == 24
    results = json.loads((run / "results.json").read_text())
    assert results["forward"] == "lastpos" and VARIANT_POOLS <= set(results["pools"])
    logged = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert VARIANT_POOLS <= set(logged)
    evaluated = cli("evaluate", str(run), "--pool-size", "20", "--json", "--quiet")
    assert evaluated.returncode == 0, evaluated.stderr
    assert set(json.loads(evaluated.stdout)["pools"]) == set(results["pools"])


def test_sweep_over_a_variant_setting(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": TASK, "model": {"d_model": 16, "d_head": 16, "d_mlp": 32},
                                  "train": TRAIN}))
    out = cli("sweep", "--param", "reassign_rate", "--values", "0", "0.5", "--steps", "10", "--config",
              str(config), "--set", "noise_rate=0.2", "--out", str(tmp_path / "sweep"), "--workers", "1",
              "--threads", "1", "--quiet")
    assert out.returncode == 0, out.stderr
    tasks = {p.parent.name: json.loads(p.read_text())["task"] for p in (tmp_path / "sweep" / "runs").glob("*/config.json")}
    assert {name: (t.get("reassign_rate", 0.0), t["noise_rate"]) for name, t in tasks.items()} == {
        "reassign_rate=0_seed=0": (0.0, 0.2), "reassign_rate=0.5_seed=0": (0.5, 0.2)}
