"""The rules every command follows with bad input: memory guard, output ownership, locks.

Three rules, each checked *before* anything is created, deleted or trained (docs/bad-input.md):

**Memory guard.** :func:`training_estimate` adds up a configuration's largest tensors, known in
advance (split tables, training rows, the exhaustive 2-var set, rendered pools and batches, the
forward's activations), generously, and :func:`require_memory` refuses what exceeds the memory
available now (``psutil.virtual_memory().available``), saying how much it needs. Counts typed on
the command line are capped at :data:`MAX_COUNT`, and every command's size arguments go through
one guard, :func:`check_sizes`, run on MODEL's ``config.json`` before the model is loaded
(:func:`check_model_sizes`).

**Outputs belong to compose-lens.** Every directory compose-lens writes holds a marker,
``.compose-lens`` (JSON: the command, and for analysis outputs the files written). A non-empty
output is replaced only with ``--overwrite``, and then only if its marker names the same command
and it holds nothing else. Analysis outputs are written into ``.NAME.<hex>.partial`` beside the
target and swapped in at the end (:func:`staged_output`): a failed command leaves the output as it
was, and a replaced one keeps no stale file. A file output is written to ``.FILE.<hex>.tmp`` and
renamed. Every temporary name is created exclusively (:func:`compose_lens.core.files.temp_beside`),
and a marker that is a symlink is never written through.

**Locks.** The marker is also the lock (:func:`lock_directory`; a sweep's points lock a file beside
their run directories with the same :class:`FileLock`): ``filelock.lock_descriptor`` (``flock`` on
POSIX, ``LockFileEx`` on Windows) on a descriptor compose-lens opens itself, so the marker's text is
written through that descriptor while it is held (``filelock.FileLock`` would own the file's
content). The kernel drops the lock when the process ends, so a crash leaves no stale lock; a
second command on the same run or output is refused at once with one line.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
from pathlib import Path
from typing import Iterator

import filelock

from compose_lens.core.config import RunConfig
from compose_lens.core.errors import ComposeLensError
from compose_lens.core.files import atomic_path, temp_beside, temp_of
from compose_lens.core.coverage import peek_run_config
from compose_lens.data.sampler import exhaustive_count, render_bytes
from compose_lens.data.split import split_bytes


MARKER = ".compose-lens"
MAX_COUNT = 10_000_000  # sequences, pool sizes, prompt pairs: more is a typo, not a request
GB = 1024 ** 3


# -- memory -----------------------------------------------------------------------------------------


def available_memory() -> int:
    """Bytes of memory available to a new allocation now (psutil's ``available``)."""
    import psutil  # here, not at import: the command line's --help stays fast

    try:
        return int(psutil.virtual_memory().available)
    except (OSError, RuntimeError, AttributeError):
        return 1 << 62  # unknown: do not refuse


def activation_bytes(config: RunConfig, training: bool) -> int:
    """Activations of one sequence's forward: with ``training``, every layer's activations kept
    for the backward (and their gradients), else the few tensors of the widest kind alive at once."""
    m = config.model
    if training:
        per_position = 2 * m.n_layers * (8 * m.d_model + 3 * m.d_mlp + 4 * m.n_heads * (m.n_ctx + m.d_head))
    else:
        per_position = 4 * max(m.d_model, m.d_mlp, m.n_heads * m.n_ctx, m.n_heads * m.d_head)
    return 4 * m.n_ctx * per_position + 8 * m.d_vocab_out


def cached_forward_bytes(config: RunConfig) -> int:
    """One sequence's forward with every hook cached (``run_with_cache``): the activations a
    training forward keeps, without their gradients."""
    m = config.model
    return (activation_bytes(config, training=True) - 8 * m.d_vocab_out) // 2 + 8 * m.d_vocab_out


def forward_bytes(config: RunConfig, batch: int, training: bool) -> int:
    """Activations of one forward of ``batch`` sequences (:func:`activation_bytes`), and the
    parameters (with their gradients and AdamW state when training)."""
    m = config.model
    n_params = (m.n_layers * (4 * m.d_model * m.n_heads * m.d_head + 2 * m.d_model * m.d_mlp)
                + (m.d_vocab + m.n_ctx + m.d_vocab_out) * m.d_model)
    return batch * activation_bytes(config, training) + 4 * n_params * (4 if training else 1)


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


def analysis_estimate(config: RunConfig, sequences: int, kept_per_sequence: int = 0,
                      forward: bool = True) -> dict[str, int]:
    """Bytes an analysis of ``sequences`` rendered sequences needs: the sequences (and a joined
    copy of their tokens, and their answer logits), what it keeps of each, one forward of a
    1,024-sequence chunk (unless ``forward`` is False: nothing is run), and the split."""
    task, m = config.task, config.model
    per_sequence = 8 * task.seq_len + 4 * m.d_vocab_out + kept_per_sequence
    parts = {f"{sequences:,} rendered sequences": render_bytes(task, sequences) + sequences * per_sequence,
             "a forward of 1,024 sequences": forward_bytes(config, 1024, training=False),
             "the split": split_bytes(task)}
    if not forward:
        del parts["a forward of 1,024 sequences"]
    return parts


def check_sizes(config: RunConfig, sizes: dict[str, tuple[int, ...]], kept_per_sequence: int = 0,
                forward: bool = True) -> None:
    """The one memory guard over a command's size arguments, before any work: each a count
    (:func:`check_count`), together fitting the available memory.

    ``sizes`` maps each option as typed (``"--pool-size 2000"``) to (its value, the sequences it
    renders per unit[, the bytes kept per unit beyond them: patching tables, cached activations]);
    ``kept_per_sequence``: what is kept of every rendered sequence; ``forward=False``: no model runs."""
    for option, (value, *_) in sizes.items():
        check_count(value, option.split()[0])
    total = sum(size[0] * size[1] for size in sizes.values())
    parts = analysis_estimate(config, total, kept_per_sequence, forward)
    kept = sum(size[0] * size[2] for size in sizes.values() if len(size) > 2)
    if kept:
        parts["what is kept of them"] = kept
    require_memory(parts, " ".join(sizes), "ask for fewer sequences")


def check_model_sizes(spec: str | Path, guard) -> None:
    """Run ``guard(config)`` (a :func:`check_sizes` call) on MODEL's config before it is loaded,
    where its config.json can be read; the command runs it again on the loaded model's config."""
    config = peek_run_config(spec)
    if config is not None:
        guard(config)


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


class FileLock:
    """An exclusive lock on the file ``path``, created if missing (never truncated, never through a
    symlink); ``busy`` is the one line said when another process holds it. The one lock of
    compose-lens: a directory's marker (:class:`DirectoryLock`) and a sweep point's ``POINT.lock``."""

    def __init__(self, path: Path, busy: str):
        self.path = Path(path)
        try:  # never through a symlink: a marker is rewritten in place
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ComposeLensError(f"{self.path}: is a symlink, not a {self.what} compose-lens wrote; "
                                       f"compose-lens never writes through one: remove it or use another "
                                       f"folder") from None
            raise
        if not stat.S_ISREG(os.fstat(self.fd).st_mode):
            os.close(self.fd)
            raise ComposeLensError(f"{self.path}: is not a regular file; remove it or use another folder")
        try:
            locked = filelock.lock_descriptor(self.fd, blocking=False)
        except BaseException:
            os.close(self.fd)
            raise
        if not locked:
            os.close(self.fd)
            raise ComposeLensError(busy)

    what = "lock"  # what the file is, in the symlink's refusal

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing drops the lock
            self.fd = -1

    def __enter__(self) -> "FileLock":
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()


class DirectoryLock(FileLock):
    """An exclusive lock on ``DIR/.compose-lens``, which it creates (with ``command``) if missing."""

    what = "marker"

    def __init__(self, directory: Path, command: str, busy: str):
        super().__init__(Path(directory) / MARKER, busy)
        if os.fstat(self.fd).st_size == 0:
            self.write({"command": command})

    def write(self, data: dict) -> None:
        """Rewrite the marker in place (the same inode, so the lock stays on it)."""
        text = json.dumps({"written_by": "compose-lens", **data}, indent=1, sort_keys=True).encode()
        os.ftruncate(self.fd, 0)
        os.lseek(self.fd, 0, os.SEEK_SET)  # (os.pwrite is POSIX only)
        view = memoryview(text)
        while view:
            view = view[os.write(self.fd, view):]


def lock_directory(directory: Path, command: str, busy: str) -> DirectoryLock:
    return DirectoryLock(directory, command, busy)


def lock_file(path: Path, busy: str) -> FileLock:
    return FileLock(path, busy)


def lock_run(run_dir: Path, command: str) -> contextlib.AbstractContextManager:
    """The lock of a command that writes into a run folder (``report RUN``): the run's marker, the lock
    ``train`` holds while it trains. A folder without a marker (the study's ``step_N.pth``) is not
    given one; its writes are still staged, and their stage is locked."""
    if not (Path(run_dir) / MARKER).is_file():
        return contextlib.nullcontext()
    return DirectoryLock(run_dir, command, f"{run_dir}: another compose-lens command is using this run now "
                                          f"(training it or writing its report); wait for it to end")


# -- outputs ---------------------------------------------------------------------------------------


def _all_files(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if not p.is_dir())


def check_replaceable(directory: Path, command: str, overwrite: bool, allowed: frozenset[str] | None = None) -> bool:
    """Validate replacing ``directory``; True if it holds something (to be replaced). Refuses a
    non-directory, a non-empty directory without ``overwrite``, and with it one that compose-lens did
    not write for ``command`` or that holds a file it did not write (its marker's list, or ``allowed``)."""
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
    check_no_broken_link(Path(text))
    return Path(text)


def check_no_broken_link(out: Path) -> None:
    """Refuse an output that is, or lies below, a symlink leading nowhere (a loop, or a link to
    something missing), up front and by the user's name for it."""
    for path in (out, *out.parents):
        if not os.path.islink(path):
            continue
        try:
            os.stat(path)
            continue  # it leads somewhere
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                why = "a symlink loop (it leads back to itself)"
            else:
                why = f"a dangling symlink (to {os.readlink(path)}, which does not exist)"
        where = "is" if path == out else f"lies below {path}, which is"
        raise ComposeLensError(f"--out {out}: {where} {why}; compose-lens does not write through it: remove "
                               f"the link, or choose another --out")


def _is_run(directory: Path) -> bool:
    """A training run's directory: its config.json and the trainer's marker (or, from a version
    without markers, its resume state or checkpoints)."""
    if not (directory / "config.json").is_file():
        return False
    return ((read_marker(directory) or {}).get("command") == "train" or (directory / "resume.safetensors").exists()
            or (directory / "checkpoints").is_dir())


# what a command other than train may write inside a run directory: dynamics its results/
# folder (the report reads it there), any command a report.html file
INSIDE_RUN = {"dynamics": "results", "file": "report.html"}


def check_not_inside_run(out: str | Path, command: str) -> None:
    """Refuse an output nested in a run directory (``fourier CKPT --out RUN/fourier``): a run holds
    only its own files, and ``train --resume`` refuses one holding anything else. ``dynamics
    --out RUN/results`` and a ``RUN/report.html`` are the run's own (:data:`INSIDE_RUN`)."""
    target = Path(os.path.abspath(out))
    for parent in target.parents:
        if _is_run(parent):
            if str(target.relative_to(parent)) == INSIDE_RUN.get(command):
                return
            allowed = f", or {parent / INSIDE_RUN[command]}" if command in INSIDE_RUN else ""
            raise ComposeLensError(f"--out {out}: is inside the run {parent}, which must hold only the run's own "
                                   f"files (train --resume refuses one holding more); choose a place outside "
                                   f"it{allowed}")


def check_parent(out: Path, command: str = "") -> None:
    """Refuse an output path below a file (``afile/out``), one without a name of its own
    (:func:`check_out_name`), or one inside a run directory (:func:`check_not_inside_run`: a run
    nested in a run too), before anything is made."""
    check_out_name(out)
    check_not_inside_run(out, command)
    for parent in Path(os.path.abspath(out)).parents:
        if parent.exists():
            if not parent.is_dir():
                raise ComposeLensError(f"--out {out}: {parent} is a file, not a folder")
            return


@contextlib.contextmanager
def staged_output(out: str | Path, command: str, overwrite: bool) -> Iterator[Path]:
    """Write an output directory through a fresh staging directory (``.NAME.<hex>.partial``), swapped
    in on success; validated (:func:`check_replaceable`) before anything is made. On an exception the
    stage and any parent this made are removed, and ``out`` is untouched."""
    out = check_out_name(out)
    check_parent(out, command)
    replace = check_replaceable(out, command, overwrite)
    with _staging(out, command) as (stage, lock):
        yield stage
        lock.write({"command": command, "files": _all_files(stage)})
        if replace:
            old = temp_beside(out, directory=True, suffix=".old")  # empty: the rename replaces it
            out.rename(old)
            stage.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(stage, out)  # onto a missing or empty directory


@contextlib.contextmanager
def staged_companion(folder: str | Path, command: str, keep: tuple[str, ...] = ()) -> Iterator[Path]:
    """Write the folder that goes with a file output (``report --out X`` writes ``X_files/``) through a
    stage, as :func:`staged_output` does. The file output's check (:func:`check_file_output`) stands for
    the folder's, which is not replaced whole: each entry of the stage replaces the entry of that name
    (``figures/``, ``results/``...) and anything else is kept. ``keep``: entries of the existing
    ``folder`` copied into the stage first (what the command may reuse)."""
    folder = check_out_name(folder)
    if folder.exists() and (folder.is_symlink() or not folder.is_dir()):
        raise ComposeLensError(f"{folder}: exists and is not a directory; compose-lens writes the "
                               f"page's figures and results there: move it away")
    with _staging(folder, command) as (stage, _):
        for name in keep:
            if (folder / name).is_dir() and not (folder / name).is_symlink():
                shutil.copytree(folder / name, stage / name, symlinks=True)
        yield stage
        if not folder.exists():
            os.replace(stage, folder)  # the marker goes with it: the folder is compose-lens's
            return
        for entry in sorted(stage.iterdir()):
            if entry.name != MARKER:
                _swap_entry(entry, folder / entry.name)
    shutil.rmtree(stage, ignore_errors=True)  # what is left of it: its marker


@contextlib.contextmanager
def _staging(target: Path, command: str) -> Iterator[tuple[Path, DirectoryLock]]:
    """A fresh stage beside ``target``, made and locked (:func:`_stage`), with its lock. If the write
    fails: ``target`` named in an error that names no file (a full disk), the stage and the parents
    this call made (only if still empty) removed."""
    created = []  # the missing ancestors of ``target``, outermost first
    for parent in Path(os.path.abspath(target)).parents:
        if parent.exists():
            break
        created.insert(0, parent)
    stage = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        stage = temp_beside(target, directory=True, suffix=".partial")
        lock = _stage(stage, command, target)
        try:
            yield stage, lock
        finally:
            lock.release()
    except BaseException as exc:
        if isinstance(exc, OSError) and not exc.filename and stage is not None:
            exc.filename = str(target)
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)
        for parent in reversed(created):
            with contextlib.suppress(OSError):
                parent.rmdir()
        raise


def _swap_entry(new: Path, target: Path) -> None:
    """Put ``new`` at ``target``, replacing a file or folder of that name (never through a symlink)."""
    if target.is_dir() and not target.is_symlink():
        old = temp_beside(target, directory=True, suffix=".old")
        target.rename(old)
        new.rename(target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(new, target)


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


def check_finite_logits(logits, what: str = "the model") -> None:
    """Refuse logits that hold NaN or an infinity, in one line, wherever an answer is read from a model:
    finite weights may still overflow float32 in a forward, and the argmax of NaN logits is a class
    like any other, so every accuracy read from them would be silently wrong."""
    import torch  # the callers have it loaded already; --help does not

    finite = torch.isfinite(logits.detach())
    if not bool(finite.all()):
        rows = finite.reshape(-1, logits.shape[-1]).all(-1) if logits.dim() else finite.reshape(1)
        raise ComposeLensError(f"{what}'s logits are NaN or infinite on {int((~rows).sum())} of {rows.numel()} "
                               f"inputs although its weights are finite (an activation overflows float32); "
                               f"every accuracy or effect read from them would be meaningless: pick another "
                               f"checkpoint")


def special_kind(path: Path) -> str:
    """What ``path`` is, in words, where it is neither a regular file nor a folder."""
    mode = os.stat(path).st_mode
    for test, word in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return word
    return "a special file"


def check_file_output(path: str | Path, overwrite: bool, signature: str) -> Path:
    """Validate writing the file ``path``: its folder exists; an existing file needs
    ``overwrite`` and must look like compose-lens wrote it (contains ``signature``)."""
    path = check_out_name(path)
    check_not_inside_run(path, "file")
    if path.is_dir():
        raise ComposeLensError(f"--out {path}: is a directory; give a file name")
    if not path.parent.is_dir():
        raise ComposeLensError(f"--out {path}: the folder {path.parent} does not exist")
    if path.exists() and not path.is_file():  # never opened: reading a FIFO blocks, a device is no file
        raise ComposeLensError(f"--out {path}: is {special_kind(path)}, not a regular file; compose-lens "
                               f"replaces only a file it wrote: give another file name")
    if path.exists():
        if not overwrite:
            raise ComposeLensError(f"--out {path}: exists; pass --overwrite to replace it")
        try:
            with path.open("rb") as handle:  # closed at once (it was left to the garbage collector)
                head = handle.read(65536).decode("utf-8", "replace")
        except OSError as exc:
            raise ComposeLensError(f"--out {path}: cannot be read ({exc.strerror})") from None
        if head and signature not in head:
            raise ComposeLensError(f"--out {path}: does not look like a file compose-lens wrote; "
                                   f"--overwrite will not replace it: move it away")
    return path


def write_text_atomic(path: Path, text: str) -> None:
    """Write through a fresh temporary beside ``path`` (:func:`compose_lens.core.files.atomic_path`)
    and a rename; the temporary file is removed on failure."""
    try:
        with atomic_path(path) as tmp:
            tmp.write_text(text, encoding="utf-8")
    except OSError as exc:
        if not exc.filename:  # a write that names no file (a full disk): the file it was for
            exc.filename = str(path)
        raise


FULL = (errno.ENOSPC, errno.EDQUOT)  # no space left on the device; the user's disk quota used up


def user_path(path: str | os.PathLike) -> str:
    """``path`` as the user named it: ``out/.summary.json.<hex>.tmp`` (or ``.partial``, ``.old``)
    reads ``out/summary.json``."""
    parts = Path(os.fsdecode(path)).parts
    return str(Path(*[temp_of(part) or part for part in parts])) if parts else os.fsdecode(path)


def os_error_line(exc: OSError, doing: str = "", kept: str = "") -> str:
    """One line for an I/O error: the user's path (:func:`user_path`), what could not be done, the
    reason (a full disk said in words), what is kept, and what to do."""
    where = user_path(exc.filename) if exc.filename else "?"
    reason = exc.strerror or str(exc)
    if exc.errno in FULL:
        reason = f"the disk is full: {reason}"
        if "free space" not in kept:
            kept = f"{kept or 'nothing else was changed'}: free space on that disk, or write the output elsewhere"
    what = f"cannot {doing} ({reason})" if doing else reason
    return f"{where}: {what}{'; ' + kept if kept else ''}"
