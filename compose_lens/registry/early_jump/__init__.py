"""The ``early_jump`` analysis: the study's "early generalisation" figure, :mod:`.jump`'s states at the two
checkpoints that bracket the variable-assignment jump. Like ``dynamics`` it reads a run's checkpoints
(``of="run"``; its command's test is in ``registry/dynamics/test_dynamics.py``, on that file's tiny run).

``compose-lens early-jump RUN --out DIR`` writes ``early_jump.json`` (both states) and
``figures/early_jump.png``. Without ``--before`` / ``--after`` the bracket is the assignment phase's, read
from the run's dynamics (``RUN/results/phases.json``, as ``compose-lens dynamics RUN --out RUN/results``
writes it). The report shows it on its second example sequence, at the bracket of the phases it measured.
"""

from __future__ import annotations

from pathlib import Path

from compose_lens.registry.analysis import Analysis, Option, Result


def _early_jump(ctx, settings: dict) -> Result:
    from compose_lens.training import runs
    from compose_lens.registry.early_jump.jump import jump_states
    from compose_lens.data.sampler import example_sequences
    from compose_lens.core.errors import ComposeLensError

    saved = [f for f in (ctx.previous, Path(ctx.source) / "results")  # where the run's dynamics were written
             if f is not None and all((Path(f) / name).exists() for name in (runs.DYNAMICS_FILE, runs.PHASES_FILE))]
    table, doc = runs.load_dynamics(saved[0]) if saved else (None, None)
    before, after = settings["before"], settings["after"]
    if before is None or after is None:
        bracket = ((doc or {}).get("phases") or {}).get("assignment", {}).get("bracket")
        if not bracket or bracket[0] == bracket[1]:
            raise ComposeLensError(f"{ctx.source}: no variable-assignment jump in its dynamics; give --before and "
                                   f"--after, or run `compose-lens dynamics {ctx.source} --out "
                                   f"{Path(ctx.source) / 'results'}` first")
        before, after = bracket
    text = settings["sequence"] or example_sequences(runs.find_checkpoints(ctx.source, ctx.split)[2], ctx.seed)[1]
    first, second, names = jump_states(ctx.source, before, after, text, table, ctx.split)
    listed = [{k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in state.items()} for state in (first, second)]
    return Result(documents={"early_jump": {"text": text, "variables": names, "states": listed}})


def _bracket(settings: dict) -> None:
    from compose_lens.core.errors import ComposeLensError

    before, after = settings["before"], settings["after"]
    if (before is None) != (after is None):
        given = "--before" if after is None else "--after"
        raise ComposeLensError(f"{given} alone: give both --before and --after (the checkpoints on each side of "
                               f"the jump), or neither to read the bracket from the run's dynamics")
    if before is not None and before >= after:
        raise ComposeLensError(f"--before {before} --after {after}: the checkpoint before the jump comes first; "
                               f"give --before a smaller step than --after")


def _depth(settings: dict, config) -> None:
    from compose_lens.core.errors import ComposeLensError

    if config.model.n_layers < 2:
        raise ComposeLensError(f"a {config.model.n_layers}-layer model: the early jump reads layer 1's attention "
                               f"and layer 2's routing, so it needs at least 2 layers")


def _figures(ctx, result: Result, settings: dict) -> list:
    import numpy as np

    from compose_lens.registry.early_jump.figure import early_jump_figure

    doc = result.documents["early_jump"]
    first, second = ({**s, "pattern0": np.asarray(s["pattern0"]), "identity": np.asarray(s["identity"])}
                     for s in doc["states"])
    return [("early_jump", early_jump_figure, (first, second, list(doc["variables"])), 110)]


def _asked(inp) -> dict | None:
    """The report's settings: the assignment phase's bracket and its second example; None: no jump to show."""
    bracket = inp.phases["assignment"].get("bracket")
    if not bracket or bracket[0] == bracket[1]:
        return None
    return {"before": bracket[0], "after": bracket[1], "sequence": inp.texts[1]}


def _section(inp, result: Result | None, settings: dict) -> str:
    import html

    if result is None:
        return '<p class="missing">No variable-assignment jump found in the checkpoints.</p>'
    return inp.report.figure(result.figure("early_jump"), "early_jump",
                             f"Layer-1 attention on <code>{html.escape(settings['sequence'])}</code> and the layer-2 "
                             f"identity matrix at steps {settings['before']} and {settings['after']}.")


EARLY_JUMP = Analysis(
    name="early_jump", title="The early generalisation jump", compute=_early_jump, of="run",
    settings={"sequence": None, "before": None, "after": None},
    figures=("early_jump",), module="compose_lens.registry.early_jump.jump", documents=("early_jump",),
    draw=_figures, section=_section, report_settings=_asked, anchor="jump",
    command="early-jump", help="layer-1 attention and layer-2 identity just before and after the assignment jump",
    options=(Option("--sequence", "sequence", "readable sequence (default: a 1-var sequence of the pools)", kind=str),
             Option("--before", "before", "checkpoint step before the jump (default: the assignment bracket's)",
                    kind=int, minimum=0, metavar="STEP"),
             Option("--after", "after", "checkpoint step after the jump", kind=int, minimum=0, metavar="STEP")),
    validate=_bracket, guard=_depth)
