"""``patch-heads`` and ``path-patch`` on the paper model: the files they write, the numbers they
print (the CSV's, with their intervals), and bad input refused in one line with nothing written."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from compose_lens.cli import main
from compose_lens.core.stats import format_estimate


def _printed(out: str, label: str) -> str:
    """The estimate printed after ``label`` on its line."""
    line = next(line for line in out.splitlines() if line.strip().startswith(label))
    return line.strip()[len(label):].strip()


def test_patch_heads_writes_the_table_and_prints_its_numbers(tmp_path, capsys):
    out = tmp_path / "heads"
    assert main(["patch-heads", "paper", "--component", "v", "--n-pairs", "8", "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    table = pd.read_csv(out / "patching_heads.csv")
    assert set(table["component"]) == {"v"} and set(table["corruption"]) == {"value"}
    assert (out / "figures" / "patching_heads.png").is_file()
    record = json.loads((out / "patching_heads.provenance.json").read_text())
    assert record["settings"]["components"] == ["v"] and record["settings"]["n_pairs"] == 8
    assert "patch-heads" in record["command"]
    row = table[(table.block == 1) & (table.role == "queried value")].iloc[0]
    assert row["mean"] > 0.9  # layer 2's value at the queried value carries the answer
    assert _printed(printed, "v of blocks.1 head 0 at queried value") == format_estimate(
        row["mean"], row["ci_low"], row["ci_high"])


def test_path_patch_prints_each_path_with_its_interval(tmp_path, capsys):
    out = tmp_path / "paths"
    argv = ["path-patch", "paper", "--sender", "blocks.0.head0", "--receiver", "blocks.1.head0.q",
            "--receiver", "blocks.1.mlp", "--corruption", "variable", "--n-pairs", "8", "--out", str(out), "--quiet"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    table = pd.read_csv(out / "path_patching.csv")
    assert list(table["receiver"]) == ["blocks.1.head0.q", "blocks.1.mlp", "all"]
    assert set(table["corruption"]) == {"variable"} and (out / "figures" / "path_patching.png").is_file()
    for label, (_, row) in zip(["blocks.0.head0 -> blocks.1.head0.q", "blocks.0.head0 -> blocks.1.mlp",
                                "blocks.0.head0 alone (every path)"], table.iterrows()):
        assert _printed(printed, label) == format_estimate(row["mean"], row["ci_low"], row["ci_high"])


@pytest.mark.parametrize("argv, says", [
    (["path-patch", "paper", "--sender", "blocks.1.head0", "--receiver", "blocks.0.head0.k"],
     "no path blocks.1.head0 -> blocks.0.head0.k"),
    (["path-patch", "paper", "--sender", "blocks.0.mlp", "--receiver", "blocks.1.mlp"], "blocks.0 has no MLP"),
    (["path-patch", "paper", "--sender", "head0", "--receiver", "blocks.1.mlp"], "blocks.L.headH or blocks.L.mlp"),
    (["patch-heads", "paper", "--component", "o"], "invalid choice"),
    (["patch-heads", "paper", "--n-pairs", "1"], "--n-pairs"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, argv, says):
    out = tmp_path / "out"
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err
    assert not out.exists()
