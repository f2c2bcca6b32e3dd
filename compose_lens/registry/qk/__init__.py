"""The ``qk`` analysis: the two QK views of the located heads, read from the weights only (:mod:`.matrices`).
Its figures' tests are with the other figures' (``tests/unit/test_figures_issue43.py``,
``test_figures_for_print.py``, ``test_views_backend.py``).
"""

from __future__ import annotations

from compose_lens.registry.analysis import Analysis, Result


def _qk(ctx: Context, settings: dict) -> Result:
    from compose_lens.registry.qk.figure import positional_frame
    from compose_lens.registry.qk.matrices import qk_matrices
    from compose_lens.views.drawing import matrix_frame

    positional, identity = qk_matrices(ctx.model, ctx.config, ctx.heads)  # None: no head plays it
    names = ctx.config.task.variable_names
    tables = {} if positional is None else {"positional_qk": positional_frame(positional)}
    if identity is not None:
        tables["variable_identity"] = matrix_frame(identity, names, names, "query_variable")
    return Result(tables=tables)


def _scores(table):
    """The binder's positional scores, read back from the ``positional_qk`` table."""
    return table[table["matrix"] == "score"].drop(columns=["query_position", "matrix"]).to_numpy(copy=True)


def _qk_figures(ctx: Context, result: Result, settings: dict) -> list:
    from compose_lens.registry.qk.figure import positional_qk_figure, variable_identity_figure

    t, figures = result.tables, []
    if "positional_qk" in t:
        figures.append(("positional_qk", positional_qk_figure, (_scores(t["positional_qk"]), ctx.heads.binder[0]),
                        120))
    if "variable_identity" in t:
        identity = t["variable_identity"].drop(columns="query_variable").to_numpy(copy=True)
        figures.append(("variable_identity", variable_identity_figure, (identity, ctx.config.task.variable_names),
                        120))
    return figures


def _positional_caption(positional, task, binder: tuple[int, int]) -> str:
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
    import html

    heads, t = inp.context.heads, result.tables
    parts = [f"<p>The heads read: {html.escape(heads.how)}.</p>"]
    if "positional_qk" in t:
        parts.append(inp.report.figure(result.figure("positional_qk"), "positional_qk", _positional_caption(
            _scores(t["positional_qk"]), inp.subject.config.task, heads.binder)))
    if "variable_identity" in t:
        parts.append(inp.report.figure(result.figure("variable_identity"), "variable_identity", "The router's "
                                       "variable-identity score: a query = carrying one variable (row) against a key "
                                       "value tagged with another (column); the diagonal is the matching variable."))
    if not t:
        parts.append('<p class="missing">No head plays the binder, so there is no QK circuit to draw.</p>')
    return "\n".join(parts)


QK = Analysis(name="qk", title="Previous-token head and variable-identity routing", compute=_qk,
              tables=("positional_qk", "variable_identity"),
              figures=("positional_qk", "variable_identity"), draw=_qk_figures, section=_qk_section,
    exports=("qk_matrices=compose_lens.registry.qk.matrices", "qk_heatmaps_figure=compose_lens.registry.qk.figure"))
