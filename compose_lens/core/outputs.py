"""What the registered analyses write, by analysis: :mod:`compose_lens.registry` fills it as it finds
its declarations (at import: ``import compose_lens`` imports the registry), and
:func:`compose_lens.training.runs.run_layout` reads it. The run layout sits below the registry
(tests/unit/test_layout.py), so it learns the analyses' names here, from the declarations themselves,
never from a copy of them.
"""

from __future__ import annotations

# analysis name -> (the stems of the tables and documents the report saves into RUN/results/NAME/, or None
# for an analysis of a run's checkpoints; the stems of its figures, name patterns)
ANALYSIS_FILES: dict[str, tuple[tuple[str, ...] | None, tuple[str, ...]]] = {}


def own(name: str, results: tuple[str, ...] | None, figures: tuple[str, ...]) -> None:
    """Record what the analysis ``name`` writes: ``results``, its tables' and documents' stems (None: it reads
    a run's checkpoints, its files are not under RUN/results/NAME/), and ``figures``, its figures' stems."""
    ANALYSIS_FILES[name] = (None if results is None else tuple(results), tuple(figures))
