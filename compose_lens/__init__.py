"""compose-lens: mechanistic interpretability of compositional arithmetic.

The package reproduces and extends "Assign and Add" (arXiv 2605.31497): a 2-layer,
single-head transformer that learns modular addition and in-context variable
assignment, then composes them. Its folders follow the flow of the work, and
imports only point forward along it::

    config, provenance   settings, errors, where a result came from
    data/                task (tokens, readable form, kinds), split,
                         pools (as data), sampler (batches, pools), variants, pairs (yours)
    model/               tl (the only module that imports TransformerLens), weights, fastpath
    runs                 run and checkpoint directories: every file read or written
    train, evaluate      the recipe of the study, accuracies
    analysis/            probes, Fourier, patching, ablation, same MLP, attention, dynamics: numbers only
    views/               every figure (matplotlib), a module per subject
    attention_view       attention patterns as circuitsvis views that open offline
    report/              the offline HTML report and the analysis output folders
    sweep                sweeps over f, r or any setting, local or on Ray
    cli/                 the compose-lens command

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
import sys
import types
from typing import Any

from compose_lens import registry as _registry  # plain declarations: no torch
from compose_lens.provenance import VERSION as __version__

# public name -> the module that defines it ("module:name" where the module calls it otherwise)
_EXPORTS = {
    # configuration and errors
    "RunConfig": "compose_lens.config", "TaskConfig": "compose_lens.config",
    "ModelConfig": "compose_lens.config", "TrainConfig": "compose_lens.config",
    "ComposeLensError": "compose_lens.errors", "ArgumentError": "compose_lens.errors",
    "ArgumentTypeError": "compose_lens.errors", "code_version": "compose_lens.provenance",
    # the task and its data
    "parse_sequence": "compose_lens.data.task", "to_text": "compose_lens.data.task",
    "decode": "compose_lens.data.task", "Split": "compose_lens.data.split",
    "make_pool": "compose_lens.data.sampler", "make_pools": "compose_lens.data.sampler",
    "POOL_NAMES": "compose_lens.data.sampler", "TrainingSampler": "compose_lens.data.sampler",
    "SequenceKind": "compose_lens.data.task", "Pool": "compose_lens.data.pools",
    # models, runs, training and evaluation
    "load_model": "compose_lens.runs", "load_checkpoint": "compose_lens.runs", "Subject": "compose_lens.subject", "load_subject": "compose_lens.runs",
    "Forward": "compose_lens.forward", "Site": "compose_lens.forward",
    "TaskDeclaration": "compose_lens.declaration", "answer_logits": "compose_lens.evaluate",
    "locate_circuit": "compose_lens.analysis.locate:locate", "compare_models": "compose_lens.compare:compare",
    "find_checkpoints": "compose_lens.runs", "Trainer": "compose_lens.train", "train": "compose_lens.train",
    "pool_accuracies": "compose_lens.evaluate", "exhaustive_accuracies": "compose_lens.evaluate",
    "boot_model": "compose_lens.model.tl:boot", "model_parameters": "compose_lens.model.tl:parameters",
    # the analyses: the registry; each registered analysis's public names are its declaration's ``exports``
    # (:func:`_registered`), never listed here
    "ANALYSES": "compose_lens.registry",
    "classify_run": "compose_lens.outcome", "what_it_learned": "compose_lens.evaluate:learned",
    # TransformerLens's test_prompt and detect_head, on the study's sequences (TransformerLens's own refuse them)
    "test_prompt": "compose_lens.analysis.exploratory", "detect_head": "compose_lens.analysis.exploratory",
    # your own prompt pairs (patching_table / discover_circuit take pairs= and metric=)
    "PromptPairs": "compose_lens.data.pairs", "read_pairs": "compose_lens.data.pairs",
    # figures (matplotlib); an analysis's own figures are among its exports
    "png_bytes": "compose_lens.views.drawing", "plot_style": "compose_lens.figure_style:style",
    "FigureStyle": "compose_lens.figure_style", "fit_figure": "compose_lens.figure_style:fit",
    # files and pages
    "build_report": "compose_lens.report", "write_analysis": "compose_lens.context",
    "run_analysis": "compose_lens.context",
    "RunContext": "compose_lens.context",
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


class _Package(types.ModuleType):
    """This package's module object: importing a submodule named like a public name (``compose_lens.train``,
    which any use of ``cl.Trainer`` imports) does not replace that name (``cl.train``, the function) with
    the submodule, as Python's import would; ``from compose_lens.train import Trainer`` is unchanged."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _EXPORTS and isinstance(value, types.ModuleType) and value.__name__ == f"{__name__}.{name}":
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
