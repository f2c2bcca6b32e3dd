"""compose-lens installed from its wheel, as a user gets it, works as it does in the source tree.

Every other test imports the package from the checkout, where every file sits beside the code.
A wheel carries only what ``pyproject.toml`` names: a data file left out of ``package-data`` is
silently absent once installed (the stall detector's calibration was: ``stall_certain_after()``
read None, ``stop_at=stalled`` never fired). This test builds the wheel, installs it into a
folder of its own and runs the command line from a folder outside the repository with only that
folder on the path, so the source tree cannot be imported.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The wheel built from this checkout and installed (no dependencies) into a folder: its site."""
    root = tmp_path_factory.mktemp("wheel")
    # built from a copy of what the wheel is made of (the top-level files and the package), so the
    # build's own folders (build/, *.egg-info) neither land in the checkout nor leak stale files in
    source = root / "source"
    shutil.copytree(REPO / "compose_lens", source / "compose_lens", ignore=shutil.ignore_patterns("__pycache__"))
    for top in REPO.iterdir():
        if top.is_file() and top.name != ".git":  # in a git worktree .git is a file naming the repository's
            shutil.copy2(top, source / top.name)  # folder: copied, git below would commit into the checkout
    # a git repository of its own, so the build has a commit to write into the wheel (setup.py); GIT_DIR
    # and GIT_WORK_TREE pin every git call to it, whatever lies around the temporary folder
    env = {**os.environ, "GIT_DIR": str(source / ".git"), "GIT_WORK_TREE": str(source)}
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-q",
                                                 "-m", "the wheel's source"]):
        subprocess.run(["git", *args], cwd=source, env=env, check=True, capture_output=True, timeout=120)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    try:
        subprocess.run(pip + ["wheel", str(source), "--no-deps", "--no-build-isolation", "-w", str(root / "dist")],
                       check=True, capture_output=True, text=True, timeout=300)
    except subprocess.CalledProcessError as failed:
        pytest.fail(f"pip wheel failed:\n{failed.stderr[-2000:]}")
    (wheel,) = (root / "dist").glob("compose_lens-*.whl")
    from compose_lens.core.provenance import VERSION  # the version outputs record is the one the wheel carries

    assert wheel.name.startswith(f"compose_lens-{VERSION}-"), wheel.name
    subprocess.run(pip + ["install", "--no-deps", "--target", str(root / "site"), str(wheel)],
                   check=True, capture_output=True, text=True, timeout=300)
    return root / "site"


def _run_installed(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_wheel_carries_every_file_of_the_package(installed):
    """Each file git tracks under compose_lens/ (code, the paper model, the calibration, py.typed)
    is in the installed tree, except an analysis folder's tests (they run from a checkout only)."""
    tracked = subprocess.run(["git", "ls-files", "compose_lens"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")
    tests = [name for name in tracked if Path(name).name.startswith("test_")]
    assert tests, "no analysis folder keeps its tests beside its code: the check below checks nothing"
    assert [name for name in tests if (installed / name).exists()] == [], "the wheel carries the analyses' tests"
    missing = [name for name in tracked if name not in tests and not (installed / name).is_file()]
    assert missing == [], f"left out of the wheel (pyproject.toml package-data): {missing}"
    assert (installed / "compose_lens" / "py.typed").is_file()  # type checkers read the hints (PEP 561)
    assert list(installed.glob("compose_lens-*.dist-info/licenses/LICENSE")), "the wheel carries no LICENSE"


def test_installed_wheel_evaluates_the_paper_model_with_the_calibration(installed, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = _run_installed(installed, elsewhere, "-c", "import compose_lens; print(compose_lens.__file__)")
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(installed), "the source tree was imported, not the wheel"

    evaluated = _run_installed(installed, elsewhere, "-m", "compose_lens.cli", "evaluate", "paper", "--quiet")
    assert evaluated.returncode == 0, evaluated.stderr
    assert "2var_var_restricted_2" in evaluated.stdout

    calibrated = _run_installed(installed, elsewhere, "-c",
                                "from compose_lens.training import outcome; print(outcome.stall_certain_after())")
    assert calibrated.returncode == 0, calibrated.stderr
    assert calibrated.stdout.strip() != "None", "the stall calibration was not read from the installed package"
    assert int(calibrated.stdout) > 0


def test_the_installed_package_records_the_commit_it_was_built_from(installed, tmp_path):
    """Runs trained from an installed compose-lens record the commit of the tree the wheel was built
    from (setup.py writes it into compose_lens/_commit.txt), not only the package version."""
    source = installed.parent / "source"
    commit = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"], cwd=source,
                            capture_output=True, text=True, check=True).stdout.strip()
    read = _run_installed(installed, tmp_path, "-c", "from compose_lens.core import provenance; print(provenance.code_version())")
    assert read.returncode == 0, read.stderr
    assert read.stdout.strip() == commit


def test_the_wheels_metadata_offers_the_extras_and_says_what_was_tried(installed):
    """A package index shows the metadata: the docs and notebook extras (not only test), the classifiers of
    what was run, the project's and the study's addresses."""
    (metadata,) = installed.glob("compose_lens-*.dist-info/METADATA")
    fields = [line.split(": ", 1) for line in metadata.read_text(encoding="utf-8").splitlines() if ": " in line]
    extras = {value for key, value in fields if key == "Provides-Extra"}
    assert {"docs", "notebook", "nnsight", "test"} <= extras
    classifiers = {value for key, value in fields if key == "Classifier"}
    assert {"Programming Language :: Python :: 3.11", "Intended Audience :: Science/Research"} <= classifiers
    urls = [tuple(f) for f in fields if f[0] == "Project-URL"]
    assert ("Project-URL", "Repository, https://github.com/compose-lens/compose-lens") in urls
    assert ("Project-URL", "Paper, https://arxiv.org/abs/2605.31497") in urls
