"""The one lock (safety.FileLock): a directory's marker and a sweep point's POINT.lock hold it alike."""

from __future__ import annotations

import pytest

from compose_lens.core.errors import ComposeLensError
from compose_lens.data.safety import MARKER, lock_directory, lock_file
from compose_lens.sweep import lock_point


def test_a_held_lock_refuses_a_second_holder_in_one_line_until_released(tmp_path):
    path = tmp_path / "p.lock"
    first = lock_file(path, "busy: try later")
    with pytest.raises(ComposeLensError, match="^busy: try later$"):
        lock_file(path, "busy: try later")
    first.release()
    with lock_file(path, "busy") as again:
        assert again.fd >= 0
    assert again.fd == -1 and path.read_text() == ""  # created, never written


def test_a_sweep_point_and_a_directory_take_the_same_lock(tmp_path):
    run = tmp_path / "runs" / "f=0.9_seed=0"
    run.parent.mkdir()
    with lock_point(run):
        with pytest.raises(ComposeLensError, match="is being trained by another process"):
            lock_point(run)
    marker = lock_directory(tmp_path, "sweep", "another sweep")
    with pytest.raises(ComposeLensError, match="^another sweep$"):
        lock_file(tmp_path / MARKER, "another sweep")
    marker.release()


def test_a_symlink_is_never_taken_for_a_lock(tmp_path):
    (tmp_path / "elsewhere").write_text("not ours")
    (tmp_path / "p.lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ComposeLensError, match="is a symlink, not a lock compose-lens wrote"):
        lock_file(tmp_path / "p.lock", "busy")
    assert (tmp_path / "elsewhere").read_text() == "not ours"


def test_a_lock_held_by_another_process_refuses_and_the_marker_keeps_its_text(tmp_path):
    """The lock is the kernel's (filelock's descriptor lock): another process's holder refuses this one in
    one line, and the marker's text, written by its holder while locked, is never truncated by a refusal."""
    import subprocess
    import sys
    import textwrap

    held = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from compose_lens.data.safety import lock_directory
        lock = lock_directory({str(tmp_path)!r}, "train", "busy")
        print("held", flush=True)
        sys.stdin.readline()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert held.stdout.readline().strip() == "held"
        with pytest.raises(ComposeLensError, match="^another train$"):
            lock_directory(tmp_path, "analyze", "another train")
        assert '"command": "train"' in (tmp_path / MARKER).read_text()
    finally:
        held.communicate("\n", timeout=30)
    with lock_directory(tmp_path, "analyze", "busy"):  # the process ended: the kernel dropped its lock
        pass
