"""The analysis registry: one declaration per analysis, read by ``analyze``, the report, the CLI and the API.

An analysis of one model, or of a run's checkpoints (``of="run"``: ``dynamics``, ``early_jump``, ``llc``), is declared once, as an :class:`Analysis` (:mod:`.analysis` says what
one holds) in a module of this package, one per analysis or family (``registry/dla.py``,
``registry/patching.py``, ...); :data:`ANALYSES` lists them in the order ``analyze`` runs them.
A declaration holds:

* its **name** (``analyze`` writes its files into ``OUT/<name>/``, the report reads and keeps them in
  ``RUN_DIR/results/<name>/``) and the **title** of its report section;
* its **settings** with their defaults, in this one place: ``analyze``, the report and its own command
  run it with the same ones, and every file it writes records them (``settings`` in the provenance);
* its **computation**, ``compute(context, settings) -> Result``, over a per-model
  :class:`~compose_lens.context.Context`: what several analyses of one model share (the
  loaded model on the forwards the analyses use, the located circuit, the Fourier subject, the
  probe heads, the constant-operand grid) is made there once per model;
* the **tables** and **documents** its :class:`Result` holds (written as ``<stem>.csv`` with a
  ``<stem>.provenance.json`` beside it, and ``<stem>.json``), from which
  :func:`~compose_lens.context.read` rebuilds it, and its **figures**, drawn by
  :mod:`compose_lens.plots` (by a worker, where ``analyze`` has one);
* optionally: whether it **applies** to a model (``applies(config)``; ``analyze`` and the report
  leave it out where it does not: the variant reading on the study's task), its report **section**
  (``section(inputs, result, settings) -> HTML``, placed after the section ``report_after`` names), the
  **findings** ``analyze`` prints (summary key, what it measures, what the circuit predicts), its own
  **command** (``compose-lens <command> MODEL --out DIR``, with the ``options`` that set its settings:
  integers, choices, a pairs file, or values after MODEL), a settings check (``validate``) and a memory ``guard``, the lines
  its command prints (``describe``), and the **exports** of its module that are public API
  (``compose_lens.<name>``).

Nothing else names an analysis: :mod:`compose_lens.context` runs a declaration (its guards on every
path: the command, ``analyze``, the report, :func:`compose_lens.context.run_analysis`), the report makes
each registered section with :func:`~compose_lens.context.obtain` (the saved files where they were made
with the same settings, seed and configuration, else computed now and saved), the command line builds
every analysis command and the findings table from the declarations, and ``compose_lens`` resolves the
exports. ``docs/extending.md`` walks through adding one (direct logit attribution, ``dla``).

**This module is imported by the command line before torch** (it builds the parser's registered
commands and the findings table from it): the declarations are plain data, and the functions
they name import the analysis modules, pandas and the figures inside their bodies
(``tests/unit/test_layout.py``, ``LAZY_ALLOWED``). It imports nothing of the report (its sections write
tables with :func:`compose_lens.markup.html_table`): the report reads the registry, not the other way.
"""

from __future__ import annotations

from compose_lens.registry.analysis import FIGURES, Analysis, Finding, Option, Result, by_name, sections
from compose_lens.registry.probes import PROBES
from compose_lens.registry.qk import QK
from compose_lens.registry.fourier import FOURIER
from compose_lens.registry.same_mlp import SAME_MLP
from compose_lens.registry.dla import DLA
from compose_lens.registry.ablation import ABLATION
from compose_lens.registry.patching import HEAD_PATCHING, PATCHING, PATH_PATCHING
from compose_lens.registry.circuit import CIRCUIT
from compose_lens.registry.das import DAS
from compose_lens.registry.variant import VARIANT
from compose_lens.registry.gradient import GRADIENT
from compose_lens.registry.entropy import ENTROPY
from compose_lens.registry.attention import ATTENTION
from compose_lens.registry.dynamics import DYNAMICS
from compose_lens.registry.llc import LLC
from compose_lens.registry.early_jump import EARLY_JUMP
from compose_lens.registry.modularity import MODULARITY

ANALYSES: tuple[Analysis, ...] = (PROBES, QK, ENTROPY, FOURIER, SAME_MLP, DLA, ABLATION, PATCHING, CIRCUIT, VARIANT,
                                  GRADIENT, DAS, HEAD_PATCHING, PATH_PATCHING, ATTENTION, MODULARITY,
                                  DYNAMICS, EARLY_JUMP, LLC)


# what the rest of the package reads here: the declarations' vocabulary and every declaration
__all__ = ["ANALYSES", "FIGURES", "Analysis", "Finding", "Option", "Result", "by_name", "sections", "PROBES", "QK",
           "FOURIER", "SAME_MLP", "DLA", "ABLATION", "PATCHING", "HEAD_PATCHING", "PATH_PATCHING", "CIRCUIT", "DAS",
           "VARIANT", "GRADIENT", "ENTROPY", "ATTENTION", "MODULARITY", "DYNAMICS", "EARLY_JUMP", "LLC"]
