"""compose-lens: mechanistic interpretability of compositional arithmetic.

The package reproduces and extends "Assign and Add" (arXiv 2605.31497): a 2-layer,
single-head transformer that learns modular addition and in-context variable
assignment, then composes them. The modules follow the flow of the work:

* task and data: :mod:`~compose_lens.config`, :mod:`~compose_lens.task`,
  :mod:`~compose_lens.split`, :mod:`~compose_lens.sampler`;
* model: :mod:`~compose_lens.lens` (the only module that imports TransformerLens),
  :mod:`~compose_lens.model`, :mod:`~compose_lens.fastpath`;
* training and evaluation: :mod:`~compose_lens.train`, :mod:`~compose_lens.evaluate`;
* analysis, figures, report and sweeps build on these;
* :mod:`~compose_lens.cli` is a thin command line over the library.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

__version__ = "0.1.0"


def code_version() -> str:
    """The git commit of the source tree (with ``-dirty`` if modified), else the version."""
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"], cwd=root,
                             capture_output=True, text=True, timeout=5)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return __version__
