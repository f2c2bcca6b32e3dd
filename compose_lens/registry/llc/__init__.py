"""The ``llc`` analysis: the local learning coefficient of every checkpoint of a run (or of one model),
estimated by SGLD with devinterp 2.0.1 (``pip install -e '.[methods]'``), beside the phases.

An analysis of a run's checkpoints (``of="run"``, like ``dynamics``): :mod:`.estimate` estimates,
:mod:`.figure` draws. ``compose-lens llc RUN --out DIR`` writes ``llc.csv`` (one row per checkpoint, with
its sanity checks), ``llc_traces.csv`` (every chain's sampled losses), ``llc_phases.csv`` (the mean LLC
between phase onsets, where the run has phases), ``llc.json`` and ``figures/llc.png`` (the phase onsets
marked: from ``--phases``, the run's ``results/phases.json`` or its ``metrics.jsonl``).
"""

from __future__ import annotations

import sys

from compose_lens.registry.analysis import Analysis, Option, Result


def _estimator_settings(settings: dict, seed: int):
    from compose_lens.registry.llc.estimate import LlcSettings

    return LlcSettings(**{k: settings[k] for k in ("epsilon", "gamma", "n_beta", "chains", "draws", "burnin",
                                                   "batch_size", "n_sequences", "component")}, seed=seed)


def _llc(ctx, settings: dict) -> Result:
    from compose_lens.training import runs
    from compose_lens.registry.llc import estimate as llc

    estimator = _estimator_settings(settings, ctx.seed)
    phases, phases_from = llc.run_phases(ctx.source, settings["phases"])
    for folder in runs.checkpoints_without_weights(ctx.source):  # said, not skipped without a word
        sys.stderr.write(f"compose-lens: warning: {folder}: no {runs.WEIGHTS_FILE}, so this checkpoint is left "
                         f"out of the estimates\n")
    table, traces = llc.llc_over_checkpoints(ctx.source, ctx.split, estimator, list(settings["steps"]) or None,
                                             settings["stride"], include_final=not settings["steps"],
                                             progress=ctx.progress, device=ctx.device)
    by_phase = llc.phase_means(table, phases)
    return Result(tables={"llc": table, "llc_traces": traces, **({} if by_phase.empty else {"llc_phases": by_phase})},
                  documents={"llc": {"source": str(ctx.source), "settings": llc.settings_dict(estimator),
                                     "phases": phases, "phases_from": phases_from,
                                     "healthy": int(table["healthy"].sum()), "estimates": len(table)}})


def _llc_figures(ctx, result: Result, settings: dict) -> list:
    from compose_lens.registry.llc.figure import llc_figure

    doc = result.documents["llc"]
    of = "" if settings["component"] is None else f" of {settings['component']}"
    title = f"local learning coefficient{of}: {doc['source']}"
    return [("llc", llc_figure, (result.tables["llc"], doc["phases"], title), 110)]


def _check(settings: dict, config) -> None:
    """Memory, SGLD's settings, devinterp and the component, before anything is loaded or written."""
    from compose_lens.registry.llc.estimate import check_component, require_devinterp
    from compose_lens.data.safety import activation_bytes, check_sizes

    check_sizes(config, {f"--n-sequences {settings['n_sequences']}": (settings["n_sequences"], 1),  # drawn once, kept
                         f"--batch-size {settings['batch_size']}": (settings["batch_size"], 1,
                                                                    activation_bytes(config, True))})
    _estimator_settings(settings, 0).check()
    require_devinterp()
    if settings["component"] is not None:
        check_component(settings["component"], config.model)


def _lines(result: Result) -> list[str]:
    table, doc = result.tables["llc"], result.documents["llc"]
    shown = table[["step", "llc_mean", "llc_std", "train_loss", "problems"]]
    lines = shown.to_string(index=False, float_format=lambda v: f"{v:.4g}").splitlines()
    lines.append(f"phases: {doc['phases_from']}")
    if "llc_phases" in result.tables:
        lines += result.tables["llc_phases"].to_string(index=False, float_format=lambda v: f"{v:.4g}").splitlines()
    failed = int((~table["healthy"].astype(bool)).sum())
    if failed:
        lines.append(f"{failed} of {len(table)} estimates failed a sanity check (column 'problems'; see "
                     f"compose_lens.registry.llc.estimate)")
    return lines


LLC = Analysis(
    name="llc", title="Local learning coefficient over training", compute=_llc, of="run",
    settings={"epsilon": 1e-4, "gamma": 1000.0, "n_beta": None, "chains": 3, "draws": 150, "burnin": 0,
              "batch_size": 128, "n_sequences": 4096, "component": None, "phases": None, "steps": (), "stride": 1},
    figures=("llc",), draw=_llc_figures, module="compose_lens.registry.llc.estimate", tables=("llc", "llc_traces"),
    documents=("llc",),
    command="llc", help="local learning coefficient of every checkpoint (SGLD, devinterp), beside the phases",
    options=(Option("--phases", "phases", "a phases.json of `compose-lens dynamics` to mark (default: the run's own)",
                    kind=str, metavar="FILE"),
             Option("--steps", "steps", "only these checkpoints (default: all)", many=True, kind=int, metavar="STEP",
                    minimum=0),
             Option("--stride", "stride", "every K-th checkpoint"),
             Option("--component", "component", "the LLC of one component: SGLD moves only its weights, the rest "
                                                "held at the checkpoint (default: every trained weight)",
                    kind=str, metavar="blocks.L.headH|blocks.L.mlp"),
             Option("--epsilon", "epsilon", "SGLD step size"),
             Option("--gamma", "gamma", "localisation strength"),
             Option("--n-beta", "n_beta", "inverse temperature (default batch / ln batch)", kind=float),
             Option("--chains", "chains", "SGLD chains", minimum=2),
             Option("--draws", "draws", "draws per chain", minimum=8),
             Option("--burnin", "burnin", "burn-in steps", minimum=0),
             Option("--batch-size", "batch_size", "SGLD batch size", minimum=2),
             Option("--n-sequences", "n_sequences", "training sequences drawn for the estimate")),
    guard=_check, describe=_lines,
    exports=("estimate_llc", "llc_over_checkpoints", "LlcSettings"))
