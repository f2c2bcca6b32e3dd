"""Every number docs/claims/ lists is on its page as written and is what its committed data gives."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("check_claims", ROOT / "experiments" / "check_claims.py")
check_claims = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_claims)

CLAIMS = check_claims.load()


@pytest.mark.parametrize("claim", CLAIMS, ids=[f"{c['doc']}: {c['quote'][:50]}" for c in CLAIMS])
def test_claim_holds(claim):
    assert check_claims.check(claim) == []


def test_the_claims_cover_the_stall_rate_the_seed_table_and_the_divergence_count():
    computes = {c["compute"] for c in CLAIMS}
    assert {"stall_rate", "stall_comparison", "paired_variants", "onset_row", "json_value", "diverged_runs",
                "table_expressions"} <= computes


def planted(tmp_path: Path, doc: str, old: str, new: str) -> Path:
    """A copy of the repository's page ``doc`` (and the data the claims read) with one number changed."""
    root = tmp_path / "repo"
    (root / doc).parent.mkdir(parents=True, exist_ok=True)
    text = (ROOT / doc).read_text()
    assert old in text
    (root / doc).write_text(text.replace(old, new, 1))
    shutil.copytree(ROOT / "experiments" / "results" / "stall_rate" / "fp32", root / "experiments" / "results"
                    / "stall_rate" / "fp32", ignore=shutil.ignore_patterns("runs"))
    return root


def test_a_planted_wrong_number_on_the_page_fails(tmp_path):
    claim = next(c for c in CLAIMS if c["quote"].startswith("**fp32: 2 of 14 seeds"))
    root = planted(tmp_path, claim["doc"], "2 of 14 seeds stalled: 0.14", "2 of 24 seeds stalled: 0.08")
    wrong = {**claim, "quote": claim["quote"].replace("2 of 14", "2 of 24").replace(": 0.14", ": 0.08")}
    problems = check_claims.check(wrong, root)
    assert len(problems) == 1 and "gives '**fp32: 2 of 14 seeds stalled: 0.14" in problems[0]
    assert check_claims.check(claim, root) and "not on the page" in check_claims.check(claim, root)[0]


def test_a_planted_wrong_row_in_the_data_fails(tmp_path):
    claim = next(c for c in CLAIMS if c["quote"].startswith("**fp32: 2 of 14 seeds"))
    root = planted(tmp_path, claim["doc"], "2 of 14", "2 of 14")
    runs = root / claim["source"]
    text = runs.read_text()
    runs.write_text(text.replace("seed=101_kernel=native_threads=1_fp32,101,0.7,1.0,fp32,1,native,cpu,False,none,17300,generalised",
                                 "seed=101_kernel=native_threads=1_fp32,101,0.7,1.0,fp32,1,native,cpu,False,none,30000,stalled"))
    assert runs.read_text() != text
    (problem,) = check_claims.check(claim, root)
    assert "gives '**fp32: 3 of 14 seeds stalled: 0.21" in problem


def test_the_command_says_which_claims_are_wrong(tmp_path, capsys):
    import shutil

    table = shutil.copytree(ROOT / "docs" / "claims", tmp_path / "claims")  # the folder, one page's file edited
    stalls = table / "stalls.toml"
    stalls.write_text(stalls.read_text().replace(
        'quote = "9 of 10 agree, McNemar exact p = 1.00"', 'quote = "8 of 10 agree, McNemar exact p = 1.00"'))
    assert check_claims.main(["--claims", str(table)]) == 1
    out = capsys.readouterr().out
    assert "WRONG  docs/stalls.md: 8 of 10 agree" in out and "1 of " in out.splitlines()[-1]
    assert check_claims.main(["--claims", str(tmp_path / "missing.toml")]) == 2


def _reproduce():
    spec = importlib.util.spec_from_file_location("reproduce", ROOT / "experiments" / "reproduce.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BY_SEED = ROOT / "experiments" / "results" / "stall_rate" / "by_seed"


def test_reproduce_quotes_the_by_seed_rates_the_committed_tables_give():
    import json

    rows = _reproduce().stall_rates()
    # the main line is the by-seed recipe study; every line is what `stall_rate.py --table` wrote there
    assert Path(rows[0]["folder"]) == BY_SEED / "recipe" and "Intel Xeon" in rows[0]["measure"]
    assert any("AMD EPYC" in row["measure"] and Path(row["folder"]).name == "fp32" for row in rows)
    for row in rows:
        summary = json.loads((Path(row["folder"]) / "summary.json").read_text())["by_seed"]["precision=fp32"]
        assert (row["stalled"], row["seeds"]) == (summary["stalled"], summary["seeds"])
        assert row["text"].startswith(f"{summary['stalled']} of {summary['seeds']}, ")
        low, high = summary["interval_95"]  # printed to the digits its width asks for (stats.format_estimate)
        printed = [float(v) for v in row["text"].rsplit("[", 1)[1].rstrip("]").split(", ")]
        assert printed == pytest.approx([low, high], abs=0.005)


def test_reproduce_follows_the_runs_table_when_a_seed_is_added(tmp_path):
    runs = pd.read_csv(BY_SEED / "recipe" / "runs.csv")
    added = runs[runs["outcome"] == "stalled"].iloc[[0]].assign(seed=9999, run="seed=9999_kernel=native_threads=1_fp32")
    (tmp_path / "recipe").mkdir()
    pd.concat([runs, added]).to_csv(tmp_path / "recipe" / "runs.csv", index=False)
    before = _reproduce().stall_rates()[0]
    (after,) = _reproduce().stall_rates((("stall rate, recipe", tmp_path / "recipe"),))
    assert (after["stalled"], after["seeds"]) == (before["stalled"] + 1, before["seeds"] + 1)
    assert after["text"].startswith(f"{before['stalled'] + 1} of {before['seeds'] + 1}, ")
    assert _reproduce().stall_rates((("absent", tmp_path / "nothing"),)) == []


def test_a_planted_row_in_one_of_several_tables_fails_the_sentence_that_quotes_them_all(tmp_path):
    claim = next(c for c in CLAIMS if c["quote"].startswith("9, 9 and 11 of the 15"))
    assert claim["compute"] == "table_expressions"
    root = tmp_path / "repo"
    (root / claim["doc"]).parent.mkdir(parents=True)
    shutil.copy(ROOT / claim["doc"], root / claim["doc"])
    shutil.copytree(ROOT / claim["source"], root / claim["source"])
    adder = root / claim["source"] / "blocks.1.mlp" / "llc.csv"
    table = pd.read_csv(adder)
    table.loc[table["step"] == 5001, "healthy"] = False  # one more estimate of the adder failed
    table.to_csv(adder, index=False)
    assert check_claims.check(claim) == []
    (problem,) = check_claims.check(claim, root)
    assert "gives '9, 9 and 12 of the 15 estimates" in problem


@pytest.mark.parametrize("folder", ["by_seed/recipe", "by_seed/remedy", "fp32", "bf16", "remedy_lr_x3"])
def test_each_stall_rate_table_is_what_its_committed_runs_give(folder):
    """The claims and `make reproduce` read runs.csv; a run added to runs/ without the table made again
    would leave them quoting fewer seeds than are committed."""
    spec = importlib.util.spec_from_file_location("stall_rate", ROOT / "experiments" / "stall_rate.py")
    stall_rate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stall_rate)
    out = ROOT / "experiments" / "results" / "stall_rate" / folder
    committed, read = pd.read_csv(out / "runs.csv"), stall_rate.read_runs(out).reset_index(drop=True)
    assert set(committed["run"]) == set(read["run"]), (
        f"{out}/runs.csv does not list the runs in {out}/runs: python experiments/stall_rate.py --out {out} --table")
    pd.testing.assert_frame_equal(read, committed, check_dtype=False)


def test_a_log_claim_follows_the_log_and_says_when_the_log_lacks_the_line(tmp_path):
    claim = next(c for c in CLAIMS if c["compute"] == "text_match" and "23 [23, 24] of 46 edges" in c["quote"])
    root = tmp_path / "repo"
    (root / claim["doc"]).parent.mkdir(parents=True)
    shutil.copy(ROOT / claim["doc"], root / claim["doc"])
    log = root / claim["source"]
    log.parent.mkdir(parents=True)
    text = (ROOT / claim["source"]).read_text()
    log.write_text(text.replace("eap-ig: 23 [23, 24]", "eap-ig: 24 [23, 24]"))
    (problem,) = check_claims.check(claim, root)
    assert "gives '`circuit` (EAP-IG): 24 [23, 24] of 46 edges" in problem
    log.write_text(text.replace("edges in the circuit", "edges kept"))
    (problem,) = check_claims.check(claim, root)
    assert "gives no value for the quote" in problem and "matches nothing" in problem


def test_stalled_ends_tells_a_flat_stall_from_a_late_learner_by_its_log(tmp_path):
    import json

    rows = [{"run": f"seed={s}_kernel=native", "seed": s, "kernel": "native", "precision": "fp32", "device": "cpu",
             "compiled": False, "threads": 1, "outcome": o, "decided": True, "steps": 30000,
             "1var_train_final": v, "two_var_union": u}
            for s, o, v, u in ((1, "stalled", 0.58, 0.31), (2, "stalled", 0.62, 0.35), (3, "stalled", 0.89, 0.55),
                               (4, "generalised", 1.0, 0.99))]
    pd.DataFrame(rows).to_csv(tmp_path / "runs.csv", index=False)
    log = tmp_path / "runs" / "seed=3_kernel=native"
    log.mkdir(parents=True)
    (log / "metrics.jsonl").write_text("".join(json.dumps({"step": step, "1var_train": acc}) + "\n"
                                               for step, acc in ((20000, 0.60), (25000, 0.63), (30000, 0.89))))
    found = check_claims.stalled_ends(tmp_path / "runs.csv")
    assert (found["stalled"], found["flat"], found["late"], found["late_seeds"]) == (3, 2, 1, "3")
    assert (found["flat_1var_low"], found["flat_1var_high"]) == (0.58, 0.62)
    assert found["late_1var_before_high"] == 0.63  # read from the late run's log, 5,000 steps before its end


def test_a_claim_with_a_broken_expression_is_reported_not_raised():
    claim = {"doc": "README.md", "quote": "compose-lens", "source": "experiments/results/stall_rate/by_seed/recipe/runs.csv",
             "compute": "table_expression", "args": {"expr": "f'{df['seed'].max()}' +"}, "template": "{value}"}
    (problem,) = check_claims.check(claim)
    assert "gives no value for the quote (SyntaxError" in problem


def test_seeds_by_outcome_writes_each_outcome_as_seed_ranges(tmp_path):
    rows = [{"run": f"seed={s}_kernel={k}", "seed": s, "kernel": k, "precision": "fp32", "device": "cpu",
             "compiled": False, "threads": 1, "outcome": o, "decided": True}
            for s, k, o in ((1, "native", "generalised"), (2, "native", "generalised"), (3, "native", "stalled"),
                            (4, "native", "generalised"), (3, "avx2", "generalised"))]  # seed 3's twin is not counted
    pd.DataFrame(rows).to_csv(tmp_path / "runs.csv", index=False)
    assert check_claims.seeds_by_outcome(tmp_path / "runs.csv")["cells"] == "1-4 (4) | 3 (1-2, 4) | 1 (3) | 0"


def test_a_truth_by_verdict_table_counts_every_pair_and_a_missing_one_as_zero(tmp_path):
    pd.DataFrame({"truth": ["yes", "yes", "no", "untestable"],
                  "verdict": ["supported", "inconclusive", "not supported", "inconclusive"]}).to_csv(
        tmp_path / "v.csv", index=False)
    rows = check_claims.crosstab_rows(tmp_path / "v.csv", "truth", "verdict", ["yes", "no", "untestable"],
                                      ["supported", "not supported", "inconclusive"])["rows"]
    assert rows.splitlines() == ["| yes | 1 | 0 | 1 | 2 |", "| no | 0 | 1 | 0 | 1 |", "| untestable | 0 | 0 | 1 | 1 |"]


def test_a_table_joined_on_its_key_takes_the_other_files_columns_with_their_suffix(tmp_path, monkeypatch):
    pd.DataFrame({"model": ["a", "b"], "verdict": ["supported", "inconclusive"]}).to_csv(tmp_path / "after.csv", index=False)
    pd.DataFrame({"model": ["b", "a"], "verdict": ["supported", "not supported"]}).to_csv(tmp_path / "before.csv",
                                                                                         index=False)
    monkeypatch.setattr(check_claims, "ROOT", tmp_path)
    rows = check_claims.table_rows(tmp_path / "after.csv", ["row.model", "row.verdict_before", "row.verdict"],
                                   join={"file": "before.csv", "on": "model", "suffix": "_before"})["rows"]
    assert rows.splitlines() == ["| a | not supported | supported |", "| b | supported | inconclusive |"]
