"""Writing files safely: JSON read with one clear line, and every write atomic.

A file compose-lens writes is never seen half-written and never takes over a name it did not make:
every write is staged in a fresh temporary made exclusively by :func:`temp_beside` and renamed into
place (:class:`atomic_path`), so a crash, a full disk or Ctrl-C leaves the previous file as it was.
A SIGKILL's temporary stays until the next command holding the directory's lock removes it
(:func:`remove_stale_temps`). :mod:`compose_lens.data.safety` builds the markers and locks of whole
output directories on this.

>>> import tempfile, pathlib
>>> target = pathlib.Path(tempfile.mkdtemp()) / "out.json"
>>> write_json_atomic(target, {"accuracy": 0.98})
>>> load_json(target)
{'accuracy': 0.98}
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import shutil
from pathlib import Path
from typing import Any

from compose_lens.core.errors import ComposeLensError


def not_there(path: str | Path, folder: bool = False) -> str | None:
    """Why ``path`` is not the file (or, ``folder=True``, the folder) a command wants, in a few words,
    or None where it is.

    >>> not_there("/"), not_there("/", folder=True), not_there("/nowhere/x")
    ('is a folder, not a file', None, 'no such file')
    """
    path = Path(path)
    if not path.exists():
        return f"no such {'folder' if folder else 'file'}"
    if folder and not path.is_dir():
        return "is a file, not a folder"
    if not folder and path.is_dir():
        return "is a folder, not a file"
    return None


def missing_columns(found: Any, needed: Any) -> str | None:
    """What a table's header lacks of the columns ``needed``, in a few words, or None (a name with a
    space around it is said as such: the space cannot be seen).

    >>> missing_columns(["step", " loss"], ["step", "loss"])
    "the column ' loss' has a space around its name; name it 'loss'"
    >>> missing_columns(["step"], ["step", "loss"])
    "no column 'loss'"
    """
    found = [str(c) for c in found]
    missing = [c for c in needed if c not in found]
    spaced = next((c for c in found if c != c.strip() and c.strip() in missing), None)
    if spaced is not None:
        return f"the column {spaced!r} has a space around its name; name it {spaced.strip()!r}"
    if missing:
        return f"no column {', '.join(repr(c) for c in missing)}"
    return None


def _read_text(path: str | Path, kind: str) -> str:
    """A text file's contents, a missing, folder, non-UTF-8 or unreadable one said in one line (``kind``:
    what the file should be, JSON or TOML)."""
    path = Path(path)
    if not path.exists():
        raise ComposeLensError(f"{path}: no such file")
    if path.is_dir():
        raise ComposeLensError(f"{path}: is a directory, not a {kind} file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ComposeLensError(f"{path}: not a UTF-8 text file, so not {kind} (save it as UTF-8)") from None
    except OSError as exc:
        raise ComposeLensError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def load_json(path: str | Path) -> Any:
    """Read a JSON file, turning a missing or malformed file into one clear line."""
    text = _read_text(path, "JSON")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ComposeLensError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise ComposeLensError(f"{path}: JSON nested too deeply") from None


def load_toml(path: str | Path) -> dict:
    """Read a TOML file, turning a missing or malformed file into one clear line."""
    import tomllib  # here: the command line's --help reads no TOML

    text = _read_text(path, "TOML")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ComposeLensError(f"{path}: not valid TOML ({exc})") from None
    except RecursionError:
        raise ComposeLensError(f"{path}: TOML nested too deeply") from None


TEMP_SUFFIX = ".tmp"
_TEMP_NAME = re.compile(r"^\.(.+)\.[0-9a-f]{16}\.(tmp|partial|old)$")


def temp_beside(path: str | Path, directory: bool = False, suffix: str = TEMP_SUFFIX) -> Path:
    """Create, exclusively, a fresh ``.NAME.<16 hex>.tmp`` (or ``suffix``) file (or directory) beside
    ``path``: it never takes over a file, a folder or a symlink already there, whoever made it."""
    path = Path(path)
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}{suffix}")
        try:
            if directory:
                os.mkdir(tmp)
            else:
                os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666))
            return tmp
        except FileExistsError:
            continue
    raise ComposeLensError(f"{path}: cannot find a free temporary name beside it")


def temp_of(name: str) -> str | None:
    """The name a temporary of :func:`temp_beside` stands for (None if ``name`` is not one)."""
    found = _TEMP_NAME.match(name)
    return found.group(1) if found else None


def remove_stale_temps(directory: str | Path, names, folders: bool = False) -> list[str]:
    """Remove (and name) the ``.tmp`` temporaries of :func:`temp_beside` a killed process left in
    ``directory``; call it only while holding the directory's lock. Only a regular file (``folders``: or a
    folder) standing for one of ``names`` (a set or a predicate) goes; a user's ``notes.tmp`` stays.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> for name in (".config.json.0123456789abcdef.tmp", "config.json.tmp", ".notes.0123456789abcdef.tmp"):
    ...     _ = (d / name).write_text("x")
    >>> remove_stale_temps(d, {"config.json"})
    ['.config.json.0123456789abcdef.tmp']
    >>> sorted(p.name for p in d.iterdir())
    ['.notes.0123456789abcdef.tmp', 'config.json.tmp']
    """
    directory = Path(directory)
    wanted = names if callable(names) else (lambda name, known=frozenset(names): name in known)
    removed = []
    try:
        entries = sorted(directory.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return removed
    for entry in entries:
        stands_for = temp_of(entry.name)
        if stands_for is None or not entry.name.endswith(TEMP_SUFFIX) or not wanted(stands_for) or entry.is_symlink():
            continue
        if entry.is_file():
            entry.unlink(missing_ok=True)
        elif folders and entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            continue
        removed.append(entry.name)
    return removed


class atomic_path:
    """``with atomic_path(path) as tmp``: write ``tmp`` (made by :func:`temp_beside`), which
    replaces ``path`` when the block ends; on an exception it is removed and ``path`` is as it was."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def __enter__(self) -> Path:
        self.tmp = temp_beside(self.path)
        return self.tmp

    def __exit__(self, kind, value, tb) -> None:
        if kind is None:
            try:
                self.tmp.replace(self.path)
                return
            except BaseException:
                self.tmp.unlink(missing_ok=True)
                raise
        self.tmp.unlink(missing_ok=True)  # a full disk leaves the previous file, and no half file


def write_json_atomic(path: str | Path, data: Any) -> None:
    """Write JSON through a temporary file and a rename, so a crash never leaves half a file."""
    text = json.dumps(data, indent=2, sort_keys=True, default=_json_default) + "\n"
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def json_safe(value: Any) -> Any:
    """Strict JSON: NaN and infinities (a threshold not reached, a score without data) become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"cannot write {type(obj).__name__} as JSON")
