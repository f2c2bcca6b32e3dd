"""docs/api.md, the API reference, documents every public name of ``compose_lens`` and nothing else.

The page is a list of mkdocstrings entries (``::: module.attribute``, with ``heading: name`` where
the public name is not the attribute's own); the strict docs build renders each from its
docstring. The registered analyses' entries are written into it from the registry when the site is
built (docs/from_code.py); the rest are written by hand. Here the entries, read as the build
reads them, are compared with what ``compose_lens`` exports (``__all__``: its ``_EXPORTS`` and the
registered analyses' exports), so a name added to the package without a page entry, or an entry
left behind by a name that moved, fails.
"""

from __future__ import annotations

import re
from pathlib import Path

import compose_lens

PAGE = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def docs_hook():
    """docs/from_code.py, the build's hook (docs/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("from_code", PAGE.parent / "from_code.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def page_text() -> str:
    """The API page's Markdown as the build renders it: the registered analyses' entries written in."""
    hook = docs_hook()
    text = PAGE.read_text()
    assert text.count(hook.MARKER) == 1, f"docs/api.md must hold {hook.MARKER!r} once"
    return hook.written("api.md", text)


def page_entries() -> dict[str, str]:
    """Public name -> the dotted path the page documents it from."""
    entries = {}
    for path, options in re.findall(r"^::: (\S+)\n((?:    .*\n)*)", page_text(), re.M):
        heading = re.search(r"^\s+heading: (\S+)$", options, re.M)
        name = heading.group(1) if heading else path.rpartition(".")[2]
        assert name not in entries, f"{name} is documented twice"
        entries[name] = path
    return entries


def exported() -> dict[str, str]:
    """Public name -> the dotted path of the object ``compose_lens.<name>`` resolves to."""
    found = {**compose_lens._EXPORTS, **compose_lens._registered()}
    paths = {}
    for name in compose_lens.__all__:
        if name == "__version__":
            continue
        module, _, attribute = found[name].partition(":")
        paths[name] = f"{module}.{attribute or name}"
    return paths


def test_every_public_name_is_on_the_api_page_from_where_it_is_defined():
    public, documented = exported(), page_entries()
    assert len(public) > 70  # the registry's exports are counted too
    missing = sorted(set(public) - set(documented))
    assert not missing, f"public names missing from docs/api.md: {missing}"
    stale = sorted(set(documented) - set(public))
    assert not stale, f"docs/api.md documents names compose_lens does not export: {stale}"
    wrong = {name: documented[name] for name in public if documented[name] != public[name]}
    assert not wrong, f"docs/api.md documents these from the wrong place: {wrong}"


def test_the_api_page_is_in_the_docs_navigation():
    mkdocs = (PAGE.parents[1] / "mkdocs.yml").read_text()
    assert re.search(r"^\s+- .+: api\.md$", mkdocs, re.M)
    assert "mkdocstrings" in mkdocs


def test_the_rendered_page_shows_no_raw_roles_private_bases_or_internal_references(tmp_path):
    """The built page reads as text: the docstrings' Sphinx roles became code (docs/griffe_roles.py; 103 were
    shown as typed), no class shows its private base (``Bases: _JsonConfig``), no docstring points at the
    project's internal SPEC."""
    import importlib.util
    import subprocess
    import sys

    import pytest

    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed (the docs extra installs it)")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(tmp_path)],
                          cwd=PAGE.parents[1], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    text = re.sub(r"<[^>]+>", "", (tmp_path / "api" / "index.html").read_text(encoding="utf-8"))
    roles = re.findall(r":(?:mod|func|class|meth|attr|data|obj|exc):`", text)
    assert roles == [], f"{len(roles)} raw Sphinx roles on the API page"
    assert "Bases: _" not in text and "SPEC" not in text
    missing = [name for name in compose_lens._registered() if name not in text]  # the hook wrote them in
    assert not missing, f"the built page lacks the registered exports {missing}"
