"""The analyses' one door: one model as its registered analyses read it, and how their results are
computed, written and read back.

:class:`Context` holds what several analyses of one model share; :func:`compute` runs a declaration of
:mod:`compose_lens.registry` over it (its memory guard first, on every path); :func:`write` puts its
:class:`~compose_lens.registry.Result` into a folder (tables as CSV with a provenance JSON beside each that
records the settings, documents as JSON, figures under ``figures/``); :func:`read` rebuilds it from such a
folder where it was made with the same settings, seed and configuration; :func:`obtain` does the one or the
other (the report, the figure scripts' dynamics). :func:`write_analysis` runs every registered analysis into
``OUT/<name>/`` (``compose-lens analyze``). An analysis of a run's checkpoints (``of="run"``: the dynamics, the
early jump, the LLC) runs over a :class:`RunContext` instead.

The registry declares; this module runs. Nothing else computes a registered analysis, so its command,
``analyze`` and the report write the same files (``tests/unit/test_layout.py`` holds them to it).
"""

from __future__ import annotations

import contextlib
import functools
import json
from pathlib import Path
from typing import Any

import pandas as pd

from compose_lens import registry
from compose_lens.core import progress as progress_lines
from compose_lens.training import runs
from compose_lens.analysis import fourier, locate
from compose_lens.analysis.activations import torch_threads
from compose_lens.core.errors import ArgumentTypeError, ComposeLensError
from compose_lens.core.files import atomic_path, load_json
from compose_lens.core.provenance import provenance
from compose_lens.registry import FIGURES, Analysis, Result
from compose_lens.training.runs import write_document, write_table
from compose_lens.core.coverage import peek_run_config
from compose_lens.data.safety import read_marker
from compose_lens.training.subject import Subject, for_analyses
from compose_lens.views.drawing import Renderer


def fourier_plan(loaded: Subject, seed: int) -> tuple[locate.Location, locate.FourierSubject]:
    """Locate the circuit and choose the MLP to analyse, refusing (one line) a model whose MLP the
    Fourier grids cannot read, before any table is made: a few seconds, not minutes."""
    location = locate.locate(loaded, seed)
    adders = location.candidates[location.candidates["role"] == "adder"]
    subject = locate.fourier_subject(loaded, seed, adder=location.adder, candidates=adders)
    if subject.layer is None:
        raise ComposeLensError(f"{loaded.source}: {subject.note}; the Fourier analysis has nothing to read")
    fourier.check_readout_layer(loaded.config, subject.layer)
    return location, subject


class Context:
    """One model as its analyses read it, with what they share made once.

    ``loaded``: the model on the forwards the analyses use (:func:`compose_lens.training.subject.for_analyses`);
    ``plan``: the located circuit and the Fourier subject (:func:`fourier_plan`); ``heads``: the binder
    and router the probes read. Inside ``with context:`` every operand grid is built once
    (:func:`compose_lens.analysis.fourier.shared_grids`) and shared by the analyses that read it."""

    def __init__(self, loaded: Subject, seed: int = 0, renderer: Renderer | None = None):
        self.loaded, self.seed = for_analyses(loaded), seed
        self.renderer = renderer or Renderer()
        self._open = contextlib.ExitStack()

    model = property(lambda self: self.loaded.model)
    config = property(lambda self: self.loaded.config)
    split = property(lambda self: self.loaded.split)

    @functools.cached_property
    def plan(self) -> tuple[locate.Location, locate.FourierSubject]:
        return fourier_plan(self.loaded, self.seed)

    @functools.cached_property
    def heads(self):
        return locate.circuit_heads(self.loaded, self.seed, location=self.plan[0])

    def record(self, settings: dict | None = None) -> dict:
        """The provenance of the files written from this context (with the analysis's settings)."""
        return _record(self.config, self.seed, self.loaded.source, settings)

    def __enter__(self) -> Context:
        self._open.enter_context(fourier.shared_grids())
        return self

    def __exit__(self, *exc) -> None:
        self._open.close()


class RunContext:
    """A run's checkpoints as a run analysis reads them (``Analysis.of == "run"``).

    ``source``: a run directory, its ``checkpoints/`` folder, a folder of the study's ``step_N.pth``
    files, or one model (``paper``: the LLC reads one model as a run of one checkpoint); ``split``: a
    split file (None: the run's own); ``device``: where its checkpoints run; ``progress``: a progress bar
    over them; ``previous``: the folder of an earlier result of the same analysis, which an ``update``
    keeps and extends (the dynamics of a growing run). ``config``: the run's configuration, read from its
    ``config.json`` without loading weights (the study's for a folder of ``.pth`` files)."""

    def __init__(self, source: str | Path, split: str | Path | None = None, seed: int = 0, device: str = "cpu",
                 progress: bool = True, previous: Path | None = None, renderer: Renderer | None = None):
        self.source, self.split, self.seed, self.device = source, split, seed, device
        self.progress, self.previous = progress, previous
        self.renderer = renderer or Renderer()

    @functools.cached_property
    def config(self):
        config = peek_run_config(self.source)  # a run's or a model's config.json, no weights read
        return config if config is not None else runs.find_checkpoints(self.source, self.split)[1]

    def record(self, settings: dict | None = None) -> dict:
        return _record(self.config, self.seed, str(self.source), settings)


def _record(config, seed: int, source: str, settings: dict | None) -> dict:
    return provenance(config, seed, source, **({} if settings is None else {"settings": settings}))


def guard(analysis: Analysis, config, settings: dict | None = None) -> dict:
    """``analysis``'s settings (the defaults where not given), refused in one line where they cannot be
    run on a model of ``config`` (its declared ``validate`` and memory ``guard``)."""
    settings = analysis.with_settings(settings)
    if analysis.validate is not None:
        analysis.validate(settings)
    if analysis.guard is not None:
        analysis.guard(settings, config)
    return settings


def compute(analysis: Analysis, context: Context | RunContext, settings: dict | None = None, figures: bool = True) -> Result:
    """``analysis`` of the context's model with ``settings`` (the defaults where not given), after its guard;
    ``figures=False``: the numbers only, no figure drawn (``compare`` reads no figure)."""
    settings = guard(analysis, context.config, settings)
    result = analysis.compute(context, settings)
    return _with_figures(analysis, result, context, settings) if figures else result


def _with_figures(analysis: Analysis, result: Result, context: Context | RunContext, settings: dict) -> Result:
    """``result`` with the figures its declaration draws of its tables and documents (``Analysis.draw``)."""
    if analysis.draw is not None:
        result.figures = analysis.draw(context, result, settings)
    return result


def write(analysis: Analysis, result: Result, folder: Path, context: Context | RunContext, settings: dict | None = None,
          fmt: str = "png") -> None:
    """The result's tables, documents, figures and pages into ``folder`` (figures and pages under ``folder/figures``),
    each with the provenance of ``context`` and the settings."""
    folder.mkdir(parents=True, exist_ok=True)
    record = {**context.record(analysis.with_settings(settings)), **result.provenance}
    for stem, table in result.tables.items():
        write_table(table, folder / f"{stem}.csv", record)
    for stem, document in result.documents.items():  # which tables this result had (read takes those back)
        write_document(document, folder / f"{stem}.json", {**record, "tables": sorted(result.tables)})
    if result.figures:
        (folder / FIGURES).mkdir(exist_ok=True)
    for stem, draw, numbers, dpi in result.figures:  # here, the drawing the report shows too (Result.figure)
        if dpi is None:  # an offline page, <stem>.html: its HTML, or (its HTML, the part a report section folds in)
            with atomic_path(folder / FIGURES / stem) as tmp:
                page = result.figure(stem)
                tmp.write_text(page if isinstance(page, str) else page[0], encoding="utf-8")
            continue
        how = (draw, *numbers) if context.renderer.background else (result.figure, stem)
        context.renderer.save(*how, path=folder / FIGURES / stem, dpi=dpi, fmt=fmt)


def _same(a: Any, b: Any) -> bool:
    return json.loads(json.dumps(a, default=str)) == json.loads(json.dumps(b, default=str))


def _made_alike(record: Any, context: Context, settings: dict) -> bool:
    return (isinstance(record, dict) and record.get("seed") == context.seed
            and _same(record.get("config"), context.config.to_dict()) and _same(record.get("settings"), settings))


def read(analysis: Analysis, folder: Path, context: Context, settings: dict | None = None) -> Result | None:
    """The result saved in ``folder`` where every document and every table it had (those its documents'
    provenance lists: same-MLP's competence table alone where the model answers no variable prompt; else every
    declared one) is there, made with the same settings, seed and configuration; else None. Facts and figures
    are not read back."""
    settings = analysis.with_settings(settings)
    if not analysis.tables and not analysis.documents:
        return None
    result, tables = Result(), set(analysis.tables)
    try:
        for stem in analysis.documents:
            document = load_json(folder / f"{stem}.json")
            record = document.pop("provenance", None)
            if not _made_alike(record, context, settings):
                return None
            if isinstance(record.get("tables"), list):
                tables &= set(record["tables"])
            result.documents[stem] = document
        for stem in analysis.tables:
            if stem not in tables:
                continue
            if not _made_alike(load_json(folder / f"{stem}.provenance.json"), context, settings):
                return None
            result.tables[stem] = pd.read_csv(folder / f"{stem}.csv")
    except (OSError, ValueError, ComposeLensError, pd.errors.ParserError):
        return None
    return result


def obtain(analysis: Analysis, context: Context | RunContext, folder: Path, settings: dict | None = None) -> Result:
    """The saved result in ``folder`` where it serves (:func:`read`, or the declaration's ``saved``), its
    figures drawn, else computed now and saved there. An analysis with a setting ``update`` is computed from
    nothing where the saved result cannot be extended (another run's, other settings), and ``folder`` is marked
    as compose-lens's, so that its command's ``--update`` may extend it later."""
    settings = analysis.with_settings(settings)
    found = analysis.saved(context, folder, settings) if analysis.saved else read(analysis, folder, context, settings)
    if found is not None:
        return _with_figures(analysis, found, context, settings)
    try:
        result = compute(analysis, context, settings)
    except ComposeLensError:
        if not settings.get("update"):
            raise
        settings = {**settings, "update": False}  # saved with other settings, or another run's: made again
        result = compute(analysis, context, settings)
    write(analysis, result, folder, context, settings)
    context.renderer.wait()
    if "update" in analysis.settings and read_marker(folder) is None:
        runs.mark_written(folder, analysis.command)
    return result


def run_analysis(analysis: Analysis | str, loaded: Subject | RunContext, out: Path | str | None = None,
                 seed: int = 0, fmt: str = "png", **settings) -> Result:
    """One registered analysis of one model (its declaration, or its name: ``"patching"``), with
    ``settings`` over its defaults: guarded, computed and, with ``out``, written there as its command
    writes it (tables, documents, ``figures/``). What ``compose-lens <command>`` runs, in Python::

        from compose_lens import load_subject, run_analysis
        run_analysis("patching", load_subject("paper"), n_pairs=200).tables["patching"]

    An analysis of a run's checkpoints takes a :class:`RunContext` (its seed is the context's)::

        run_analysis("dynamics", RunContext("runs/mine"), stride=4).documents["phases"]
    """
    if isinstance(analysis, str):
        analysis = registry.by_name(registry.ANALYSES, analysis)
    if not isinstance(analysis, Analysis):
        raise ArgumentTypeError(f"analysis={analysis!r}: give a registered analysis's name, e.g. 'patching' "
                                f"(registered: {', '.join(a.name for a in registry.ANALYSES)})")
    if not isinstance(loaded, (Subject, RunContext)):
        hint = (f"load_subject({loaded!r})" if isinstance(loaded, (str, Path)) and analysis.of == "model" else
                f"RunContext({loaded!r})" if isinstance(loaded, (str, Path)) else
                "load_subject(...)" if analysis.of == "model" else "RunContext(...)")
        raise ArgumentTypeError(f"run_analysis: the model is {type(loaded).__name__}, not a "
                                f"{'Subject' if analysis.of == 'model' else 'RunContext'}; give {hint}")
    if out is not None and not isinstance(out, (str, Path)):
        raise ArgumentTypeError(f"out={out!r}: give a folder's path, or None to write nothing")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ArgumentTypeError(f"seed={seed!r}: give an integer")
    if (analysis.of == "run") != isinstance(loaded, RunContext):
        raise ComposeLensError(f"analysis {analysis.name} reads {'a run' if analysis.of == 'run' else 'one model'}: "
                               f"give it {'a RunContext' if analysis.of == 'run' else 'a Subject (load_subject)'}")
    with contextlib.nullcontext(loaded) if isinstance(loaded, RunContext) else Context(loaded, seed) as ctx:
        result = compute(analysis, ctx, settings)
        if out is not None:
            write(analysis, result, Path(out), ctx, settings, fmt=fmt)
            ctx.renderer.wait()
    return result


def write_analysis(loaded: Subject, out: Path, seed: int = 0, causal: bool = True, fmt: str = "png",
                   progress: bool = False, renderer: Renderer | None = None) -> dict:
    """Write every registered analysis of one model into ``out/<name>/`` and ``out/summary.json`` (every
    analysis's facts: the probe and Fourier measures, the key frequencies, the same-MLP verdict); return
    the summary.

    ``causal=False`` leaves out the causal analyses (ablation, patching, circuit); an analysis that does
    not apply to the model (:meth:`~compose_lens.registry.Analysis.reads`), or that runs by its own command
    only (``in_analyze=False``: DAS), is left out. Every guard runs first: a refusal comes before minutes of
    work. ``progress``: a progress bar over the analyses. ``renderer``: where the figures are drawn
    (:class:`compose_lens.views.drawing.Renderer`; default: here, as each analysis finishes); with a
    background one the analyses run on one torch thread, beside the figure worker (two threads made the
    same-MLP step 2.6x slower), which can change a table's last digits (each records its ``torch_threads``).
    Every file is written when this returns.
    """
    renderer = renderer or Renderer()
    steps = [a for a in registry.ANALYSES if a.of == "model" and a.in_analyze and (causal or not a.causal) and a.reads(loaded.config)]
    for analysis in steps:
        guard(analysis, loaded.config)
    with Context(loaded, seed, renderer) as ctx:
        with torch_threads(1 if renderer.background else None):  # the summary's facts and record too
            record = ctx.record()
            location = ctx.plan[0]
            summary: dict = {"learned": location.learned.to_dict() if location.learned else None,
                             "located": {r.role: r.component for r in location.roles()},
                             "roles": {r.role: r.line() for r in location.roles()}}
            bar = progress_lines.bar(steps, desc="analyze", unit="analysis", wanted=progress)
            for analysis in bar:
                bar.set_postfix_str(analysis.name)
                result = compute(analysis, ctx)
                write(analysis, result, out / analysis.name, ctx, fmt=fmt)
                summary.update(result.facts)
        renderer.wait()
    write_document(summary, out / "summary.json", record)
    return summary
