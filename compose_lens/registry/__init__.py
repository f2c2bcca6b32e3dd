"""The analysis registry: one declaration per analysis, read by ``analyze``, the report, the CLI and the API.

Each analysis, of one model or of a run's checkpoints (``of="run"``: ``dynamics``, ``early_jump``, ``llc``), is
one :class:`Analysis` (:mod:`.analysis` says what one holds; docs/extending.md walks through the fields) bound
to an upper-case name in the ``__init__.py`` of its folder here, which holds the whole analysis: numbers,
figures, declaration and tests (``registry/answer_lens/`` is the worked example). :func:`load` scans the
folders (nothing names an analysis by hand) and :data:`ANALYSES` holds them in the order ``analyze`` runs
them (:data:`ORDER`).

Nothing else names an analysis: :mod:`compose_lens.report.context` runs a declaration (its guards on every
path), the report makes each section with :func:`~compose_lens.report.context.obtain` (the saved files where
they were made with the same settings, seed and configuration, else computed now and saved), the command
line builds every analysis command and the findings table from the declarations, and ``compose_lens``
resolves their exports.

**This module is imported by the command line before torch**: the declarations are plain data, and the
functions they name import the analysis modules, pandas and the figures inside their bodies
(``tests/unit/test_layout.py``, ``LAZY_ALLOWED``). It imports nothing of the report (its sections write
tables with :func:`compose_lens.core.markup.html_table`): the report reads the registry, not the other way.
"""

from __future__ import annotations

import importlib
import pkgutil

from compose_lens.core.outputs import own
from compose_lens.registry.analysis import FIGURES, Analysis, Finding, Option, Result, by_name

# The order ``analyze`` runs the analyses in (and prints their findings): the one list to edit for
# that; an analysis it does not name runs after these, in the order of its name.
ORDER = ("probes", "qk", "attention_entropy", "fourier", "same_mlp", "dla", "ablation", "patching", "circuit",
         "variant", "gradient", "das", "patching_heads", "path_patching", "attention", "modularity",
         "dynamics", "early_jump", "llc")


def load() -> tuple[Analysis, ...]:
    """Every declaration of this package's folders, in :data:`ORDER`; each is also bound here by the name its
    folder gives it (``registry.DLA``), and what it writes is recorded for the run layout
    (:mod:`compose_lens.core.outputs`)."""
    declared: dict[str, Analysis] = {}
    for folder in (m for m in pkgutil.iter_modules(__path__) if m.ispkg):
        for name, value in vars(importlib.import_module(f"{__name__}.{folder.name}")).items():
            if isinstance(value, Analysis) and name.isupper() and all(value is not v for v in declared.values()):
                declared[name] = value
    globals().update(declared)
    analyses = tuple(sorted(declared.values(),
                            key=lambda a: (ORDER.index(a.name) if a.name in ORDER else len(ORDER), a.name)))
    for analysis in analyses:
        own(analysis.name, analysis.tables + analysis.documents if analysis.of == "model" else None,
            analysis.figures)
    return analyses


ANALYSES: tuple[Analysis, ...] = load()

# what the rest of the package reads here: the declarations' vocabulary and every declaration
__all__ = ["ANALYSES", "FIGURES", "ORDER", "Analysis", "Finding", "Option", "Result", "by_name", "load",
           *(name for name, value in list(globals().items()) if isinstance(value, Analysis))]
