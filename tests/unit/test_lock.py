"""The one lock (safety.FileLock): a directory's marker and a sweep point's POINT.lock hold it alike."""

from __future__ import annotations

import pytest

from compose_lens.errors import ComposeLensError
from compose_lens.safety import MARKER, lock_directory, lock_file
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
