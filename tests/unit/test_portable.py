"""Nothing Linux-only happens when compose-lens is imported, and the load readings are portable.

``fcntl`` exists on Linux and macOS but not on Windows; ``/proc`` exists on Linux only. A
module that imports ``fcntl`` at its top stops the whole package from importing on Windows,
and a reading taken from ``/proc`` is silently absent elsewhere. The locks import ``fcntl``
(or Windows's ``msvcrt``) only when a lock is taken; memory and CPU load come from psutil.
"""

from __future__ import annotations

import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import compose_lens
from compose_lens.core import cores
from compose_lens.data import safety

REPO = Path(__file__).resolve().parents[2]

# Every module of the package, imported in a Python where ``import fcntl`` fails as on Windows.
_IMPORT_ALL_WITHOUT_FCNTL = """
import importlib, pkgutil, sys
sys.modules["fcntl"] = None  # `import fcntl` now raises ImportError, as it does on Windows
import compose_lens
failed = []
for module in pkgutil.walk_packages(compose_lens.__path__, "compose_lens."):
    if module.name.endswith(".__main__"):
        continue  # runs the command line
    try:
        importlib.import_module(module.name)
    except ImportError as exc:
        if "fcntl" in str(exc):
            failed.append(module.name)
print(" ".join(failed) or "none")
"""


def test_every_module_imports_where_there_is_no_fcntl():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", _IMPORT_ALL_WITHOUT_FCNTL], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "none", f"these modules need fcntl to import: {done.stdout.strip()}"


def test_the_package_reads_no_proc_file():
    """Memory and CPU load come from psutil: no module opens a /proc file of its own."""
    sources = {path.relative_to(REPO): path.read_text(encoding="utf-8")
               for path in Path(compose_lens.__file__).parent.rglob("*.py")}
    assert [str(name) for name, text in sources.items() if '"/proc/' in text] == []


def test_memory_and_cpu_load_are_read():
    assert 0 < safety.available_memory() < 1 << 50
    busy = cores.machine_busy_seconds()
    assert busy is not None and busy > 0
    burn_until = cores.own_busy_seconds() + 0.2
    while cores.own_busy_seconds() < burn_until:  # this process's own work shows in the machine's
        pass
    assert cores.machine_busy_seconds() >= busy + 0.15
