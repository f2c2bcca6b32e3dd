"""A griffe extension for the API page (docs/api.md): the docstrings' Sphinx roles read as code.

compose-lens's docstrings name other objects the Sphinx way (``:func:`~compose_lens.training.subject.load_model```,
``:mod:`compose_lens.core.stats```), which reads well in ``help()`` and in the source, but mkdocstrings
renders Markdown and showed each role as typed, 103 of them on the page. This extension rewrites
every role, as griffe reads each docstring, into the code span Sphinx would print: the full dotted
name, or its last part where the target starts with ``~``. (A link would need every target on the
page; most are internal and are not, and a link to nothing fails the strict build.)
mkdocs.yml loads it (``extensions``); ``tests/unit/test_api_page.py`` builds the page and fails on a
role left in it.

>>> without_roles("Read with :func:`~compose_lens.training.subject.load_model` (:mod:`compose_lens.training.runs`).")
'Read with `load_model` (`compose_lens.training.runs`).'
"""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:mod|func|class|meth|attr|data|obj|exc|const|ref|term):`(~?)([^`<]*?)(?:\s*<([^>]+)>)?`")


def _code(match: re.Match) -> str:
    short, text, target = match.groups()
    name = (target or text).strip() if not (text.strip() and target) else text.strip()
    if short:
        name = name.rsplit(".", 1)[-1]
    return f"`{name}`"


def without_roles(text: str) -> str:
    """``text`` with every Sphinx role written as the code span Sphinx shows."""
    return ROLE.sub(_code, text)


class SphinxRolesAsCode(griffe.Extension):
    """Rewrite the roles of every docstring griffe loads (see the module docstring)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = without_roles(obj.docstring.value)
