"""compose-lens: mechanistic interpretability of compositional arithmetic.

The package reproduces and extends "Assign and Add" (arXiv 2605.31497): a 2-layer,
single-head transformer that learns modular addition and in-context variable
assignment, then composes them. Its folders are the layers of the work, in the order below;
a module imports from its own folder or an earlier one, never a later one. This list is the one
description of the architecture: ``tests/unit/test_layout.py`` reads it, and fails on a folder
it does not name or an import that points back up::

    core/        settings, errors, files, provenance, the study's constants, statistics, progress
    data/        the task (tokens, readable form, kinds), split, pools, sampler, variants,
                 prompt pairs and token roles, your task's declaration, the memory guard
    model/       tl (the only module that imports TransformerLens), weights, the fast tables,
                 the one Forward every analysis computes the model through
    training/    run and checkpoint files, the Subject, the study's recipe, evaluation, phases
    analysis/    the measures several analyses share: probes, Fourier, the locator, activations
    views/       what every figure needs (palette, heatmap, styles), training and sweep figures
    registry/    every analysis, one folder each: its numbers, figures, declaration (command,
                 files, report section) and tests; a new analysis is one folder here (answer_lens/)
    report/      the offline HTML report
    sweep/       sweeps over f, r or any setting: local, Ray or SLURM
    cli/         the compose-lens command

The names below are the public API, e.g.::

    import compose_lens as cl
    loaded = cl.load_model("paper")
    tokens = cl.parse_sequence(loaded.config.task, "b=7, e=5, b+23=?")

They are imported on first use (PEP 562), so ``import compose_lens`` (and the
command line's ``--help``) does not pay for torch and TransformerLens until a name
that needs them is used. Everything else is internal and may move; the walkthrough
notebook (``experiments/walkthrough.ipynb``) uses only these names.
"""

from __future__ import annotations

import importlib
from typing import Any

from compose_lens import registry as _registry  # plain declarations: no torch
from compose_lens.core.provenance import VERSION as __version__

# public name -> the module that defines it ("module:name" where the module calls it otherwise)
_EXPORTS = {
    # configuration and errors
    "RunConfig": "compose_lens.core.config", "TaskConfig": "compose_lens.core.config",
    "ModelConfig": "compose_lens.core.config", "TrainConfig": "compose_lens.core.config",
    "ComposeLensError": "compose_lens.core.errors", "ArgumentError": "compose_lens.core.errors",
    "ArgumentTypeError": "compose_lens.core.errors", "code_version": "compose_lens.core.provenance",
    # the task and its data
    "parse_sequence": "compose_lens.data.task", "to_text": "compose_lens.data.task",
    "decode": "compose_lens.data.task", "Split": "compose_lens.data.split",
    "make_pool": "compose_lens.data.sampler", "make_pools": "compose_lens.data.sampler",
    "POOL_NAMES": "compose_lens.data.sampler", "TrainingSampler": "compose_lens.data.sampler",
    "SequenceKind": "compose_lens.data.task", "Pool": "compose_lens.data.pools",
    # models, runs, training and evaluation
    "load_model": "compose_lens.training.subject", "load_checkpoint": "compose_lens.training.subject", "Subject": "compose_lens.training.subject",
    "load_subject": "compose_lens.training.subject",
    "Forward": "compose_lens.model.forward", "Site": "compose_lens.model.forward",
    "TaskDeclaration": "compose_lens.data.declaration", "answer_logits": "compose_lens.training.evaluate",
    "locate_circuit": "compose_lens.analysis.locate:locate", "compare_models": "compose_lens.report.compare:compare",
    "find_checkpoints": "compose_lens.training.runs", "Trainer": "compose_lens.training.train", "train": "compose_lens.training.train",
    "pool_accuracies": "compose_lens.training.evaluate", "exhaustive_accuracies": "compose_lens.training.evaluate",
    "boot_model": "compose_lens.model.tl:boot", "model_parameters": "compose_lens.model.tl:parameters",
    # the analyses: the registry; each registered analysis's public names are its declaration's ``exports``
    # (:func:`_registered`), never listed here
    "ANALYSES": "compose_lens.registry",
    "classify_run": "compose_lens.training.outcome", "what_it_learned": "compose_lens.training.evaluate:learned",
    # TransformerLens's test_prompt and detect_head, on the study's sequences (TransformerLens's own refuse them)
    "test_prompt": "compose_lens.analysis.exploratory", "detect_head": "compose_lens.analysis.exploratory",
    # your own prompt pairs (patching_table / discover_circuit take pairs= and metric=)
    "PromptPairs": "compose_lens.data.pairs", "read_pairs": "compose_lens.data.pairs",
    # figures (matplotlib); an analysis's own figures are among its exports
    "png_bytes": "compose_lens.views.drawing", "plot_style": "compose_lens.views.figure_style:style",
    "FigureStyle": "compose_lens.views.figure_style", "fit_figure": "compose_lens.views.figure_style:fit",
    # files and pages
    "build_report": "compose_lens.report", "write_analysis": "compose_lens.report.context",
    "run_analysis": "compose_lens.report.context",
    "RunContext": "compose_lens.report.context",
    "run_sweep": "compose_lens.sweep",
}


def _registered() -> dict[str, str]:
    """The public names the registered analyses declare (``Analysis.exports``), each to where it is defined:
    the declaration's module, or the ``module[:attribute]`` an export names after ``=``."""
    found = {}
    for analysis in _registry.ANALYSES:
        for export in analysis.exports:
            name, _, where = export.partition("=")
            found[name] = where or analysis.module
    return found


__all__ = ["__version__", *_EXPORTS, *_registered()]


def __getattr__(name: str) -> Any:
    found = _EXPORTS.get(name) or _registered().get(name)
    if found:
        module, _, attribute = found.partition(":")
        value = getattr(importlib.import_module(module), attribute or name)
        globals()[name] = value  # later uses skip this function
        return value
    raise AttributeError(f"module 'compose_lens' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
