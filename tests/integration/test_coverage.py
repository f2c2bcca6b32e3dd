"""Which architectures patch, ablate, circuit, same-mlp (and analyze, fourier, report) cover (issue #28): each
either works on a small non-paper model or refuses in one line (exit 2) before anything is loaded."""

from __future__ import annotations

import subprocess
import sys

import pytest

from compose_lens.core import coverage

from compose_lens.training import runs
from compose_lens.cli import main
from compose_lens.core.config import ModelConfig, RunConfig
from compose_lens.model import tl

COMMANDS = ("patch", "ablate", "circuit", "same-mlp", "analyze", "fourier", "report")


def test_the_paper_architecture_is_covered_by_every_command():
    assert all(coverage.problem(c, RunConfig().model) is None for c in COMMANDS)
    assert coverage.peek_model_config("paper") in (None, RunConfig().model)  # None: not installed
    assert (coverage.PAPER_MODEL_DIR / "config.json").is_file()  # the shipped model, found from core/


@pytest.mark.parametrize("changes, refused", [
    (dict(n_layers=3, n_heads=2), set()),
    (dict(n_layers=3, n_heads=2, mlp_blocks=(0, 1, 2)), set()),
    (dict(n_heads=4), set()),
    (dict(normalization_type="LN"), set()),  # same-mlp then says inconclusive (tests/integration/test_layernorm.py)
    (dict(mlp_blocks=()), {"same-mlp", "analyze", "fourier", "report"}),
    (dict(n_layers=3, mlp_blocks=(1,)), set()),  # an MLP before the last block: read where it is
])
def test_what_each_command_covers(changes, refused):
    cfg = ModelConfig(**changes)
    assert {c for c in COMMANDS if coverage.problem(c, cfg)} == refused


@pytest.fixture
def three_by_two(tiny_config, tmp_path):
    """An untrained 3-layer x 2-head model (its MLP in blocks.2), saved as a model directory."""
    config = tiny_config.replace(model=tiny_config.model.replace(n_layers=3, n_heads=2, d_head=16,
                                                                          mlp_blocks=(2,)))
    return runs.save_model(tl.boot(config.model), config, tmp_path / "m")


@pytest.fixture
def without_mlp(tiny_config, tmp_path):
    """An untrained 3-layer x 2-head model with no MLP, saved as a model directory."""
    config = tiny_config.replace(model=tiny_config.model.replace(n_layers=3, n_heads=2, d_head=16, mlp_blocks=()))
    return runs.save_model(tl.boot(config.model), config, tmp_path / "attn_only")


@pytest.mark.parametrize("command", ["same-mlp", "analyze", "report"])
def test_a_command_refuses_an_uncovered_model_before_importing_torch(without_mlp, tmp_path, command):
    code = ("import sys; from compose_lens.cli import main; "
            f"rc = main([{command!r}, {str(without_mlp)!r}, '--out', {str(tmp_path / 'o')!r}, '--quiet']); "
            "print(rc, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.split() == ["2", "False"], out.stderr[-2000:]
    line, = out.stderr.strip().splitlines()
    assert f"{command} does not cover" in line and "3 layers x 2 heads" in line and "mlp_blocks=[]" in line
    assert not (tmp_path / "o").exists()


def test_same_mlp_on_a_model_that_adds_nothing_says_none_located(three_by_two, tmp_path, capsys):
    """Untrained: no MLP adds, no head routes. The command runs, and its verdict says so instead of
    testing a default block (no tables, no figure)."""
    import json

    out = tmp_path / "o"
    assert main(["same-mlp", str(three_by_two), "--n", "20", "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "verdict: inconclusive" in printed and "none located" in printed
    report = json.loads((out / "same_mlp.json").read_text())
    assert report["verdict"] == "inconclusive" and report["verdict_reason"].startswith("none located")
    assert report["components"]["adder"] is None
    assert not list(out.glob("same_mlp_*.csv")) and not (out / "figures").exists()


@pytest.mark.parametrize("command, options, says", [
    ("patch", ["--n-pairs", "8"], None),
    ("ablate", ["--pool-size", "12"], "neurons and Fourier directions: none located (adder: none"),
    ("circuit", ["--n-pairs", "6", "--method", "eap"], "not scored against a circuit: none located"),
])
def test_patch_ablate_and_circuit_run_on_three_layers_of_two_heads(three_by_two, tmp_path, capsys, command,
                                                                   options, says):
    """Untrained, so nothing is located: ablate and circuit run and say so (no blocks.1 neurons, no
    paper labels)."""
    assert main([command, str(three_by_two), *options, "--out", str(tmp_path / "o"), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "wrote" in printed
    assert says is None or says in printed, printed
    assert any(p.suffix == ".csv" for p in (tmp_path / "o").iterdir())
