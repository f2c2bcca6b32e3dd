"""The ``dynamics`` declaration: every checkpoint of a run evaluated, and the three phases found.

An analysis of a run's checkpoints (``of="run"``): its compute takes a
:class:`compose_lens.report.context.RunContext` (the run's source, split, seed and device) where a one-model
analysis takes a :class:`~compose_lens.report.context.Context`. :mod:`compose_lens.analysis.dynamics` holds
the measures and the phase rule; this module only says how the command, the report and the API run it.
``compose-lens dynamics RUN --out DIR`` writes ``dynamics.csv`` (one row per checkpoint),
``phases.json`` (the onsets with their intervals, the outcome, the timing) and ``figures/dynamics.png``.
With ``--update`` the rows of an earlier ``DIR/dynamics.csv`` made of the same run with the same settings are
kept and only the checkpoints written since are evaluated; another run's are refused.
"""

from __future__ import annotations

from compose_lens.registry.analysis import Analysis, Option, Result


def _settings_of_trajectory(ctx, settings: dict) -> dict:
    from compose_lens.analysis.dynamics import trajectory_settings

    return trajectory_settings(settings["pool_size"], settings["slot_size"], ctx.seed, not settings["no_circuit"],
                               ctx.split)


def _dynamics(ctx, settings: dict) -> Result:
    from compose_lens.views.training import dynamics_figure
    from compose_lens.training import runs
    from compose_lens.analysis.dynamics import phases_document, trajectory
    from compose_lens.training.outcome import trajectory_outcome

    known = None
    if settings["update"] and ctx.previous is not None:
        known = runs.previous_dynamics(ctx.previous, _settings_of_trajectory(ctx, settings), ctx.source, ctx.split)
    traj = trajectory(ctx.source, ctx.split, pool_size=settings["pool_size"], slot_size=settings["slot_size"],
                      seed=ctx.seed, circuit=not settings["no_circuit"], steps=list(settings["steps"]) or None,
                      stride=settings["stride"], progress=ctx.progress, device=ctx.device,
                      threads=settings["threads"], known=known)
    doc = phases_document(traj)
    doc["outcome"] = trajectory_outcome(traj.table.to_dict("records"), ctx.source, traj.config)
    return Result(tables={"dynamics": traj.table}, documents={"phases": doc},
                  figures=[("dynamics", dynamics_figure, (traj.table, doc), 110)])


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
    figures=("dynamics",), module="compose_lens.analysis.dynamics", tables=("dynamics",), documents=("phases",),
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
    exports=("trajectory", "find_phases"))
