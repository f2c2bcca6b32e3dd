"""Provenance names compose-lens's own code: its commit in a checkout, its version when installed.

``code_version`` once ran ``git describe`` in the folder above the package, whatever that was:
installed into a virtual environment inside a user's own repository, every output recorded
the user's commit as compose-lens's code.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from compose_lens.core import provenance

REPO = Path(__file__).resolve().parents[2]


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def test_in_a_checkout_the_commit_is_recorded_with_the_version():
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    provenance._code_version.cache_clear()  # read once per process: a commit made since would not show
    record = provenance.provenance(seed=1)
    assert record["code_version"] == _git(REPO, "describe", "--always", "--dirty", "--abbrev=12")
    assert record["compose_lens_version"] == provenance.VERSION


def test_a_result_records_the_torch_threads_it_was_computed_with(tmp_path):
    """The thread count changes float rounding (the same-MLP probe of the paper model differs in its last digits
    on one and two threads): a table written under one count records that count."""
    import json

    import pandas as pd

    from compose_lens.analysis.activations import torch_threads
    from compose_lens.training.runs import write_table

    for threads in (1, 2):
        with torch_threads(threads):
            write_table(pd.DataFrame({"x": [1.0]}), tmp_path / f"t{threads}.csv", provenance.provenance(seed=0))
        assert json.loads((tmp_path / f"t{threads}.provenance.json").read_text())["torch_threads"] == threads


def test_installed_inside_a_users_repository_the_users_commit_is_not_recorded(tmp_path):
    """A venv's site-packages inside a git repository of the user's: code_version is the package
    version, not the user's HEAD."""
    user = tmp_path / "my-project"
    site = user / ".venv" / "lib" / "site-packages"
    shutil.copytree(REPO / "compose_lens", site / "compose_lens", ignore=shutil.ignore_patterns("__pycache__"))
    (user / "analysis.py").write_text("print('my work')\n")
    _git(user, "init", "-q")
    _git(user, "add", "analysis.py")
    _git(user, "-c", "user.name=u", "-c", "user.email=u@example.org", "commit", "-q", "-m", "mine")
    users_commit = _git(user, "rev-parse", "--short=12", "HEAD")

    env = {**os.environ, "PYTHONPATH": str(site)}
    read = subprocess.run([sys.executable, "-c", "import compose_lens.core.provenance as p; r = p.provenance(); "
                           "print(p.__file__); print(r['code_version']); print(r['compose_lens_version'])"],
                          cwd=user, env=env, capture_output=True, text=True, timeout=120)
    assert read.returncode == 0, read.stderr
    where, code, version = read.stdout.split()
    assert Path(where).is_relative_to(site)
    assert users_commit not in code
    assert code == version == provenance.VERSION



def test_a_git_archive_of_the_package_records_the_commit_it_was_archived_from(tmp_path):
    """A copy made with ``git archive`` has no .git, but ``_commit.txt`` is filled (export-subst):
    its runs record the commit, not the bare package version (105 of the 125 by-seed runs, trained
    from such a frozen copy installed, recorded only "0.1.0")."""
    import io
    import tarfile

    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    head = _git(REPO, "rev-parse", "HEAD")
    attributes = subprocess.run(["git", "show", "HEAD:.gitattributes"], cwd=REPO, capture_output=True, text=True)
    if "export-subst" not in attributes.stdout:
        pytest.skip("HEAD predates .gitattributes")
    archive = subprocess.run(["git", "archive", "--format=tar", "HEAD", "compose_lens"], cwd=REPO,
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(tmp_path, filter="data")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    read = subprocess.run([sys.executable, "-c", "import compose_lens.core.provenance as p; print(p.__file__); "
                           "print(p.code_version())"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert read.returncode == 0, read.stderr
    where, code = read.stdout.split()
    assert Path(where).is_relative_to(tmp_path)
    assert code == head[:12]


def test_an_unfilled_commit_file_reads_as_no_commit(tmp_path, monkeypatch):
    for text, expected in (("$Format:%H$\n", None), ("0123456789abcdef0123\n", "0123456789ab"),
                           ("0123456789ab-dirty\n", "0123456789ab-dirty"), ("not a commit\n", None)):
        (tmp_path / "_commit.txt").write_text(text)
        monkeypatch.setattr(provenance, "COMMIT_FILE", tmp_path / "_commit.txt")
        assert provenance.built_from() == expected, text
