"""The figure worker of ``analyze``: the same files as drawing in place, and its errors are not lost."""

from __future__ import annotations

import pandas as pd
import pytest

from compose_lens.report.outputs import FigureQueue


def _norms() -> pd.Series:
    return pd.Series([0.2, 1.5, 0.1, 0.9], index=[0, 1, 2, 3])


def test_the_worker_writes_the_same_file_as_drawing_here(tmp_path):
    with FigureQueue(parallel=False) as here:
        here.save("readout_fourier_figure", (_norms(), [1, 3]), tmp_path / "here")
    with FigureQueue(parallel=True) as worker:
        worker.save("readout_fourier_figure", (_norms(), [1, 3]), tmp_path / "worker")
    drawn = (tmp_path / "here.png").read_bytes()
    assert len(drawn) > 1000 and drawn == (tmp_path / "worker.png").read_bytes()


def test_an_error_in_the_worker_is_raised_at_the_end(tmp_path):
    with pytest.raises(AttributeError, match="no_such_figure"):
        with FigureQueue(parallel=True) as worker:
            worker.save("no_such_figure", (), tmp_path / "x")
