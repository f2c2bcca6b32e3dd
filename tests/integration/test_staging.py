"""Staging names never take what is not compose-lens's own (issue #30).

Every temporary file or folder compose-lens writes through (an analysis output's
staging directory, the name a replaced output moves to, ``FILE``'s temporary) is
created fresh and exclusively beside its target, so a user's ``.OUT.partial``,
``.OUT.old`` or ``NAME.tmp`` is never deleted or overwritten, and a marker that is a
symlink is never written through. These are the commands that *succeed*; the
refusals are in ``test_bad_input.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from compose_lens.cli import main
from compose_lens.core.config import ModelConfig, RunConfig, TaskConfig, TrainConfig
from compose_lens.core.errors import ComposeLensError
from compose_lens.core.files import temp_beside, temp_of, write_json_atomic
from compose_lens.data.safety import MARKER, DirectoryLock, staged_output
from compose_lens.training.train import Trainer

TINY_TASK = TaskConfig(modulus=7, n_vars=6, left_forbidden=("f",), right_forbidden=("a",), f=0.8)
TINY = RunConfig(task=TINY_TASK, model=ModelConfig.for_task(TINY_TASK, d_model=16, d_head=16, d_mlp=32),
                 train=TrainConfig(steps=20, batch_size=16, eval_every=10, checkpoint_every=10,
                                   pool_size=16, threads=1))


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("staging") / "run"
    Trainer(TINY, directory, progress=False).run()
    return directory


def _ablate(run: Path, out: Path, *extra: str) -> int:
    return main(["ablate", str(run), "--pool-size", "4", "--out", str(out), "--quiet", *extra])


def _leftovers(folder: Path) -> list[str]:
    return sorted(e.name for e in folder.iterdir() if temp_of(e.name))


def test_a_users_partial_and_old_folders_beside_the_output_are_kept(run, tmp_path):
    out = tmp_path / "out"
    for name in (".out.partial", ".out.old"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "draft.txt").write_text("the user's\n")
    assert _ablate(run, out) == 0
    assert (out / "ablation.csv").exists()
    assert _ablate(run, out, "--overwrite") == 0
    for name in (".out.partial", ".out.old"):
        assert (tmp_path / name / "draft.txt").read_text() == "the user's\n"
    assert _leftovers(tmp_path) == []


def test_a_users_tmp_file_beside_a_file_output_is_kept(tmp_path):
    for name in ("s.jsonl.tmp", "split.json.tmp"):
        (tmp_path / name).write_text("the user's\n")
    assert main(["data", "sample", "--n", "3", "--out", str(tmp_path / "s.jsonl")]) == 0
    assert main(["data", "split", "--modulus", "7", "--n-vars", "6", "--out", str(tmp_path / "split.json")]) == 0
    assert len((tmp_path / "s.jsonl").read_text().splitlines()) == 3
    for name in ("s.jsonl.tmp", "split.json.tmp"):
        assert (tmp_path / name).read_text() == "the user's\n"
    write_json_atomic(tmp_path / "x.json", {"a": 1})
    assert json.loads((tmp_path / "x.json").read_text()) == {"a": 1} and _leftovers(tmp_path) == []


def test_temporary_names_are_created_exclusively_and_never_follow_a_symlink(tmp_path):
    target = tmp_path / "f.json"
    made = {temp_beside(target) for _ in range(20)} | {temp_beside(target, directory=True) for _ in range(5)}
    assert len(made) == 25 and all(temp_of(p.name) == "f.json" for p in made)
    assert temp_of("f.json.tmp") is None and temp_of(".f.json.partial") is None


def test_a_marker_that_is_a_symlink_is_never_written_through(run, tmp_path, capsys):
    precious = tmp_path / "precious.txt"
    precious.write_text("the user's\n")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / MARKER).symlink_to(precious)
    with pytest.raises(ComposeLensError, match="symlink"):
        DirectoryLock(folder, "train", "busy")
    config = tmp_path / "tiny.json"
    config.write_text(TINY.to_json())
    assert main(["train", "--config", str(config), "--out", str(folder), "--quiet"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert precious.read_text() == "the user's\n" and (folder / MARKER).is_symlink()


def test_a_crashed_stage_is_cleared_and_a_running_one_refuses(tmp_path):
    out = tmp_path / "out"
    crashed = temp_beside(out, directory=True, suffix=".partial")
    DirectoryLock(crashed, "ablate", "busy").release()  # its process is gone
    with staged_output(out, "ablate", False) as stage:
        (stage / "a.txt").write_text("x")
        assert not crashed.exists()
        with pytest.raises(ComposeLensError, match="another compose-lens command is writing it"):
            with staged_output(out, "ablate", True):
                pass
    assert (out / "a.txt").read_text() == "x" and _leftovers(tmp_path) == []
    assert sorted(os.listdir(out)) == [MARKER, "a.txt"]


def test_a_pages_files_folder_is_staged_and_keeps_what_it_did_not_write(tmp_path):
    """``report --out X`` writes ``X_files/`` through :func:`staged_companion`: a failing call
    leaves the earlier folder exactly as it was and nothing of its own; a finished one replaces
    the entries it wrote (figures/) whole, keeps the user's, and may reuse ``keep`` (results/)."""
    from compose_lens.data.safety import staged_companion

    folder = tmp_path / "X_files"
    with pytest.raises(OSError):
        with staged_companion(folder, "report") as stage:
            (stage / "figures").mkdir()
            (stage / "figures" / "a.png").write_bytes(b"half")
            raise OSError(28, "No space left on device")
    assert not folder.exists() and _leftovers(tmp_path) == []
    with staged_companion(folder, "report") as stage:
        (stage / "figures").mkdir()
        (stage / "figures" / "old.png").write_bytes(b"first")
        (stage / "results").mkdir()
        (stage / "results" / "dynamics.csv").write_text("step\n")
    (folder / "notes.txt").write_text("the user's\n")
    before = sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))
    with pytest.raises(KeyboardInterrupt):
        with staged_companion(folder, "report", keep=("results",)) as stage:
            (stage / "figures").mkdir()
            raise KeyboardInterrupt
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) == before
    with staged_companion(folder, "report", keep=("results",)) as stage:
        assert (stage / "results" / "dynamics.csv").read_text() == "step\n"  # reusable
        (stage / "figures").mkdir()
        (stage / "figures" / "new.png").write_bytes(b"second")
    assert sorted(p.name for p in (folder / "figures").iterdir()) == ["new.png"]  # no stale figure
    assert (folder / "notes.txt").read_text() == "the user's\n"
    assert (folder / "results" / "dynamics.csv").exists() and _leftovers(tmp_path) == []
