"""The ``dynamics`` analysis: every checkpoint of a run evaluated, and the three phases found.

An analysis of a run's checkpoints (``of="run"``): its compute takes a
:class:`compose_lens.report.context.RunContext` where a one-model analysis takes a
:class:`~compose_lens.report.context.Context`. :mod:`.checkpoints` holds the measures (the phase rule is
:mod:`compose_lens.training.phases`'s), :mod:`.figure` the figures. ``compose-lens dynamics RUN --out DIR``
writes ``dynamics.csv`` (one row per checkpoint), ``phases.json`` (the onsets with their intervals, the
outcome, the timing) and ``figures/dynamics.png``. With ``--update`` the rows of an earlier
``DIR/dynamics.csv`` made of the same run with the same settings are kept and only the checkpoints written
since are evaluated; another run's are refused. The report reads them back where they hold every
checkpoint it asks for (:func:`_saved`) and extends them where the run has written more.
"""

from __future__ import annotations

from compose_lens.registry.analysis import Analysis, Option, Result


def _dynamics(ctx, settings: dict) -> Result:
    from compose_lens.training import runs
    from compose_lens.registry.dynamics.checkpoints import phases_document, trajectory, trajectory_settings
    from compose_lens.training.outcome import trajectory_outcome

    known = None
    if settings["update"] and ctx.previous is not None:
        asked = trajectory_settings(settings["pool_size"], settings["slot_size"], ctx.seed, not settings["no_circuit"],
                                    ctx.split)
        known = runs.previous_dynamics(ctx.previous, asked, ctx.source, ctx.split)
    traj = trajectory(ctx.source, ctx.split, pool_size=settings["pool_size"], slot_size=settings["slot_size"],
                      seed=ctx.seed, circuit=not settings["no_circuit"], steps=list(settings["steps"]) or None,
                      stride=settings["stride"], progress=ctx.progress, device=ctx.device,
                      threads=settings["threads"], known=known)
    doc = phases_document(traj)
    doc["outcome"] = trajectory_outcome(traj.table.to_dict("records"), ctx.source, traj.config)
    return Result(tables={"dynamics": traj.table}, documents={"phases": doc})


def _figures(ctx, result: Result, settings: dict) -> list:
    from compose_lens.registry.dynamics.figure import dynamics_figure

    return [("dynamics", dynamics_figure, (result.tables["dynamics"], result.documents["phases"]), 110)]


def _saved(ctx, folder, settings: dict) -> Result | None:
    """The dynamics saved in ``folder`` where they hold every checkpoint asked for (whatever their settings;
    never with ``update`` off), the phases measured again."""
    from compose_lens.training import runs

    if not (settings["update"] and (folder / runs.DYNAMICS_FILE).exists() and (folder / runs.PHASES_FILE).exists()):
        return None
    table, doc = runs.load_dynamics(folder)
    wanted = runs.select_checkpoints(runs.find_checkpoints(ctx.source, ctx.split)[0], stride=settings["stride"])
    if not {c.step for c in wanted} <= set(int(s) for s in table["step"]):
        return None
    phases = runs.run_phases_measured(table, ctx.source, doc.get("settings"), ctx.split)
    return Result(tables={"dynamics": table}, documents={"phases": {**doc, "phases": phases}})


def _section(inp, result: Result, settings: dict) -> str:
    from compose_lens.registry.dynamics.figure import (accuracy_by_variable_count_figure, progress_measures_figure,
                                                       refinement_figure)

    table, doc, task, report = result.tables["dynamics"], result.documents["phases"], inp.subject.config.task, inp.report
    t, phases = doc.get("timing", {}), doc["phases"]
    parts = [f"<p>{len(table)} checkpoints (steps {int(table['step'].min())} to {int(table['step'].max())}); "
             f"evaluation took {t.get('seconds_per_checkpoint', float('nan')):.2f} s per checkpoint. "
             f"Saved in <code>dynamics.csv</code> and <code>phases.json</code>.</p>"]
    parts.append(report.figure(accuracy_by_variable_count_figure(table, phases, inp.outcome),
                               "accuracy_by_variable_count", "Accuracy of the nine pools by variable count; "
                               "dashed lines: phase onsets; the title gives the run's outcome. Where the checkpoints "
                               "are dense in a short stretch, a second row enlarges it; a dotted line crosses a gap "
                               "in the checkpoints (nothing measured there)."))
    parts.append(report.figure(progress_measures_figure(table, phases), "progress_measures",
                               "Progress measures over training with the phase boundaries. The losses are over all "
                               "p² constant-operand sums: the restricted loss keeps only the key frequencies of "
                               "MLP2's activations (low: the key frequencies suffice), the excluded loss removes "
                               "them (high: the model needs them)."))
    forbidden = tuple(task.left_forbidden) + tuple(task.right_forbidden)
    parts.append(report.figure(
        refinement_figure(table, task.variable_names, forbidden, phases), "late_refinement",
        "The late refinement: the layer-1 = query's score for each variable key equalises when the "
        "var-restricted sequences are solved; the forbidden-slot accuracies show which slot is learned last."))
    return "\n".join(parts)


def _sizes(settings: dict, config) -> None:
    from compose_lens.data.safety import check_sizes

    n_slots = len(config.task.left_forbidden) + len(config.task.right_forbidden)
    check_sizes(config, {f"--pool-size {settings['pool_size']}": (settings["pool_size"], 9),  # the nine pools
                         f"--slot-size {settings['slot_size']}": (settings["slot_size"], 2 * n_slots)})  # 1-, 2-var


def _lines(result: Result) -> list[str]:
    from compose_lens.core import study
    from compose_lens.training.phases import phase_line

    doc = result.documents["phases"]
    t = doc["timing"]
    lines = [f"{t['evaluated_now']} of {doc['checkpoints']} checkpoints evaluated in {t['seconds']:.1f} s "
             f"({t['seconds_per_checkpoint']:.2f} s each; 300 checkpoints ~ "
             f"{t['extrapolated_300_checkpoints_s'] / 60:.1f} min); circuit measures: "
             f"{'yes' if doc['circuit_measures'] else 'no'}"]
    lines += [f"  {name:11s} {phase_line(phase)}   [study: {study.PHASES[name]}]" for name, phase in doc["phases"].items()]
    lines.append(f"outcome: {doc['outcome']['outcome']} ({doc['outcome']['why']})")
    return lines


DYNAMICS = Analysis(
    name="dynamics", title="Training dynamics and the three phases", compute=_dynamics, of="run",
    settings={"pool_size": 2000, "slot_size": 500, "steps": (), "stride": 1, "no_circuit": False, "threads": 1,
              "update": False},
    figures=("dynamics", "accuracy_by_variable_count", "progress_measures", "late_refinement"),
    module="compose_lens.registry.dynamics.checkpoints", tables=("dynamics",), documents=("phases",), draw=_figures,
    section=_section, saved=_saved,
    command="dynamics", help="evaluate every checkpoint of a run and find the three phases",
    options=(Option("--pool-size", "pool_size", "sequences per accuracy pool"),
             Option("--slot-size", "slot_size", "sequences per forbidden-slot batch"),
             Option("--steps", "steps", "only these checkpoint steps", many=True, kind=int, metavar="STEP",
                    minimum=0),
             Option("--stride", "stride", "every k-th checkpoint (the last always kept)"),
             Option("--no-circuit", "no_circuit", "skip the circuit measures (pools only)"),
             Option("--threads", "threads", "torch threads (1 is fastest for these small ops)"),
             Option("--update", "update", "keep the rows of OUT/dynamics.csv (same settings) and evaluate only "
                                          "new checkpoints")),
    guard=_sizes, describe=_lines,
    exports=("trajectory", "find_phases=compose_lens.training.phases:find_phases"))
