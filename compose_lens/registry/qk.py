"""The ``qk`` declaration: the two QK views of the located heads, read from the weights only.

One declaration module of :mod:`compose_lens.registry` (its module doc says what a declaration
holds); ``ctx: Context`` below is a :class:`compose_lens.context.Context` (not imported: it reads
the registry).
"""

from __future__ import annotations

from compose_lens.registry.analysis import Analysis, Result


# -- qk: the two QK views (weights only, 0.1 s each) --------------------------------------------


def _qk(ctx: Context, settings: dict) -> Result:
    from compose_lens.analysis import figure_data
    from compose_lens.views.attention import positional_qk_figure, variable_identity_figure

    positional, identity = figure_data.qk_matrices(ctx.model, ctx.config, ctx.heads)  # None: no head plays it
    drawn = ({} if positional is None else
             {"positional_qk": positional_qk_figure(positional, block=ctx.heads.binder[0])})
    if identity is not None:
        drawn["variable_identity"] = variable_identity_figure(identity, ctx.config.task.variable_names)
    return Result(tables={name: table for name, (_, table) in drawn.items()},
                  drawn=[(name, fig, 120) for name, (fig, _) in drawn.items()])


def _positional_caption(positional, task, binder: tuple[int, int]) -> str:
    """What the positional figure shows and marks, with where its rows peak (issue 43: the outlines sat one
    below the diagonal, the peaks on it, and nothing said why)."""
    from compose_lens.analysis.probes import positional_peaks, previous_position_fraction
    from compose_lens.views.drawing import layer_name

    peaks = positional_peaks(positional)
    fillers = (" (with filler words inside an assignment the variable can sit further back)"
               if task.noise_rate > 0 else "")
    return (f"The binder's ({layer_name(binder[0])} head {binder[1]}) attention from position alone: the "
            "softmax, over the keys a query may attend to, of the positional part of its score, "
            "P W_Q (P W_K)^T / sqrt(d_head) (query position row, key position column, later keys blank), in "
            "attention weight, the unit of the attention views. Outlined: the key one back, the variable's "
            "when the query holds a value, where the previous-token head peaks on real sequences (the "
            f"attention view above){fillers}; any position after the first can hold a value, the padding "
            f"being scattered. Position alone puts a row's peak on the diagonal (the query itself) in "
            f"{peaks['on_diagonal']} of {peaks['query_positions']} query positions and one back in "
            f"{peaks['just_below']}; among the earlier keys alone, one back scores highest in "
            f"{previous_position_fraction(positional):.0%} of them. Where an outlined cell is not its row's "
            "peak here, the look back comes from the tokens (the key is a variable), not from position.")


def _qk_section(inp, result: Result, settings: dict) -> str:
    """The two figures the analysis draws, of the located binder and router."""
    import html

    from compose_lens.analysis import figure_data
    from compose_lens.views.attention import positional_qk_figure, variable_identity_figure

    heads = inp.context.heads
    positional, identity = figure_data.qk_matrices(inp.subject.model, inp.subject.config, heads)
    parts = [f"<p>The heads read: {html.escape(heads.how)}.</p>"]
    if positional is not None:
        parts.append(inp.report.figure(positional_qk_figure(positional, block=heads.binder[0]),
                                       "positional_qk", _positional_caption(positional, inp.subject.config.task,
                                                                            heads.binder)))
    if identity is not None:
        parts.append(inp.report.figure(variable_identity_figure(identity, inp.subject.config.task.variable_names),
                                       "variable_identity", "The router's variable-identity score: a query = "
                                       "carrying one variable (row) against a key value tagged with another "
                                       "(column); the diagonal is the matching variable."))
    if positional is None and identity is None:
        parts.append('<p class="missing">No head plays the binder, so there is no QK circuit to draw.</p>')
    return "\n".join(parts)


QK = Analysis(name="qk", title="Previous-token head and variable-identity routing", compute=_qk,
              tables=("positional_qk", "variable_identity"),
              figures=("positional_qk", "variable_identity"), section=_qk_section,
    exports=("qk_matrices=compose_lens.analysis.figure_data", "qk_heatmaps_figure=compose_lens.views.attention"))
