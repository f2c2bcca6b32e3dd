"""experiments/stall_rate.py --table / --compare on planted run folders: a seed counts once."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("stall_rate", ROOT / "experiments" / "stall_rate.py")
stall_rate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(stall_rate)

POOLS = ("0var_train", "0var_add_restricted", "1var_train", "1var_add_restricted", "1var_var_restricted",
         "2var_train", "2var_add_restricted", "2var_var_restricted_1", "2var_var_restricted_2")


def plant(out: Path, seed: int, kernel: str, routing_at: int | None, last: int, finished: bool,
          precision: str = "fp32") -> None:
    """A run folder as stall_rate.py leaves it: pools every 500 steps (addition at 1,000; routing and the
    headline at ``routing_at``, None: never), ``results.json`` once ``finished``."""
    run = out / "runs" / stall_rate.run_name(seed, kernel, 1, precision, "off", "none")
    run.mkdir(parents=True)
    config = {"task": {"f": 0.7, "r": 1.0},
              "train": {"seed": seed, "precision": precision, "device": "cpu", "threads": 1, "compile": "off"}}
    (run / "config.json").write_text(json.dumps(config))
    rows = []
    for step in range(500, last + 1, 500):
        routed = routing_at is not None and step >= routing_at
        rows.append({"step": step, "train_loss": 0.01, **{
            pool: (1.0 if step >= 1000 else 0.1) if pool.startswith("0var") else (0.99 if routed else 0.57)
            for pool in POOLS}})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if finished:
        acc = 0.99 if routing_at is not None else 0.3
        (run / "results.json").write_text(json.dumps({
            "steps": last, "threads": 1, "compiled": False,
            "exhaustive": {"zero_var_heldout": {"accuracy": 0.99}, "two_var_union": {"accuracy": acc}}}))


def recipe(out: Path) -> None:
    plant(out, 1, "native", None, 30_000, True)          # stalled
    plant(out, 1, "default", 3_000, 8_000, True)         # its rounding twin generalised
    plant(out, 2, "native", 3_000, 9_000, True)
    plant(out, 2, "default", 3_000, 12_000, True)
    plant(out, 3, "native", 2_500, 7_000, True)
    plant(out, 4, "native", None, 6_000, False)          # unfinished, no routing yet: undecided
    plant(out, 5, "native", 3_500, 6_000, False)         # unfinished, routing formed: can no longer stall


def test_table_counts_each_seed_once_and_reports_the_kernel_pairs_apart(tmp_path):
    recipe(tmp_path)
    frame = stall_rate.table(tmp_path)
    assert len(frame) == 7  # every run has its row, unfinished ones too
    summary = json.loads((tmp_path / "summary.json").read_text())
    fp32 = summary["by_seed"]["precision=fp32"]
    # by trajectory this would be 1 of 5 finished runs; by seed (native first) it is 1 of 4 decided seeds
    assert (fp32["stalled"], fp32["seeds"]) == (1, 4)
    assert fp32["stalled_seeds"] == [1] and fp32["undecided_seeds"] == [4]
    assert fp32["interval_95"] == pytest.approx(list(stall_rate.stats.wilson_interval(1, 4)))
    (pair,) = summary["paired_variants"]
    assert (pair["seeds"], pair["agree"], pair["only_a"], pair["only_b"]) == (2, 1, 1, 0)
    assert pair["flip_interval_95"] == pytest.approx(list(stall_rate.stats.wilson_interval(1, 2)))
    assert summary["trajectories"] == {"runs": 7, "finished": 5, "decided": 6, "stalled": 1}


def test_native_is_paired_with_every_other_kernel_a_seed_ran_on(tmp_path):
    """The by-seed study's rounding twins run on avx2, the older study's on the scalar kernels: each is paired
    with native (before, only 'default' was, so avx2 twins were silently left unpaired)."""
    recipe(tmp_path)
    plant(tmp_path, 1, "avx2", None, 30_000, True)       # stalls as native did
    plant(tmp_path, 3, "avx2", None, 30_000, True)       # stalls where native generalised: a flip
    stall_rate.table(tmp_path)
    pairs = {p["b"]: p for p in json.loads((tmp_path / "summary.json").read_text())["paired_variants"]}
    assert set(pairs) == {"default", "avx2"}
    assert (pairs["avx2"]["seeds"], pairs["avx2"]["agree"], pairs["avx2"]["only_b"]) == (2, 1, 1)
    fp32 = json.loads((tmp_path / "summary.json").read_text())["by_seed"]["precision=fp32"]
    assert (fp32["stalled"], fp32["seeds"]) == (1, 4)  # a twin never counts its seed twice


def test_compare_sets_the_recipe_against_the_remedy_by_seed(tmp_path, capsys, monkeypatch):
    recipe(tmp_path / "recipe")
    for seed in (1, 2, 3, 4):
        plant(tmp_path / "remedy", seed, "native", 1_500, 5_000, True)
    monkeypatch.setattr("sys.argv", ["stall_rate.py", "--out", str(tmp_path / "recipe"), "--table",
                                     "--compare", str(tmp_path / "remedy")])
    assert stall_rate.main() == 0
    found = json.loads((tmp_path / "recipe" / "comparison_with_remedy.json").read_text())["precision=fp32"]
    assert (found["recipe"]["stalled"], found["recipe"]["seeds"]) == (1, 4)
    assert (found["other"]["stalled"], found["other"]["seeds"]) == (0, 4)
    assert found["fisher_exact_p"] == pytest.approx(1.0) and found["common_seeds"] == 3
    # seeds 1-3 trained by both: seed 1 stalled under the recipe only (a discordant pair), 2 and 3 agree
    paired = found["paired"]["stalled"]
    assert (paired["seeds"], paired["only_a"], paired["only_b"]) == (3, 1, 0)
    assert paired["mcnemar_exact_p"] == pytest.approx(1.0)
    # the stalled recipe run is censored at 30,000, not left out: 3 of 4 reached the headline, all 4 of the remedy's
    time = found["time_to_headline"]
    assert (time["n_a"], time["reached_a"], time["n_b"], time["reached_b"]) == (4, 3, 4, 4)
    assert (time["median_a"], time["median_b"]) == (7_000, 5_000) and time["p_value"] < 0.05
    assert found["routed"]["recipe"] == [3, 3] and found["routed"]["other"] == [4, 4]
    out = capsys.readouterr().out
    assert "recipe 1 of 4, 0.25 [0.05, 0.70]; remedy 0 of 4" in out and "log-rank p = " in out


def test_compare_with_a_folder_without_runs_is_refused(tmp_path, capsys, monkeypatch):
    recipe(tmp_path / "recipe")
    monkeypatch.setattr("sys.argv", ["stall_rate.py", "--out", str(tmp_path / "recipe"), "--table",
                                     "--compare", str(tmp_path / "nothing")])
    assert stall_rate.main() == 2
    assert "no runs/ folder" in capsys.readouterr().err
    assert not (tmp_path / "recipe" / "runs.csv").exists()  # refused before anything was written
