"""The ``qk`` declaration: the two QK views of the located heads, read from the weights only.

One declaration module of :mod:`compose_lens.registry` (its module doc says what a declaration
holds); ``ctx: Context`` below is a :class:`compose_lens.context.Context` (not imported: it reads
the registry).
"""

from __future__ import annotations

from compose_lens.registry.analysis import Analysis, Result


# -- qk: the two QK views (weights only, 0.1 s each) --------------------------------------------


def _qk(ctx: Context, settings: dict) -> Result:
    import compose_lens.plots as plots
    from compose_lens.analysis import figure_data

    positional, identity = figure_data.qk_matrices(ctx.model, ctx.config, ctx.heads)  # None: no head plays it
    drawn = {} if positional is None else {"positional_qk": plots.positional_qk_figure(positional)}
    if identity is not None:
        drawn["variable_identity"] = plots.variable_identity_figure(identity, ctx.config.task.variable_names)
    return Result(tables={name: table for name, (_, table) in drawn.items()},
                  drawn=[(name, fig, 120) for name, (fig, _) in drawn.items()])


def _qk_section(inp, result: Result, settings: dict) -> str:
    """The two figures the analysis draws, of the located binder and router."""
    import html

    import compose_lens.plots as plots
    from compose_lens.analysis import figure_data

    heads = inp.context.heads
    positional, identity = figure_data.qk_matrices(inp.model, inp.config, heads)
    parts = [f"<p>The heads read: {html.escape(heads.how)}.</p>"]
    if positional is not None:
        parts.append(inp.report.figure(plots.positional_qk_figure(positional), "positional_qk",
                                       "The binder's positional score: query position (row) against key "
                                       "position (column) over the context; the cells above the diagonal are "
                                       "later positions, masked."))
    if identity is not None:
        parts.append(inp.report.figure(plots.variable_identity_figure(identity, inp.config.task.variable_names),
                                       "variable_identity", "The router's variable-identity score: a query = "
                                       "carrying one variable (row) against a key value tagged with another "
                                       "(column); the diagonal is the matching variable."))
    if positional is None and identity is None:
        parts.append('<p class="missing">No head plays the binder, so there is no QK circuit to draw.</p>')
    return "\n".join(parts)


QK = Analysis(name="qk", title="Previous-token head and variable-identity routing", compute=_qk,
              tables=("positional_qk", "variable_identity"), section=_qk_section, report_after="attention")
