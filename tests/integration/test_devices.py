"""Where the commands run: every command that trains or reads a model takes --device, a device
torch cannot use here is one line before anything is written, and --deterministic is recorded
in the run and sets torch's deterministic mode (on CPU it changes no number)."""

from __future__ import annotations

import json
import os

import pytest
import torch
from safetensors.torch import load_file

from compose_lens.cli import main


@pytest.fixture
def restore_torch_determinism(monkeypatch):
    """make_deterministic changes the process: put it back for the tests that follow."""
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    cudnn = torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic
    yield
    torch.use_deterministic_algorithms(before[0], warn_only=before[1])
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = cudnn


def test_train_deterministic_is_recorded_and_changes_no_cpu_number(tiny_config, tmp_path, restore_torch_determinism):
    config = tmp_path / "tiny.json"
    config.write_text(tiny_config.to_json())
    plain = ["train", "--config", str(config), "--quiet", "--device", "cpu"]
    assert main(plain + ["--out", str(tmp_path / "plain")]) == 0
    assert not torch.are_deterministic_algorithms_enabled()
    assert main(plain + ["--deterministic", "--out", str(tmp_path / "det")]) == 0
    assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    saved = json.loads((tmp_path / "det" / "config.json").read_text())["train"]
    assert saved["deterministic"] is True and saved["device"] == "cpu"
    assert "deterministic" not in json.loads((tmp_path / "plain" / "config.json").read_text())["train"]
    a, b = load_file(tmp_path / "plain" / "model.safetensors"), load_file(tmp_path / "det" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


NO_GPU = "cuda:99"  # no machine this runs on has a hundred GPUs


@pytest.mark.parametrize("command", [
    "train --config {config} --out {out} --device " + NO_GPU,
    "sweep --config {config} --param r --values 0 --out {out} --device " + NO_GPU,
    "evaluate paper --device " + NO_GPU,
    "dynamics {run} --out {out} --device " + NO_GPU,
    "analyze paper --out {out} --device " + NO_GPU,
    "llc paper --out {out} --device " + NO_GPU,
])
def test_a_device_torch_cannot_use_is_one_line_and_nothing_is_written(command, tiny_config, tmp_path, capsys):
    if command.startswith("llc"):
        pytest.importorskip("devinterp")
    config = tmp_path / "tiny.json"
    config.write_text(tiny_config.to_json())
    out = tmp_path / "out"
    argv = command.format(config=config, out=out, run=tmp_path).split() + ["--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert f"device={NO_GPU}: torch sees no such GPU" in err and len(err.splitlines()) == 1, err
    assert not out.exists()
