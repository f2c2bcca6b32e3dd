"""The analysis registry: one declaration per analysis, read by ``analyze``, the report, the CLI and the API.

An analysis of one model, or of a run's checkpoints (``of="run"``: ``dynamics``, ``early_jump``, ``llc``), is declared once, as an :class:`Analysis` (:mod:`.analysis` says what
one holds) in the ``__init__.py`` of its folder here, which holds the whole analysis: numbers, figures,
declaration and tests (one folder per analysis, or per family: ``patching/``; ``registry/answer_lens/`` is the
example of docs/extending.md). The package finds them: :func:`load` scans its folders (a new one is found,
nothing names it by hand), and :data:`ANALYSES` holds them in the order ``analyze`` runs them
(:data:`ORDER`). A declaration holds:

* its **name** (``analyze`` writes its files into ``OUT/<name>/``, the report reads and keeps them in
  ``RUN_DIR/results/<name>/``) and the **title** of its report section;
* its **settings** with their defaults, in this one place: ``analyze``, the report and its own command
  run it with the same ones, and every file it writes records them (``settings`` in the provenance);
* its **computation**, ``compute(context, settings) -> Result``, over a per-model
  :class:`~compose_lens.report.context.Context`: what several analyses of one model share (the
  loaded model on the forwards the analyses use, the located circuit, the Fourier subject, the
  probe heads, the constant-operand grid) is made there once per model;
* the **tables** and **documents** its :class:`Result` holds (written as ``<stem>.csv`` with a
  ``<stem>.provenance.json`` beside it, and ``<stem>.json``), from which
  :func:`~compose_lens.report.context.read` rebuilds it, and its **figures** and offline pages,
  ``draw(context, result, settings)``: made by :mod:`compose_lens.views` mostly of those tables and documents
  (not by the computation, so a result read back can draw them again; fourier's also reads the open
  context's grid; by a worker, where ``analyze`` has one), their stems declared (``figures``: what a run directory may hold of it,
  :mod:`compose_lens.core.outputs`);
* optionally: whether it **applies** to a model (``applies(config)``; ``analyze`` and the report
  leave it out where it does not: the variant reading on the study's task), its report **section**
  (``section(inputs, result, settings) -> HTML``, placed where :data:`compose_lens.report.PAGE` names its
  anchor, else last), the **findings** ``analyze`` prints (summary key, what it measures, what the circuit predicts), its own
  **command** (``compose-lens <command> MODEL --out DIR``, with the ``options`` that set its settings:
  integers, choices, a pairs file, or values after MODEL), a settings check (``validate``) and a memory ``guard``, the lines
  its command prints (``describe``), and its **exports**, its public API (``compose_lens.<name>``: names
  of its module, or ``NAME=module[:attribute]``): the only place an analysis's public names are listed.

Nothing else names an analysis: :mod:`compose_lens.report.context` runs a declaration (its guards on every
path: the command, ``analyze``, the report, :func:`compose_lens.report.context.run_analysis`), the report makes
each registered section with :func:`~compose_lens.report.context.obtain` (the saved files where they were made
with the same settings, seed and configuration, else computed now and saved), the command line builds
every analysis command and the findings table from the declarations, and ``compose_lens`` resolves the
exports. ``docs/extending.md`` walks through adding one, as a folder (the answer lens, ``registry/answer_lens/``).

**This module is imported by the command line before torch** (it builds the parser's registered
commands and the findings table from it): the declarations are plain data, and the functions
they name import the analysis modules, pandas and the figures inside their bodies
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
    """Every declaration of this package's folders, found by scanning them (a folder added here is found:
    nothing names it by hand), in :data:`ORDER`; each is also bound here by the name its folder gives it
    (``registry.DLA``), and what it writes is recorded for the run layout (:mod:`compose_lens.core.outputs`)."""
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
