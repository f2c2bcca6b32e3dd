"""The rules every command follows with bad input: memory guard, output ownership, locks.

Three rules, each checked *before* anything is created, deleted or trained:

**Memory guard.** A configuration's largest tensors are known in advance: the
split's ``p^2`` pair tables, the training-row table (``f p^2`` pairs times the rows
per pair), the exhaustive 2-var set, the rendered pools and batches (``N x seq_len``
tokens plus the render's scratch tensors), and the forward pass (``batch x seq x
d_model`` activations per layer, kept for the backward). :func:`training_estimate`
adds these up (a deliberately generous estimate) and :func:`require_memory` refuses
a configuration whose estimate exceeds the memory the machine has available now
(``MemAvailable`` of ``/proc/meminfo``, else ``sysconf``), saying how much it needs.
Counts typed on the command line (``--n``, ``--pool-size``) are also capped at
:data:`MAX_COUNT` whatever the memory.

**Outputs belong to compose-lens.** Every directory compose-lens writes holds a
small marker file, ``.compose-lens`` (JSON: the command, and for analysis outputs the
files written). An existing, non-empty output is never replaced without
``--overwrite``; with it, only a directory whose marker names the same command and
that holds nothing compose-lens did not write is replaced. Analysis outputs are
written into a staging directory beside the target (``.NAME.<hex>.partial``) and
swapped in at the end (:func:`staged_output`), so a command that fails leaves the
output location exactly as it was, and a replaced output keeps no stale file of an
earlier call. A file output (``--out FILE``) is written to a fresh ``.FILE.<hex>.tmp``
and renamed. Every temporary name is created exclusively
(:func:`compose_lens.config.temp_beside`): none ever takes over a file, folder or
symlink that is already there, and a marker that is a symlink is never written through.

**Locks.** The marker is also the lock: a process writing a directory holds an
exclusive ``flock`` on it (:func:`lock_directory`). The kernel drops the lock when
the process ends, however it ends, so a crash never leaves a stale lock; a second
trainer on the same run, or a second command writing the same output, is refused
at once with one line.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import stat
from pathlib import Path
from typing import Iterator

from compose_lens.config import ComposeLensError, RunConfig, TaskConfig, atomic_path, temp_beside, temp_of

MARKER = ".compose-lens"
MAX_COUNT = 10_000_000  # sequences, pool sizes, prompt pairs: more is a typo, not a request
GB = 1024 ** 3


# -- memory -----------------------------------------------------------------------------------------


def available_memory() -> int:
    """Bytes of memory available to a new allocation now (MemAvailable, else free pages)."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 62  # unknown: do not refuse


def render_bytes(task: TaskConfig, n: int) -> int:
    """Rendering ``n`` sequences: tokens, labels and the render's scratch tensors."""
    v, m, c, length = task.n_vars, task.max_assignments, task.context_len, task.seq_len
    per_sequence = 20 * v + 60 * m + (c - 2) * (13 + 2 * m) + 16 * (c + 2) + 16 * length + 100
    if task.is_variant:  # compose_lens.data.variants' (N, p) stale-value tables; 386 MB measured for
        per_sequence += 12 * task.modulus  # 100,000 sequences at p = 59, seq_len 32 (this gives 372)
    return n * per_sequence


def split_bytes(task: TaskConfig) -> int:
    """The split's p^2 tables (permutation, mask, pairs) and the training-row table."""
    pairs = task.modulus ** 2
    n_train = int(task.f * pairs)
    rows_per_pair = (task.zero_var_rows + len(task.allowed_left) + len(task.allowed_right)
                     + task.two_var_rows)
    choice = 20 * len(task.allowed_two_var_pairs) if task.two_var_rows and task.r > 0 else 0
    return 80 * pairs + n_train * (64 * rows_per_pair + choice)


def exhaustive_count(task: TaskConfig) -> int:
    """Sequences of the exhaustive 2-var union set (every held-out pair x allowed variable pair, ...)."""
    pairs = task.modulus ** 2
    n_train = int(task.f * pairs)
    restricted = len(task.restricted_two_var_pairs(1)) + len(task.restricted_two_var_pairs(2))
    return (pairs - n_train) * len(task.allowed_two_var_pairs) + n_train * restricted


def forward_bytes(config: RunConfig, batch: int, training: bool) -> int:
    """Activations of one forward (kept for the backward when training), and the parameters."""
    m = config.model
    if training:  # every layer's activations are kept for the backward, and their gradients
        per_position = 2 * m.n_layers * (8 * m.d_model + 3 * m.d_mlp + 4 * m.n_heads * (m.n_ctx + m.d_head))
    else:  # a few tensors of the widest kind are alive at once
        per_position = 4 * max(m.d_model, m.d_mlp, m.n_heads * m.n_ctx, m.n_heads * m.d_head)
    activations = 4 * batch * m.n_ctx * per_position + 8 * batch * m.d_vocab_out
    n_params = (m.n_layers * (4 * m.d_model * m.n_heads * m.d_head + 2 * m.d_model * m.d_mlp)
                + (m.d_vocab + m.n_ctx + m.d_vocab_out) * m.d_model)
    return activations + 4 * n_params * (4 if training else 1)


def training_estimate(config: RunConfig) -> dict[str, int]:
    """Bytes a training run of ``config`` needs, by part (see the module docstring)."""
    task, t = config.task, config.train
    eval_chunk = min(8192, max(9 * t.pool_size, 1))
    return {
        "split and training rows": split_bytes(task),
        "training batches (50 steps rendered at once)": render_bytes(task, 50 * t.batch_size),
        "forward and backward of a batch": forward_bytes(config, t.batch_size, training=True),
        "the nine evaluation pools": render_bytes(task, 9 * t.pool_size) + forward_bytes(config, eval_chunk, False),
        "the exhaustive 2-var set": render_bytes(task, exhaustive_count(task)) + 64 * exhaustive_count(task),
    }


def require_memory(parts: dict[str, int], what: str, hint: str = "") -> None:
    """Refuse ``what`` in one line if the parts add up to more than the available memory."""
    need = sum(parts.values())
    have = available_memory()
    if need <= have:
        return
    largest = max(parts, key=parts.get)
    raise ComposeLensError(
        f"{what} needs about {need / GB:.1f} GB of memory ({largest}: {parts[largest] / GB:.1f} GB) "
        f"but {have / GB:.1f} GB is available; {hint or 'use smaller sizes'}")


def check_training_memory(config: RunConfig) -> None:
    require_memory(training_estimate(config), "this configuration",
                   "lower modulus, batch_size, pool_size or the model's widths")


def check_count(value: int, option: str, minimum: int = 1) -> int:
    """A count typed on the command line, between ``minimum`` and :data:`MAX_COUNT`."""
    if value < minimum:
        raise ComposeLensError(f"{option} {value}: use at least {minimum}")
    if value > MAX_COUNT:
        raise ComposeLensError(f"{option} {value}: at most {MAX_COUNT:,} (that is already minutes "
                               f"and gigabytes); use a smaller number")
    return value


def kept_activation_bytes(config: RunConfig) -> int:
    """What an analysis keeps of one sequence's forward: every residual stream and MLP activation,
    the attention patterns, and the layer-2-through-layer-1 paths (same-MLP's decomposition)."""
    m = config.model
    return 4 * m.n_ctx * (m.d_model * (m.n_layers + 1) + m.d_mlp * m.n_layers
                          + m.n_heads * m.n_ctx * m.n_layers + m.n_heads ** 2 * m.n_ctx)


def analysis_estimate(config: RunConfig, sequences: int, kept_per_sequence: int = 0) -> dict[str, int]:
    """Bytes an analysis of ``sequences`` rendered sequences needs: the sequences (and a joined
    copy of their tokens, and their answer logits), what it keeps of each, one forward of a
    1,024-sequence chunk, and the split."""
    task, m = config.task, config.model
    per_sequence = 8 * task.seq_len + 4 * m.d_vocab_out + kept_per_sequence
    return {f"{sequences:,} rendered sequences": render_bytes(task, sequences) + sequences * per_sequence,
            "a forward of 1,024 sequences": forward_bytes(config, 1024, training=False),
            "the split": split_bytes(task)}


def check_sizes(config: RunConfig, sizes: dict[str, tuple[int, int]], kept_per_sequence: int = 0) -> None:
    """The one memory guard over a command's size arguments, before any work: ``sizes`` maps each
    option as typed (``"--pool-size 2000"``) to (its value, the sequences it renders per unit).
    Each value is a count (:func:`check_count`); together they must fit the available memory."""
    for option, (value, _) in sizes.items():
        check_count(value, option.split()[0])
    total = sum(value * per_unit for value, per_unit in sizes.values())
    require_memory(analysis_estimate(config, total, kept_per_sequence), " ".join(sizes),
                   "ask for fewer sequences")


def check_render_memory(task: TaskConfig, n: int, what: str) -> None:
    require_memory({f"{n:,} rendered sequences": render_bytes(task, n), "the split": split_bytes(task)},
                   what, "ask for fewer sequences")


# -- markers and locks ----------------------------------------------------------------------------


def read_marker(directory: Path) -> dict | None:
    """The marker of a directory compose-lens wrote (None if there is none; {} if unreadable)."""
    path = Path(directory) / MARKER
    if path.is_symlink() or not path.is_file():  # a symlink is never a marker compose-lens wrote
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class DirectoryLock:
    """An exclusive flock on ``DIR/.compose-lens``, which it creates (with ``command``) if missing."""

    def __init__(self, directory: Path, command: str, busy: str):
        self.path = Path(directory) / MARKER
        try:  # never through a symlink: the marker is rewritten in place
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ComposeLensError(f"{self.path}: is a symlink, not a marker compose-lens wrote; "
                                       f"compose-lens never writes through one: remove it or use another "
                                       f"folder") from None
            raise
        if not stat.S_ISREG(os.fstat(self.fd).st_mode):
            os.close(self.fd)
            raise ComposeLensError(f"{self.path}: is not a regular file; remove it or use another folder")
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(self.fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise ComposeLensError(busy) from None
            raise
        if os.fstat(self.fd).st_size == 0:
            self.write({"command": command})

    def write(self, data: dict) -> None:
        """Rewrite the marker in place (the same inode, so the lock stays on it)."""
        text = json.dumps({"written_by": "compose-lens", **data}, indent=1, sort_keys=True).encode()
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, text, 0)

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing drops the flock
            self.fd = -1


def lock_directory(directory: Path, command: str, busy: str) -> DirectoryLock:
    return DirectoryLock(directory, command, busy)


# -- outputs ---------------------------------------------------------------------------------------


def _all_files(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if not p.is_dir())


def check_replaceable(directory: Path, command: str, overwrite: bool, allowed: frozenset[str] | None = None) -> bool:
    """Validate replacing ``directory``; True if it holds something (to be replaced).

    Refuses a non-directory, a non-empty directory without ``overwrite``, and with
    it one that compose-lens did not write for ``command`` or that holds a file
    compose-lens did not write (its marker's list, or the names in ``allowed``).
    """
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise ComposeLensError(f"--out {directory}: exists and is not a directory")
    if not directory.exists() or not any(directory.iterdir()):
        return False
    if not overwrite:
        raise ComposeLensError(f"--out {directory}: exists and is not empty; pass --overwrite to "
                               f"replace it, or choose another --out")
    marker = read_marker(directory)
    if marker is None:
        raise ComposeLensError(f"--out {directory}: has no {MARKER} marker, so compose-lens did not "
                               f"write it; --overwrite only replaces compose-lens outputs: move it away")
    if marker.get("command") != command:
        raise ComposeLensError(f"--out {directory}: holds the output of `{marker.get('command', '?')}`, "
                               f"not of `{command}`; choose another --out")
    known = set(marker.get("files", [])) | {MARKER}
    foreign = [name for name in _all_files(directory)
               if name not in known and not (allowed and name.split("/")[0] in allowed)]
    if foreign:
        raise ComposeLensError(f"--out {directory}: holds {foreign[0]}, which compose-lens did not "
                               f"write there; --overwrite will not delete it: move it away")
    return True


def check_out_name(out: str | Path) -> Path:
    """Refuse an output that names no folder or file of its own: ``""``, ``.``, ``..`` or ``/``
    (compose-lens writes an output beside its target and swaps it in, which needs a name)."""
    text = str(out)
    if text == "" or Path(text).name in ("", ".", "..") or os.path.basename(text.rstrip("/")) in ("", ".", ".."):
        raise ComposeLensError(f"--out {text!r}: name the output itself (e.g. ./out), not the current "
                               f"folder, a parent or the root")
    return Path(text)


def check_parent(out: Path) -> None:
    """Refuse an output path below a file (``afile/out``), or one without a name of its own
    (:func:`check_out_name`), before anything is made."""
    check_out_name(out)
    for parent in Path(os.path.abspath(out)).parents:
        if parent.exists():
            if not parent.is_dir():
                raise ComposeLensError(f"--out {out}: {parent} is a file, not a folder")
            return


def _new_parents(path: Path) -> list[Path]:
    """The missing ancestors of ``path``, outermost first."""
    missing = []
    for parent in Path(os.path.abspath(path)).parents:
        if parent.exists():
            break
        missing.append(parent)
    return missing[::-1]


@contextlib.contextmanager
def staged_output(out: str | Path, command: str, overwrite: bool) -> Iterator[Path]:
    """Write an output directory through a staging directory, swapped in on success.

    Validation (:func:`check_replaceable`) happens on entry, before anything is made.
    The staging directory (``.NAME.<hex>.partial``) and the name the replaced output
    moves to (``.NAME.<hex>.old``) are made fresh by
    :func:`compose_lens.config.temp_beside`, so they never take over anything
    already there. On an exception the staging directory and any parent this made
    are removed, and ``out`` is untouched.
    """
    out = check_out_name(out)
    check_parent(out)
    replace = check_replaceable(out, command, overwrite)
    created = _new_parents(out)
    stage = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        stage = temp_beside(out, directory=True, suffix=".partial")
        lock = _stage(stage, command, out)
        try:
            yield stage
            lock.write({"command": command, "files": _all_files(stage)})
            _swap(stage, out, replace)
        finally:
            lock.release()
    except BaseException:
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)
        for parent in reversed(created):
            with contextlib.suppress(OSError):
                parent.rmdir()  # only if still empty
        raise


def _stages(out: Path) -> list[Path]:
    """The staging directories of ``out`` that compose-lens made (a marker it wrote inside)."""
    return [entry for entry in out.parent.iterdir()
            if temp_of(entry.name) == out.name and entry.name.endswith(".partial")
            and entry.is_dir() and not entry.is_symlink() and (read_marker(entry) or {}).get("written_by")]


def _stage(stage: Path, command: str, out: Path) -> DirectoryLock:
    """Lock the fresh ``stage``; refuse if another command is writing ``out`` now, and remove the
    stages that crashed earlier calls left (compose-lens's own, no longer locked)."""
    busy = f"--out {out}: another compose-lens command is writing it now; wait for it or choose another --out"
    lock = DirectoryLock(stage, command, busy)
    try:
        for other in _stages(out):
            if other == stage:
                continue
            try:  # a running call holds its stage's lock; a crashed one's went with its process
                DirectoryLock(other, command, busy).release()
            except FileNotFoundError:  # it just finished
                continue
            shutil.rmtree(other, ignore_errors=True)
    except BaseException:
        lock.release()
        raise
    return lock


def _swap(stage: Path, out: Path, replace: bool) -> None:
    if replace:
        old = temp_beside(out, directory=True, suffix=".old")  # empty: the rename replaces it
        out.rename(old)
        stage.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(stage, out)  # onto a missing or empty directory


def check_file_output(path: str | Path, overwrite: bool, signature: str) -> Path:
    """Validate writing the file ``path``: its folder exists; an existing file needs
    ``overwrite`` and must look like compose-lens wrote it (contains ``signature``)."""
    path = check_out_name(path)
    if path.is_dir():
        raise ComposeLensError(f"--out {path}: is a directory; give a file name")
    if not path.parent.is_dir():
        raise ComposeLensError(f"--out {path}: the folder {path.parent} does not exist")
    if path.exists():
        if not overwrite:
            raise ComposeLensError(f"--out {path}: exists; pass --overwrite to replace it")
        try:
            head = path.open("rb").read(65536).decode("utf-8", "replace")
        except OSError as exc:
            raise ComposeLensError(f"--out {path}: cannot be read ({exc.strerror})") from None
        if head and signature not in head:
            raise ComposeLensError(f"--out {path}: does not look like a file compose-lens wrote; "
                                   f"--overwrite will not replace it: move it away")
    return path


def write_text_atomic(path: Path, text: str) -> None:
    """Write through a fresh temporary beside ``path`` (:func:`compose_lens.config.atomic_path`)
    and a rename; the temporary file is removed on failure."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def os_error_line(exc: OSError, doing: str, kept: str = "") -> str:
    """One line for an I/O error: the path, the reason, and what is kept."""
    where = exc.filename or "?"
    reason = exc.strerror or str(exc)
    return f"{where}: cannot {doing} ({reason}){'; ' + kept if kept else ''}"

