"""Where a result came from: the package version, the code version and the provenance record.

Every file compose-lens writes records the configuration, the seed and the code
that made it, so a number can always be traced back to a commit. This module
holds the one way to say that:

* :data:`VERSION` is the package version;
* :func:`code_version` is the git commit of the source tree (``-dirty`` when it has
  uncommitted changes), or the package version outside a git checkout;
* :func:`provenance` is the record itself, as every JSON output carries it.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from typing import Any

VERSION = "0.1.0"


@functools.lru_cache(maxsize=1)
def _git_describe(root: str) -> str | None:
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"], cwd=root,
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def code_version() -> str:
    """The git commit of the source tree (with ``-dirty`` if modified), else the version.

    Read once per process: a run that trains for minutes records the tree it started from.
    """
    return _git_describe(str(Path(__file__).resolve().parent.parent)) or VERSION


def provenance(config: Any = None, seed: int | None = None, source: str | None = None, **extra: Any) -> dict:
    """The record every result file carries: config, seed, model source, code and package version."""
    record: dict[str, Any] = {"code_version": code_version(), "compose_lens_version": VERSION}
    if config is not None:
        record["config"] = config.to_dict() if hasattr(config, "to_dict") else config
    if seed is not None:
        record["seed"] = seed
    if source is not None:
        record["model"] = source
    record.update(extra)
    return record
