"""One model as its registered analyses read it, and how their results are computed, written and read back.

:class:`Context` holds what several analyses of one model share, made once; :func:`compute` runs a
declaration of :mod:`compose_lens.registry` over it, :func:`write` puts its :class:`~compose_lens.registry.Result`
into a folder (tables as CSV with a provenance JSON beside each that records the settings, documents as
JSON, figures under ``figures/``), :func:`read` rebuilds it from such a folder where it was made with the
same settings, seed and configuration, and :func:`obtain` does the one or the other (the report).
"""

from __future__ import annotations

import contextlib
import functools
import json
from pathlib import Path
from typing import Any, Iterator

import pandas as pd

from compose_lens import plots, runs
from compose_lens.analysis import fourier, locate
from compose_lens.errors import ComposeLensError
from compose_lens.files import load_json
from compose_lens.provenance import provenance
from compose_lens.registry import FIGURES, Analysis, Result
from compose_lens.runs import write_document, write_table
from compose_lens.subject import Subject


def fourier_plan(loaded: Subject, seed: int) -> tuple[locate.Location, locate.FourierSubject]:
    """Locate the circuit and choose the MLP to analyse, refusing (one line) a model whose MLP the
    Fourier grids cannot read, before any table is made: a few seconds, not minutes."""
    model, config, split = loaded.model, loaded.config, loaded.split
    location = locate.locate(model, config, split, seed)
    adders = location.candidates[location.candidates["role"] == "adder"]
    subject = locate.fourier_subject(model, config, split, seed, adder=location.adder, candidates=adders)
    if subject.layer is None:
        raise ComposeLensError(f"{loaded.source}: {subject.note}; the Fourier analysis has nothing to read")
    fourier.check_readout_layer(config, subject.layer)
    return location, subject


class Context:
    """One model as its analyses read it, with what they share made once.

    ``loaded``: the model on the forwards the analyses use (:func:`compose_lens.runs.for_analyses`);
    ``plan``: the located circuit and the Fourier subject (:func:`fourier_plan`); ``heads``: the binder
    and router the probes read. Inside ``with context:`` every operand grid is built once
    (:func:`compose_lens.analysis.fourier.shared_grids`): the summary, the Fourier tables, the
    same-MLP features and the ablation's frequency groups read the same constant-operand grid.
    ``renderer``: where figures are drawn (:class:`compose_lens.plots.Renderer`)."""

    def __init__(self, loaded: Subject, seed: int = 0, renderer: plots.Renderer | None = None):
        self.loaded, self.seed = runs.for_analyses(loaded), seed
        self.renderer = renderer or plots.Renderer()
        self._open = contextlib.ExitStack()

    model = property(lambda self: self.loaded.model)
    config = property(lambda self: self.loaded.config)
    split = property(lambda self: self.loaded.split)

    @functools.cached_property
    def plan(self) -> tuple[locate.Location, locate.FourierSubject]:
        return fourier_plan(self.loaded, self.seed)

    @functools.cached_property
    def heads(self):
        return locate.circuit_heads(self.model, self.config, self.split, self.seed, location=self.plan[0])

    def record(self, settings: dict | None = None) -> dict:
        """The provenance of the files written from this context (with the analysis's settings)."""
        extra = {} if settings is None else {"settings": settings}
        return provenance(self.config, self.seed, self.loaded.source, **extra)

    def __enter__(self) -> Context:
        self._open.enter_context(fourier.shared_grids())
        return self

    def __exit__(self, *exc) -> None:
        self._open.close()


def compute(analysis: Analysis, context: Context, settings: dict | None = None) -> Result:
    """``analysis`` of the context's model with ``settings`` (the defaults where not given)."""
    return analysis.compute(context, analysis.with_settings(settings))


def write(analysis: Analysis, result: Result, folder: Path, context: Context, settings: dict | None = None,
          fmt: str = "png") -> None:
    """The result's tables, documents and figures into ``folder`` (figures under ``folder/figures``),
    each with the provenance of ``context`` and the settings."""
    folder.mkdir(parents=True, exist_ok=True)
    record = context.record(analysis.with_settings(settings))
    for stem, table in result.tables.items():
        write_table(table, folder / f"{stem}.csv", record)
    for stem, document in result.documents.items():
        write_document(document, folder / f"{stem}.json", record)
    if result.figures or result.drawn:
        (folder / FIGURES).mkdir(exist_ok=True)
    for stem, figure, dpi in result.drawn:
        plots.save(figure, None, folder / FIGURES / stem, dpi=dpi, fmt=fmt)
    for stem, draw, numbers, dpi in result.figures:
        context.renderer.save(draw, *numbers, path=folder / FIGURES / stem, dpi=dpi, fmt=fmt)


def _same(a: Any, b: Any) -> bool:
    return json.loads(json.dumps(a, default=str)) == json.loads(json.dumps(b, default=str))


def _made_alike(record: Any, context: Context, settings: dict) -> bool:
    return (isinstance(record, dict) and record.get("seed") == context.seed
            and _same(record.get("config"), context.config.to_dict()) and _same(record.get("settings"), settings))


def read(analysis: Analysis, folder: Path, context: Context, settings: dict | None = None) -> Result | None:
    """The result saved in ``folder``, if every table and document of ``analysis`` is there and was
    made with the same settings, seed and configuration; else None. (Facts and figures are not read
    back: the report draws its own.)"""
    settings = analysis.with_settings(settings)
    if not analysis.tables and not analysis.documents:
        return None
    result = Result()
    try:
        for stem in analysis.tables:
            if not _made_alike(load_json(folder / f"{stem}.provenance.json"), context, settings):
                return None
            result.tables[stem] = pd.read_csv(folder / f"{stem}.csv")
        for stem in analysis.documents:
            document = load_json(folder / f"{stem}.json")
            if not _made_alike(document.pop("provenance", None), context, settings):
                return None
            result.documents[stem] = document
    except (OSError, ValueError, ComposeLensError, pd.errors.ParserError):
        return None
    return result


def obtain(analysis: Analysis, context: Context, folder: Path, settings: dict | None = None) -> Result:
    """The saved result in ``folder`` (:func:`read`), else computed now and saved there."""
    found = read(analysis, folder, context, settings)
    if found is not None:
        return found
    result = compute(analysis, context, settings)
    write(analysis, result, folder, context, settings)
    context.renderer.wait()
    return result


@contextlib.contextmanager
def opened(loaded: Subject, seed: int = 0, renderer: plots.Renderer | None = None) -> Iterator[Context]:
    """``with opened(loaded) as context:`` a :class:`Context`, its shared grids open."""
    with Context(loaded, seed, renderer) as context:
        yield context
