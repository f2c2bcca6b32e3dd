"""The ``answer_lens`` analysis, whole in this folder: the worked example of docs/extending.md.

How far the answer at ``=`` is made after each layer, pool by pool (:mod:`.lens` says how it is read). In the
study's model nothing can add before layer 2's MLP, so the answer should come on top only after the last layer.

The folder is everything the analysis is: ``lens.py`` the numbers (a subject in, a DataFrame out),
``figure.py`` its figure (of those numbers only), this module its declaration (:data:`ANSWER_LENS`), report
section and the lines its command prints, ``test_answer_lens.py`` its tests. The registry's scan finds it
(:func:`compose_lens.registry.load`), with no edit anywhere else.
"""

from __future__ import annotations

from compose_lens.registry.analysis import Analysis, Option, Result


def _compute(ctx, settings: dict) -> Result:
    from compose_lens.registry.answer_lens.lens import answer_lens, first_stage_on_top

    table = answer_lens(ctx.loaded, settings["pool_size"], ctx.seed)
    last = table["order"].max()
    return Result(tables={"answer_lens": table},
                  facts={"answer_on_top_at": first_stage_on_top(table),
                         "answer_top1_before_last_layer": float(table.loc[table["order"] < last, "top1"].max())})


def _draw(ctx, result: Result, settings: dict) -> list:
    from compose_lens.registry.answer_lens.figure import answer_lens_figure

    return [("answer_lens", answer_lens_figure, (result.tables["answer_lens"],), 120)]


def _lines(result: Result) -> list[str]:
    table = result.tables["answer_lens"]
    return [f"  {pool}: top-1 " + ", ".join(f"{r.stage} {r.top1:.2f}" for r in rows.itertuples())
            for pool, rows in table.sort_values("order").groupby("pool", sort=False)]


def _section(inp, result: Result, settings: dict) -> str:
    from compose_lens.core.markup import html_table

    table = result.tables["answer_lens"].sort_values(["order", "pool"], kind="stable")
    rows = [[r.pool, r.stage, f"{r.logit:.2f}", f"{r.margin:.2f}", f"{r.top1:.2f} [{r.low:.2f}, {r.high:.2f}]", r.n]
            for r in table.itertuples()]
    return ("<p>The residual stream at <code>=</code> read through the final normalisation and the unembedding "
            f"after the embeddings and after each layer ({settings['pool_size']} sequences per pool): the answer's "
            "mean logit, its mean margin over the best other token, and how often it is on top (95 % Wilson "
            "interval). After the last layer this is the model's own answer.</p>"
            + html_table(rows, ["pool", "stage", "answer logit", "margin", "top-1 rate", "n"])
            + inp.report.figure(result.figure("answer_lens"), "answer_lens",
                                "Top-1 rate (left) and margin (right) of the answer after each stage, a line per pool."))


ANSWER_LENS = Analysis(
    name="answer_lens", title="Answer lens: the answer after each layer", compute=_compute,
    settings={"pool_size": 200}, module="compose_lens.registry.answer_lens.lens",
    tables=("answer_lens",), figures=("answer_lens",), draw=_draw, section=_section,
    command="answer-lens", help="the answer's logit, margin and top-1 rate after each layer, per pool",
    options=(Option("--pool-size", "pool_size", "sequences per pool"),),
    describe=_lines, exports=("answer_lens",))
