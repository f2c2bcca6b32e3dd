"""experiments/mirror_pairs.py: which held-out pairs have a trained mirror, and the split of a run's answers by it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from compose_lens.core.config import RunConfig
from compose_lens.data.split import Split

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("mirror_pairs", ROOT / "experiments" / "mirror_pairs.py")
mirror_pairs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mirror_pairs)
RUN = ROOT / "experiments" / "results" / "sweeps" / "f" / "runs" / "f=0.1_seed=0"


def test_mirror_trained_matches_a_hand_count_and_no_diagonal_pair_has_one():
    split = Split.from_task(RunConfig.from_dict(json.loads((RUN / "config.json").read_text())).task)
    mirror = mirror_pairs.mirror_trained(split)
    train = {tuple(p) for p in split.train_pairs.tolist()}
    by_hand = [(y, x) in train for x, y in split.heldout_pairs.tolist()]
    assert mirror.tolist() == by_hand
    diagonal = split.heldout_pairs[:, 0] == split.heldout_pairs[:, 1]
    assert diagonal.any() and not mirror[diagonal].any()
    assert 0.08 < mirror.float().mean().item() < 0.12  # about f = 0.1 of the held-out pairs


def test_split_by_mirror_counts_each_group():
    correct = torch.tensor([True, True, False, False, True])
    mirror = torch.tensor([True, True, True, False, False])
    found = mirror_pairs.split_by_mirror(correct, mirror)
    assert (found["mirror_trained"]["k"], found["mirror_trained"]["n"]) == (2, 3)
    assert (found["mirror_not_trained"]["k"], found["mirror_not_trained"]["n"]) == (1, 2)


def test_the_committed_sweep_below_f_star_answers_about_its_mirror_share(tmp_path):
    assert mirror_pairs.main(["--out", str(tmp_path / "m.csv")]) == 0
    import pandas as pd

    table = pd.read_csv(tmp_path / "m.csv")
    low = table[table["f"] <= 0.15]
    assert len(low) == 6  # f = 0.1 and 0.15, three seeds each
    assert ((low["zero_var_heldout"] - low["mirror_trained_share"]).abs() < 0.002).all()
    high = table[table["f"] >= 0.3]
    assert (high["zero_var_heldout"] > high["mirror_trained_share"] + 0.5).all()  # above f*: generalised


def test_a_missing_model_is_refused(tmp_path, capsys):
    assert mirror_pairs.main(["--model", str(tmp_path / "nothing")]) == 2
    assert "no such folder" in capsys.readouterr().err
    (tmp_path / "a_file").write_text("x")  # a file is said to be one (issue #45: it was "no such run directory")
    assert mirror_pairs.main(["--model", str(tmp_path / "a_file")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
