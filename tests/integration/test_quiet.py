"""Every analysis command takes ``--quiet`` (no progress bar), as the others do."""

from __future__ import annotations

from compose_lens.cli import main


def test_fourier_same_mlp_and_attention_take_quiet(tmp_path, capsys):
    assert main(["fourier", "paper", "--out", str(tmp_path / "fourier"), "--quiet"]) == 0
    assert main(["same-mlp", "paper", "--out", str(tmp_path / "same"), "--n", "20", "--quiet"]) == 0
    assert main(["attention", "paper", "b=3, e=5, b+2=?", "--out", str(tmp_path / "views"), "--quiet"]) == 0
    captured = capsys.readouterr()
    assert "verdict:" in captured.out and (tmp_path / "same" / "same_mlp.json").exists()
    assert (tmp_path / "fourier" / "neuron_frequencies.csv").exists()
    for command in ("fourier", "same-mlp", "attention"):
        assert f"{command} 0/2" not in captured.err and f"{command} 1/2" not in captured.err
