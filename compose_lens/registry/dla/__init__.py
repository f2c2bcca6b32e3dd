"""The ``dla`` analysis: direct logit attribution and the logit lens at ``=`` (:mod:`.attribution`)."""

from __future__ import annotations

from compose_lens.registry.analysis import Analysis, Option, Result


def _dla(ctx: Context, settings: dict) -> Result:
    from compose_lens.registry.dla import attribution

    table = attribution.logit_attribution(ctx.loaded, settings["n"], ctx.seed)
    lens = attribution.logit_lens(ctx.loaded, settings["n"], ctx.seed)
    by_pool = attribution.logit_attribution(ctx.loaded, settings["n"], ctx.seed, by="pool")
    return Result(tables={"logit_attribution": table, "logit_lens": lens, "logit_attribution_by_pool": by_pool})


def _dla_figures(ctx: Context, result: Result, settings: dict) -> list:
    from compose_lens.registry.dla.figure import logit_attribution_figure

    t = result.tables
    return [("logit_attribution", logit_attribution_figure,
             (t["logit_attribution"], t["logit_lens"], t.get("logit_attribution_by_pool")), 120)]


def _dla_section(inp, result: Result, settings: dict) -> str:
    from compose_lens.core.markup import html_table

    table = result.tables["logit_attribution"]
    kinds = table.drop_duplicates("kind")
    largest = table.loc[table.groupby("kind")["share"].idxmax()].set_index("kind")["component"]
    rows = [[k.kind, float(k.margin), float(k.accuracy), int(k.n), largest[k.kind]] for k in kinds.itertuples()]
    norm = inp.subject.config.model.normalization_type
    why = ("since the model has no normalisation" if norm is None else
           f"with its final {norm} normalisation's scale held at the value the model computed for each sequence "
           f"(a component's effect on that scale, and so on the others' terms, is not a direct term)")
    return ("<p>The answer's margin at <code>=</code> (its logit minus the mean logit) is a sum of one term per "
            f"component, {why}; each bar is a component's share of it (values "
            "of at least 0.05 printed). The logit lens reads the residual stream through the unembedding "
            f"after each stage ({settings['n']} sequences). <code>compose-lens dla</code> writes both tables.</p>"
            + html_table(rows, ["sequence kind", "mean margin (logits)", "accuracy", "sequences",
                                "largest direct share"])
            + inp.report.figure(result.figure("logit_attribution"), "logit_attribution",
                                "Left: each component's direct contribution per pool with its 95 % interval, but "
                                "the one that writes nearly the whole margin (named above the panel); a sign that "
                                "differs between training and add-restricted pools shows here. Right: logit-lens "
                                "accuracy after each stage."))


def _dla_memory(settings: dict, config) -> None:
    """``n`` sequences drawn twice (attribution and lens), each keeping a whole cached forward and the model's
    own forward of them."""
    from compose_lens.data.safety import activation_bytes, cached_forward_bytes, check_sizes

    n = settings["n"]
    check_sizes(config, {f"--n {n}": (n, 2)}, cached_forward_bytes(config) + activation_bytes(config, False))


def _dla_lines(result: Result) -> list[str]:
    table = result.tables["logit_attribution"]
    shared = table.dropna(subset=["share"])  # a kind whose mean margin is 0 has no shares (degenerate weights)
    top = shared.loc[shared.groupby("kind")["share"].idxmax()]
    return [f"  {row.kind}: {row.component} writes {row.share:.0%} of the answer margin "
            f"({row.contribution:.2f} of {row.margin:.2f})" for row in top.itertuples()] + [
        f"  {kind}: its mean answer margin is 0, so no component has a share of it"
        for kind in table["kind"].drop_duplicates() if kind not in set(shared["kind"])]


DLA = Analysis(
    name="dla", title="Direct logit attribution and logit lens at =", compute=_dla,
    settings={"n": 600}, module="compose_lens.registry.dla.attribution",
    tables=("logit_attribution", "logit_lens", "logit_attribution_by_pool"),
    figures=("logit_attribution",), draw=_dla_figures, section=_dla_section,
    command="dla", help="direct logit attribution and logit lens at '='",
    options=(Option("--n", "n", "sequences, drawn evenly from the nine pools", minimum=9),),
    guard=_dla_memory,
    describe=_dla_lines, exports=("logit_attribution", "logit_lens"))
