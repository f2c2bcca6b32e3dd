"""views.drawing.save writes each file whole or not at all: a failure part-way leaves the previous file."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from compose_lens.views.drawing import save


def test_a_table_that_fails_half_written_leaves_the_previous_csv_and_no_temporary(tmp_path, monkeypatch):
    (tmp_path / "fig.csv").write_text("the previous table\n")
    real = pd.DataFrame.to_csv

    def half_then_fail(self, path, **kwargs):
        with open(path, "w") as handle:
            handle.write("half a tab")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_csv", half_then_fail)
    fig, _ = plt.subplots()
    with pytest.raises(OSError):
        save(fig, pd.DataFrame({"a": [1]}), tmp_path / "fig")
    assert (tmp_path / "fig.csv").read_text() == "the previous table\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.csv", "fig.png"]
    monkeypatch.setattr(pd.DataFrame, "to_csv", real)
    fig, _ = plt.subplots()
    assert save(fig, pd.DataFrame({"a": [1]}), tmp_path / "fig") == [tmp_path / "fig.png", tmp_path / "fig.csv"]
    assert (tmp_path / "fig.csv").read_text() == "a\n1\n"
