"""Importing the figures (compose_lens.views) leaves the user's matplotlib backend alone.

The figure module once called ``matplotlib.use("Agg")`` at import: in a notebook, every plot the
user drew after importing it (or anything that imports it) showed nothing.
Its figures are now made without pyplot and saved through the Agg canvas explicitly.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from compose_lens.registry.qk.figure import positional_qk_figure
from compose_lens.views.drawing import save

REPO = Path(__file__).resolve().parents[2]

_BACKEND_AFTER_IMPORT = """
import matplotlib
matplotlib.use("svg")  # the user's choice, made before compose-lens is imported
import importlib, pkgutil, compose_lens.views, compose_lens.report, compose_lens.sweep
for found in pkgutil.iter_modules(compose_lens.views.__path__):
    importlib.import_module(f"compose_lens.views.{found.name}")
print(matplotlib.get_backend())
"""


def test_importing_the_views_keeps_the_users_backend():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("MPLBACKEND", None)
    done = subprocess.run([sys.executable, "-c", _BACKEND_AFTER_IMPORT], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "svg"


def test_a_study_figure_is_apart_from_pyplot_saves_and_shows_inline(tmp_path):
    import matplotlib.pyplot as plt

    open_before = plt.get_fignums()
    fig, data = positional_qk_figure(np.eye(6, k=-1))  # a previous-token head's scores
    assert plt.get_fignums() == open_before  # pyplot neither made nor keeps it
    assert fig._repr_png_().startswith(b"\x89PNG")  # what Jupyter shows for a cell's value
    written = save(fig, data, tmp_path / "qk")
    assert [path.name for path in written] == ["qk.png", "qk.csv"]
    assert (tmp_path / "qk.png").read_bytes().startswith(b"\x89PNG")
