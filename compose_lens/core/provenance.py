"""Where a result came from: the package version, the code version and the provenance record.

Every file compose-lens writes records the configuration, the seed, the command line and the code
that made it (:func:`provenance`: JSON documents under the key ``provenance``, CSV tables in a
``NAME.provenance.json`` beside them), so a number can always be traced back to a commit.
:data:`VERSION` is the package version (``pyproject.toml`` reads it from here).
"""

from __future__ import annotations

import functools
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

VERSION = "0.1.0"

_COMMAND: list[str] | None = None  # the command line of this process, when the CLI registered it


def set_command(argv: Sequence[str] | None) -> None:
    """Record ``argv`` as this process's command line (the CLI does this once, before any work)."""
    global _COMMAND
    _COMMAND = None if argv is None else [str(a) for a in argv]


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def is_compose_lens_checkout(root: Path) -> bool:
    """Whether ``root`` (the folder above the package) is a git checkout of compose-lens: the
    top of a git work tree whose ``pyproject.toml`` names the project. A ``site-packages`` is
    never one, whatever repository it lies in."""
    import tomllib  # here: the command line's --help reads no TOML

    try:
        with open(root / "pyproject.toml", "rb") as handle:
            name = tomllib.load(handle).get("project", {}).get("name")
    except (OSError, tomllib.TOMLDecodeError):
        return False
    top = _git(root, "rev-parse", "--show-toplevel")
    return name == "compose-lens" and top is not None and Path(top).resolve() == root.resolve()


COMMIT_FILE = Path(__file__).resolve().parents[1] / "_commit.txt"


def built_from() -> str | None:
    """The commit an installed package was built from (``_commit.txt``, filled by ``setup.py`` or by
    ``git archive``), abbreviated as ``git describe`` does; None where the file was not filled."""
    try:
        text = COMMIT_FILE.read_text().strip()
    except OSError:
        return None
    found = re.fullmatch(r"([0-9a-f]{7,40})(-dirty)?", text)
    return found.group(1)[:12] + (found.group(2) or "") if found else None


@functools.lru_cache(maxsize=1)
def _code_version(root: str) -> str:
    if not is_compose_lens_checkout(Path(root)):
        return built_from() or VERSION
    return _git(Path(root), "describe", "--always", "--dirty", "--abbrev=12") or built_from() or VERSION


def code_version() -> str:
    """The git commit of compose-lens's checkout (with ``-dirty`` if modified) where the package
    runs from one; installed, the commit it was built from (:func:`built_from`), never that of a git
    repository around ``site-packages``; else the package version.

    Read once per process: a run that trains for minutes records the tree it started from.
    """
    return _code_version(str(Path(__file__).resolve().parents[2]))


def provenance(config: Any = None, seed: int | None = None, source: str | None = None,
               command: str | Sequence[str] | None = None, **extra: Any) -> dict:
    """The record every result file carries: config, seed, model source, code and package version,
    the command line (``command``, else the one registered by :func:`set_command`, if any), and torch's
    thread count where torch is loaded: it changes float rounding (an analysis command takes the cores the
    load average leaves, :func:`compose_lens.core.cores.threads_now`), so two results whose last digits
    differ say why.

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
    if "torch" in sys.modules:  # never imported for this: the command line's --help stays fast
        record["torch_threads"] = sys.modules["torch"].get_num_threads()
    if source is not None:
        record["model"] = source
    record.update(extra)
    return record
