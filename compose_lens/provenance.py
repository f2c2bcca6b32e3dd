"""Where a result came from: the package version, the code version and the provenance record.

Every file compose-lens writes records the configuration, the seed and the code
that made it, so a number can always be traced back to a commit. This module
holds the one way to say that:

* :data:`VERSION` is the package version;
* :func:`code_version` is the git commit of the source tree (``-dirty`` when it has
  uncommitted changes), or the package version outside a git checkout;
* :func:`provenance` is the record itself, as every JSON output carries it (JSON
  documents under the key ``provenance``, CSV tables in a ``NAME.provenance.json``
  beside them). It includes the command line that made the file: pass ``command``,
  or let the ``compose-lens`` command line register its own once
  (:func:`set_command`) so every file it writes records it.
"""

from __future__ import annotations

import functools
import shlex
import subprocess
from pathlib import Path
from typing import Any, Sequence

VERSION = "0.1.0"

_COMMAND: list[str] | None = None  # the command line of this process, when the CLI registered it


def set_command(argv: Sequence[str] | None) -> None:
    """Record ``argv`` as this process's command line (the CLI does this once, before any work)."""
    global _COMMAND
    _COMMAND = None if argv is None else [str(a) for a in argv]


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


def provenance(config: Any = None, seed: int | None = None, source: str | None = None,
               command: str | Sequence[str] | None = None, **extra: Any) -> dict:
    """The record every result file carries: config, seed, model source, code and package version,
    and the command line (``command``, else the one registered by :func:`set_command`, if any).

    >>> provenance(seed=3, command=["compose-lens", "patch", "paper", "--out", "my dir"])["command"]
    "compose-lens patch paper --out 'my dir'"
    """
    record: dict[str, Any] = {"code_version": code_version(), "compose_lens_version": VERSION}
    command = _COMMAND if command is None else command
    if command is not None:
        record["command"] = command if isinstance(command, str) else shlex.join(command)
    if config is not None:
        record["config"] = config.to_dict() if hasattr(config, "to_dict") else config
    if seed is not None:
        record["seed"] = seed
    if source is not None:
        record["model"] = source
    record.update(extra)
    return record
