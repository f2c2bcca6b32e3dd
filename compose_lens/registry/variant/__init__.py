"""The ``variant`` analysis: what the circuit reads in a noisier context (reassignment, fillers, chains;
:mod:`.reading`); it applies to variant tasks only.
"""

from __future__ import annotations

from compose_lens.registry.analysis import Analysis, Finding, Result


def _variant(ctx: Context, settings: dict) -> Result:
    from compose_lens.registry.variant.reading import variant_reading

    tables, facts = variant_reading(ctx.loaded, ctx.plan[0], settings["n"], ctx.seed)
    return Result(tables=tables, documents={"variant_reading": facts}, facts=facts)


def _variant_section(inp, result: Result, settings: dict) -> str:
    import html

    from compose_lens.core.markup import html_table

    task, facts = inp.subject.config.task, result.documents["variant_reading"]
    by_role, fillers = result.tables["attention_by_role"], result.tables["binding_through_fillers"]
    asked = ", ".join(f"{k}={getattr(task, k)}" for k in ("reassign_rate", "noise_rate", "chain_rate")
                      if getattr(task, k))
    parts = [f"<p>This task is a variant ({html.escape(asked)}; docs/variants.md). Read on {settings['n']} "
             f"sequences ({html.escape(facts['variant_sequences'])}) at the located heads.</p>"]
    if facts.get("router_latest_over_stale") is not None:
        parts.append(f"<p>Reassignment: the router attends from <code>=</code> to the queried variables' latest "
                     f"values with {facts['router_on_queried_values']:.3f} of its weight and to their stale values "
                     f"with {facts['router_on_stale_values']:.3f}; it weights the latest above the stale in "
                     f"{facts['router_latest_over_stale']:.1%} of the sequences that have a stale value.</p>")
    if facts.get("binder_through_one_filler") is not None:  # a question the task does not ask is not a key
        parts.append(f"<p>Fillers: with one filler word between a variable and its value (<code>b is 7</code>) the "
                     f"binder attends from the value to its variable with {facts['binder_through_one_filler']:.3f} "
                     "of its weight (the table: by the number of fillers, and to the token right before the value).</p>")
    if len(by_role):
        wide = by_role.pivot_table(index="role", columns="component", values="mean", sort=False)
        parts.append("<h3>Attention from = by position role</h3>"
                     + html_table([[role, *(f"{v:.3f}" for v in row)] for role, row in wide.iterrows()],
                                  ["role", *wide.columns]))
    else:
        parts.append("<p>No head is located as binder or router: nothing reads the context yet.</p>")
    if len(fillers):
        parts.append("<h3>The binder: from a value to its variable</h3>"
                     + html_table([[int(r.fillers), f"{r.to_variable:.3f}", f"{r.previous:.3f}", int(r.n)]
                                   for r in fillers.itertuples()],
                                  ["fillers between", "attention to its variable", "to the token before", "values"]))
    return "\n".join(parts)


VARIANT = Analysis(name="variant", title="The task variant: what the circuit reads", compute=_variant,
                   settings={"n": 1000}, module="compose_lens.registry.variant.reading",
                   tables=("attention_by_role", "binding_through_fillers"), documents=("variant_reading",),
                   section=_variant_section, applies=lambda config: config.task.is_variant,
                   findings=(Finding("router_latest_over_stale", "reassignment: = weights the latest value above "
                                     "the stale one (share of sequences)", "near 1 (>= 0.9)", 0.9),
                             Finding("binder_through_one_filler", "fillers: a value attends to its variable past "
                                     "one filler", "near 1 (>= 0.9)", 0.9)),
                   exports=("variant_reading", "attention_by_role", "binding_through_fillers"))
