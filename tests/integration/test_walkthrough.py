"""The walkthrough notebook (experiments/walkthrough.ipynb) runs from top to bottom, offline,
within its time budget, is kept in git without outputs, and uses only the public API."""

from __future__ import annotations

import ast
import json
import os
import time
from pathlib import Path

import pytest

import compose_lens

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "experiments" / "walkthrough.ipynb"
HANG_S = 600  # a cell that runs this long is hung (the whole notebook takes about 15 s on one core); no timed
# assertion: the time a test takes depends on what runs beside it (make test runs two processes)


def test_notebook_is_stored_without_outputs():
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


def private_uses(source: str) -> list[str]:
    """What one code cell takes from compose_lens beyond its public API (``compose_lens.__all__``):
    a submodule import (``import compose_lens.views.drawing``, ``from compose_lens.analysis import x``), a
    ``from compose_lens import name`` or ``cl.name`` where ``name`` is not public."""
    public = set(compose_lens.__all__)
    tree = ast.parse("\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))))
    aliases, found = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "compose_lens":
                    aliases.add(alias.asname or alias.name)
                elif alias.name.startswith("compose_lens."):
                    found.append(f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "compose_lens":
            if node.module != "compose_lens":
                found.append(f"from {node.module} import ...")
            else:
                found += [f"from compose_lens import {a.name}" for a in node.names if a.name not in public]
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and node.attr not in public):
            found.append(f"{node.value.id}.{node.attr}")
    return found


def test_private_uses_are_found():
    assert private_uses("from compose_lens.report.page import notebook_view") == \
        ["from compose_lens.report.page import ..."]
    assert private_uses("import compose_lens as cl\nx = cl.analysis.fourier.operand_grid") == ["cl.analysis"]
    assert private_uses("from compose_lens import views, load_model") == ["from compose_lens import views"]
    assert private_uses("import compose_lens.views.drawing") == ["import compose_lens.views.drawing"]
    assert private_uses("import compose_lens as cl\ncl.load_model('paper')\ncl.patching_table") == []


def test_notebook_uses_only_the_public_api():
    cells = [c for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"]
    found = {i: private_uses("".join(c["source"])) for i, c in enumerate(cells)}
    assert not {i: uses for i, uses in found.items() if uses}, "export these from compose_lens/__init__.py"


def test_walkthrough_notebook_executes(monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    # the kernel imports this checkout's package, whatever else is installed
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    # one thread, as the notebook's torch: two, beside make test's other process on 2 cores, took 100 s, not 15
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=HANG_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(ROOT)}})
    started = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - started
    print(f"walkthrough.ipynb executed in {elapsed:.1f} s")
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs)
    assert "model answers 30, label 30" in text and "key frequencies" in text
    assert "IProgress" not in text  # no bar is drawn into a notebook's output (compose_lens.core.progress)
    html = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any("CircuitsVis.render" in h and "unpkg" not in h.split("CircuitsVis.render")[1] for h in html)
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 4
