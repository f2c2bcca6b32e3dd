"""The ``attention`` analysis, whole in this folder: where both layers attend on readable sequences, as
interactive views.

It runs the model once on the sequences (:func:`.sequences.sequence_views`) and writes
``figures/attention.html`` (one offline circuitsvis view per sequence, :mod:`.interactive`),
``figures/attention_<i>.png`` (each sequence's heatmap with the predicted cells outlined, :mod:`.figure`),
``attention.json`` (every view, from which :func:`views` rebuilds them) and ``attention.csv``
(:func:`.sequences.pattern_table`).

Its setting ``sequences`` holds readable sequences (``'b=7, e=5, b+23=?'`` or the token form); empty
means one example from each of four pools (:func:`compose_lens.data.sampler.example_pools`), as the report
shows. A sequence the model's task cannot parse, or more than 100, is refused in one line before any work
(the count by ``validate``, the parse by ``guard``, which sees the task). The report opens each view on the
router (:func:`router_index`), its heatmap folded under it.
"""

from __future__ import annotations

from compose_lens.registry.analysis import Analysis, Option, Result

MAX_SEQUENCES = 100  # views on one page (each inlines its patterns)


def _attention(ctx: Context, settings: dict) -> Result:
    import torch

    from compose_lens.registry.attention.sequences import pattern_table, sequence_views
    from compose_lens.data.sampler import example_sequences

    texts = list(settings["sequences"]) or example_sequences(ctx.split, ctx.seed)
    views = sequence_views(ctx.model, ctx.config, texts)
    listed = [{k: (v.tolist() if isinstance(v, torch.Tensor) else v) for k, v in view.items()} for view in views]
    return Result(tables={"attention": pattern_table(views)},
                  documents={"attention": {"model": ctx.loaded.source, "sequences": listed}},
                  provenance={"sequences": texts}, value=views)


def _figures(ctx: Context, result: Result, settings: dict) -> list:
    from compose_lens.registry.attention.figure import view_figure
    from compose_lens.registry.attention.interactive import views_page

    found = views(result)
    return [*((f"attention_{i}", view_figure, (view,), 110) for i, view in enumerate(found)),
            ("attention.html", views_page, (found, result.documents["attention"]["model"]), None)]


def views(result: Result) -> list[dict]:
    """The views of a result, computed now or read back from ``attention.json``: each entry as
    :func:`.sequences.sequence_views` gives it (patterns a tensor, marks per layer)."""
    import torch

    return [{**view, "patterns": torch.tensor(view["patterns"]),
             "marks": {int(layer): [tuple(cell) for cell in cells] for layer, cells in view["marks"].items()}}
            for view in result.documents["attention"]["sequences"]]


def router_index(inp) -> int:
    """The index, among the views' heads (layer by layer), of the router the study's routing claim is
    about (the located one; the paper's ``blocks.1`` head 0): the report's views open on it. 0 (the
    first head) where none is located."""
    router = inp.context.heads.router if inp.context is not None else None
    return 0 if router is None else router[0] * inp.subject.config.model.n_heads + router[1]


def _section(inp, result: Result, settings: dict) -> str:
    import html

    from compose_lens.registry.attention.interactive import view_html

    focus, found = router_index(inp), views(result)
    router = inp.context.plan[0].router.component if inp.context is not None else None
    role = "the router" if router is not None else "the head the study's router would be (this model has none)"
    opened = (f"each opens on {html.escape(found[0]['head_names'][focus])}, {role}"
              if focus and found else "each opens on the first layer")
    parts = [f"<p>One interactive view per example (circuitsvis, drawn offline): {opened}; pick a layer to "
             "enlarge it, hover a token to see where it attends. Under each, folded, the same patterns as a "
             "heatmap with the circuit's cells outlined.</p>"]
    for i, view in enumerate(found):
        parts.append(view_html(view, focus))
        figure = inp.report.figure(result.figure(f"attention_{i}"), f"attention_{i}", "Layer 1: = to the operands "
                                   "(blue), each value to its variable (green, dashed); layer 2: = to the "
                                   "values (orange). Colour: square root of the attention weight, so weights "
                                   "near 0.2 stay visible.")
        parts.append(f"<details><summary>heatmap with the circuit's cells outlined</summary>{figure}</details>")
    return "\n".join(parts)


def _check_count(settings: dict) -> None:
    from compose_lens.core.errors import ComposeLensError

    sequences = settings["sequences"]
    if isinstance(sequences, str) or not all(isinstance(s, str) for s in sequences):
        raise ComposeLensError(f"sequences {sequences!r}: give a list of readable sequences, e.g. "
                               "['b=7, e=5, b+23=?']")
    if len(sequences) > MAX_SEQUENCES:
        raise ComposeLensError(f"{len(sequences)} sequences: at most {MAX_SEQUENCES} per page; "
                               "split them over several --out folders")


def _check_parse(settings: dict, config) -> None:
    from compose_lens.data.task import SequenceError, parse_sequence
    from compose_lens.core.errors import ComposeLensError

    for text in settings["sequences"]:
        try:
            parse_sequence(config.task, text)
        except SequenceError as error:
            raise ComposeLensError(f"sequence {text!r}: {error}") from None


def _lines(result: Result) -> list[str]:
    return [f"{'ok ' if view['correct'] else 'WRONG'} {view['text']:40s} -> {view['answer']} (label {view['label']})"
            for view in result.documents["attention"]["sequences"]]


ATTENTION = Analysis(
    name="attention", title="Attention on example sequences", compute=_attention,
    settings={"sequences": ()},
    figures=(r"attention_\d+", "attention"), module="compose_lens.registry.attention.sequences", tables=("attention",),
    documents=("attention",), command="attention", draw=_figures, section=_section,
    report_settings=lambda inp: {"sequences": inp.examples},  # none: the split's examples, as analyze makes them
    help="attention views of readable sequences (offline HTML + a heatmap each)",
    options=(Option("sequences", "sequences", "readable sequences, e.g. 'b=7, e=5, b+23=?' (none: one example "
                    "from each of four pools: held-out constants, 1-var training, held-out 2-var, 2-var in forbidden "
                    "slots; where the split has none of one, its training pool)", many=True, positional=True),),
    validate=_check_count, guard=_check_parse, describe=_lines,
    exports=("sequence_views", "attention_figure=compose_lens.registry.attention.figure:view_figure",
             "interactive_attention=compose_lens.registry.attention.interactive:notebook_view"))
