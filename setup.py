"""The build's two additions to pyproject.toml: the commit it was built from, and no tests in the wheel.

A run records its code version (:func:`compose_lens.core.provenance.code_version`): in a checkout, the
git commit; installed, the package cannot ask git, so the build writes the commit (``git describe
--always --dirty``) into ``compose_lens/_commit.txt`` inside the wheel. ``git archive`` fills the
same file through ``.gitattributes`` (export-subst). Built from a tree that is neither, the file
stays unfilled and the run records the package version alone.

An analysis folder (``compose_lens/registry/<name>/``) keeps its ``test_*.py`` beside its code; the tests
read the repository's ``conftest.py`` fixtures and run from a checkout only, so the wheel leaves them out.
"""

import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

COMMIT_FILE = Path("compose_lens") / "_commit.txt"


class BuildPyWithCommit(build_py):
    def find_package_modules(self, package, package_dir):
        return [found for found in super().find_package_modules(package, package_dir)
                if not found[1].startswith("test_")]

    def run(self):
        super().run()
        try:
            found = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"], capture_output=True,
                                   text=True, timeout=10, cwd=Path(__file__).resolve().parent)
        except (OSError, subprocess.SubprocessError):
            return
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parent)
        if found.returncode == 0 and top.returncode == 0 and Path(top.stdout.strip()) == Path(__file__).resolve().parent:
            (Path(self.build_lib) / COMMIT_FILE).write_text(found.stdout.strip() + "\n")


setup(cmdclass={"build_py": BuildPyWithCommit})
