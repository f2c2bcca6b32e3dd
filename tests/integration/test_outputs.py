"""Outputs: replaced whole (no stale file of an earlier call), only when compose-lens wrote them,
and a failed command leaves no directory behind. Sweeps train the seed they are asked for.
Figures drawn by a worker process are the same bytes, and its failures reach the caller."""

from __future__ import annotations

import json

import pytest

from compose_lens.views.drawing import Renderer
from compose_lens.registry.fourier.figure import frequency_shares_figure
from compose_lens.cli import main
from compose_lens.model import tl
from compose_lens.training.runs import save_model
from compose_lens.data.safety import MARKER
from compose_lens.sweep import SweepPoint


def _model(tmp_path, tiny_config):
    save_model(tl.boot(tiny_config.model), tiny_config, tmp_path / "model")
    return str(tmp_path / "model")


def test_attention_overwrite_leaves_no_stale_file(tmp_path, tiny_config, capsys):
    model, out = _model(tmp_path, tiny_config), tmp_path / "views"
    assert main(["attention", model, "b=3, e=5, b+2=?", "c=1, c+4=?", "--out", str(out)]) == 0
    assert (out / "figures" / "attention_1.png").exists()
    assert json.loads((out / MARKER).read_text())["command"] == "attention"
    assert main(["attention", model, "b=3, e=5, b+2=?", "--out", str(out)]) == 2  # exists: refused
    assert main(["attention", model, "b=3, e=5, b+2=?", "--out", str(out), "--overwrite"]) == 0
    assert not (out / "figures" / "attention_1.png").exists() and (out / "figures" / "attention_0.png").exists()
    (out / "keep.txt").write_text("mine")
    capsys.readouterr()
    assert main(["attention", model, "b=3, e=5, b+2=?", "--out", str(out), "--overwrite"]) == 2
    assert "keep.txt" in capsys.readouterr().err and (out / "keep.txt").exists()


def test_a_failed_command_leaves_no_new_directory(tmp_path, tiny_config):
    model = _model(tmp_path, tiny_config)
    out = tmp_path / "new" / "deeper" / "views"
    assert main(["attention", model, "b=3, b+z=?", "--out", str(out)]) == 2
    assert not (tmp_path / "new").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_data_sample_replaces_its_own_file_only_when_asked(tmp_path, capsys):
    out = tmp_path / "s.jsonl"
    args = ["data", "sample", "--modulus", "7", "--n-vars", "6", "--n", "3", "--out", str(out)]
    assert main(args) == 0 and len(out.read_text().splitlines()) == 3
    assert main(args) == 2
    assert main(args[:-3] + ["5", "--out", str(out), "--overwrite"]) == 0
    assert len(out.read_text().splitlines()) == 5


def test_sweeping_the_seed_trains_with_each_seed(tiny_config):
    for seed in (1, 2):
        config = SweepPoint("seed", seed, 0).config(tiny_config)
        assert config.task.seed == config.train.seed == config.model.init_seed == seed
    config = SweepPoint("train.seed", 3, 0).config(tiny_config)  # the swept value wins over the point's seed
    assert config.train.seed == 3 and config.task.seed == 0
    assert "/" not in SweepPoint("device", "cuda/../../../x", 0).name


def test_figures_drawn_in_the_background_are_the_same_bytes(tmp_path):
    for background in (False, True):
        with Renderer(background) as renderer:
            renderer.save(frequency_shares_figure, [0.1, 0.6, 0.2, 0.1], [1],
                          path=tmp_path / str(background) / "shares", dpi=90)
    here, worker = (tmp_path / str(b) / "shares.png" for b in (False, True))
    assert here.read_bytes().startswith(b"\x89PNG") and here.read_bytes() == worker.read_bytes()


def test_a_figure_that_fails_in_the_worker_raises_in_the_caller(tmp_path):
    with pytest.raises(TypeError):
        with Renderer(True) as renderer:
            renderer.save(frequency_shares_figure, None, [1], path=tmp_path / "shares")
    assert not (tmp_path / "shares.png").exists()


def test_where_no_worker_can_start_the_figures_are_drawn_here(tmp_path, monkeypatch):
    import concurrent.futures

    def refuse(*args, **kwargs):
        raise OSError("no processes here")

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", refuse)
    with Renderer(True) as renderer:
        assert not renderer.background
        renderer.save(frequency_shares_figure, [0.5, 0.5], [1], path=tmp_path / "shares")
    assert (tmp_path / "shares.png").exists()
